"""Fast Walsh–Hadamard transform (FWHT) along the last dimension."""

from icml_kernels.fwht.op import fwht, fwht_op
from icml_kernels.fwht.reference import fwht_reference, hadamard_matrix

__all__ = ["fwht", "fwht_op", "fwht_reference", "hadamard_matrix"]
