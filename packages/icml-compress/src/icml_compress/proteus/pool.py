"""The vetted MUL-BAL candidate pool.

Written by a vetting script of the source repository (not in the wheel; full table:
``docs/mulbal_vetting.csv`` there): the 8 best candidates that pass every overlap-local gate of
:mod:`icml_compress.proteus.vetting`, one per multiplier, out of 1153 (384 random odd multipliers x field
widths 6, 7, 8, plus QTIP's 1MAD constants), best first. :func:`~icml_compress.proteus.vetting.vet_all`
recomputes them; the repository's tests check that this tuple is the top of the committed table.
"""

from icml_compress.proteus.codes import MulBal

MULBAL_POOL = (
    MulBal(3293274267, 334227121, 8),
    MulBal(1528904365, 2799818306, 8),
    MulBal(2004576817, 2713206934, 7),
    MulBal(627361847, 2245961203, 6),
    MulBal(1147766187, 3663820213, 6),
    MulBal(617666931, 2268787249, 6),
    MulBal(1448229029, 97142758, 8),
    MulBal(1498046885, 2771881642, 7),
)
