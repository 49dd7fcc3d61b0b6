"""Offline vetting of MUL-BAL candidates by overlap-local statistics (our design of Proteus' "pre-vetted
candidate pool"; the paper text was not available).

Proteus' point is that a marginally Gaussian code is not enough: on the bitshift trellis the Viterbi
search at each step chooses among the ``2^K`` *successors* of a state, which share ``L - K`` bits, and
the states that *merge* into one state differ only in their top ``K`` bits. So for a code ``c`` (normalized
over the ``2^L`` states, ``V = 1``) we measure, at several ``L``:

- marginal moments: skewness and excess kurtosis (N(0, 1): 0 and 0);
- successor sets ``S_q = {c((q << K) | j)}``: spread (root mean within-set variance; i.i.d. N(0,1):
  ``sqrt((2^K - 1) / 2^K)``), the correlation between set members across sets, and the *set distortion*
  ``E_x min_j (x - S_q[j])^2`` for ``x ~ N(0, 1)`` (how well one step's choices cover the line);
- merging sets ``{c((j << (L-K)) | q)}``: the correlation between members;
- the 2-D law of ``(c(s), c(next(s)))`` over all states and successors against N(0, I): total variation
  distance over 8 x 8 Gaussian-equiprobable cells (``tv_joint``, which also sees the marginal's
  departure from N(0, 1)), the same over 8 x 8 rank cells (``tv_copula``: dependence only), and the
  lag-1 correlation.

The reference is a random Gaussian table (the ``lut`` code) at the same ``L``, its statistics averaged
over :data:`REFERENCE_TABLES` draws. A candidate *passes* when at every ``L``: ``|skew| <= 0.1``,
``|excess kurtosis| <= 0.5``, ``tv_copula <= 2 x`` the reference's, ``|corr_lag1| <= max(0.05, 3/sqrt(n))``
(``n`` pairs), ``corr_successors <= max(0.05, 3/sqrt(n))`` (one-sided: *negative* correlation between
successors is welcome, it spreads the choices of a step, like set partitioning in trellis-coded
modulation) and ``corr_merging <= 0.35`` (states that merge into the same successors should not carry
near-equal values: that wastes paths). Its *score* is the worst ``L``'s set distortion relative to the
reference (lower is better: below 1 its successor sets cover the line better than random ones).

Why these gates: on the Gaussian source, lower set distortion goes with lower trellis MSE, and a large
merging correlation goes with higher MSE (at L = 12, candidates with merging correlation 0.63 / 0.39 /
0.34 measured 0.0743 / 0.0740 / 0.0740 against 0.0723-0.0727 for those at 0.13-0.31 and 0.0731 for lut;
128 tiles). The repository's reproduction ``proteus-gaussian`` (not in the wheel) reports the MSE of every
pool member.
"""

from __future__ import annotations

import math

import torch

from icml_compress.proteus.codes import MulBal, make_code
from icml_compress.validation import check_float_tensor, check_instance, check_int
from icml_kernels.trellis.format import K_RANGE, L_RANGE

VET_LS = (8, 10, 12, 14, 16)
CELLS = 8  # Gaussian-equiprobable bins per coordinate of the 2-D law
QUADRATURE = 64  # Gaussian quantile points for the set distortion
REFERENCE_TABLES = 8
MAX_SKEW, MAX_EXCESS_KURTOSIS, MAX_TV_RATIO, MAX_CORR, MAX_MERGING_CORR = 0.1, 0.5, 2.0, 0.05, 0.35


def overlap_stats(values: torch.Tensor, L: int, K: int = 2) -> dict:
    """Overlap-local statistics of a ``V = 1`` code's values ``(2^L,)`` (see the module docstring).

    ``values`` must be finite and not constant (they are standardized); ``L`` in 8..16, ``K`` in 1..4 with
    ``K < L``."""
    _check_L_K(L, K)
    check_float_tensor(values, "values")
    if values.numel() != 1 << L or values.dim() > 2 or (values.dim() == 2 and values.shape[1] != 1):
        raise ValueError(f"values must have shape (2^L,) = ({1 << L},), got {tuple(values.shape)}")
    v = values.double().reshape(-1)
    if v.std(unbiased=False).item() == 0:
        raise ValueError("values must not be constant (the statistics standardize them)")
    v = (v - v.mean()) / v.std(unbiased=False)
    R, Q = 1 << K, 1 << (L - K)
    succ = v.view(Q, R)  # row q: the successors (q << K) | j of every state whose low L-K bits are q
    merge = v.view(R, Q).T  # row q: the states (j << (L-K)) | q that merge into the same successors
    normal = torch.distributions.Normal(0.0, 1.0)
    x = normal.icdf((torch.arange(QUADRATURE, dtype=torch.float64, device=v.device) + 0.5) / QUADRATURE)
    set_distortion = (x.view(1, 1, -1) - succ.unsqueeze(-1)).pow(2).amin(1).mean().item()
    gauss_cells = (normal.cdf(v) * CELLS).long().clamp(0, CELLS - 1)  # (2^L,)
    rank_cells = torch.empty_like(gauss_cells)
    rank_cells[v.argsort(stable=True)] = torch.arange(1 << L, device=v.device) * CELLS >> L
    nxt = succ[torch.arange(1 << L, device=v.device) % Q]  # (2^L, R) successor values of each state
    return {
        "L": L,
        "skew": v.pow(3).mean().item(),
        "excess_kurtosis": v.pow(4).mean().item() - 3.0,
        "distinct_fraction": torch.unique(v).numel() / v.numel(),
        "successor_spread": succ.var(1, unbiased=False).mean().sqrt().item(),
        "set_distortion": set_distortion,
        "corr_successors": _mean_offdiag_corr(succ),
        "corr_merging": _mean_offdiag_corr(merge),
        "corr_lag1": torch.corrcoef(torch.stack((v.repeat_interleave(R), nxt.reshape(-1))))[0, 1].item(),
        "tv_joint": _tv_pairs(gauss_cells, Q, R),
        "tv_copula": _tv_pairs(rank_cells, Q, R),
    }


def _check_L_K(L: int, K: int) -> None:
    check_int(L, "L", *L_RANGE)
    check_int(K, "K", *K_RANGE)
    if K >= L:
        raise ValueError(f"K must be smaller than L (successor sets share L - K bits), got K={K}, L={L}")


def _tv_pairs(cells: torch.Tensor, Q: int, R: int) -> float:
    """Total variation between the law of (cell(s), cell(next(s))) and the uniform law on the cells."""
    nxt = cells.view(Q, R)[torch.arange(cells.numel(), device=cells.device) % Q]  # (2^L, R)
    pairs = (cells.unsqueeze(-1) * CELLS + nxt).reshape(-1)
    freq = torch.bincount(pairs, minlength=CELLS * CELLS).double() / pairs.numel()
    return 0.5 * (freq - 1.0 / CELLS**2).abs().sum().item()


def _mean_offdiag_corr(sets: torch.Tensor) -> float:
    """Mean correlation (over the rows) between distinct columns of ``sets (rows, R)``."""
    c = torch.corrcoef(sets.T)
    r = c.shape[0]
    return ((c.sum() - c.diagonal().sum()) / (r * (r - 1))).item()


def reference_stats(L: int, K: int = 2, tables: int = REFERENCE_TABLES) -> dict:
    """Statistics of random Gaussian tables (the ``lut`` code) at ``L``, averaged over ``tables`` draws
    (1 or more)."""
    _check_L_K(L, K)
    check_int(tables, "tables", 1)
    runs = [overlap_stats(make_code("lut", L, seed=i).values()[:, 0], L, K) for i in range(tables)]
    return {k: sum(r[k] for r in runs) / tables for k in runs[0]}


def vet(candidate: MulBal, references: dict[int, dict], K: int = 2) -> dict:
    """Score and pass/fail of one candidate against ``references`` (``L -> reference_stats(L)``, one L or
    more)."""
    check_instance(candidate, "candidate", MulBal)
    check_int(K, "K", *K_RANGE)
    if not isinstance(references, dict) or not references:
        raise TypeError(
            f"references must be a non-empty dict L -> reference_stats(L), got {references!r:.80}"
        )
    for L, ref in references.items():
        if isinstance(L, bool) or not isinstance(L, int) or not (max(L_RANGE[0], K + 1) <= L <= L_RANGE[1]):
            raise ValueError(
                f"references must map state bits L in {max(L_RANGE[0], K + 1)}..{L_RANGE[1]} to stats, got key {L!r}"
            )
        if not isinstance(ref, dict) or not all(k in ref for k in ("set_distortion", "tv_copula")):
            raise ValueError(f"references[{L!r}] must be the dict of reference_stats({L!r}), got {ref!r:.80}")
    worst, passed, per_l = -math.inf, True, {}
    for L, ref in references.items():
        s = overlap_stats(make_code("mulbal", L, mulbal=candidate).values()[:, 0], L, K)
        score = s["set_distortion"] / ref["set_distortion"]
        sets, pairs = 1 << (L - K), 1 << (L + K)
        ok = (
            abs(s["skew"]) <= MAX_SKEW
            and abs(s["excess_kurtosis"]) <= MAX_EXCESS_KURTOSIS
            and s["tv_copula"] <= MAX_TV_RATIO * ref["tv_copula"]
            and s["corr_successors"] <= max(MAX_CORR, 3 / math.sqrt(sets))
            and s["corr_merging"] <= MAX_MERGING_CORR
            and abs(s["corr_lag1"]) <= max(MAX_CORR, 3 / math.sqrt(pairs))
        )
        worst, passed = max(worst, score), passed and ok
        per_l[L] = {**s, "score": score, "passed": ok}
    return {
        "a": candidate.a,
        "b": candidate.b,
        "m": candidate.m,
        "score": worst,
        "passed": passed,
        "per_L": per_l,
    }


def vet_all(
    pool_size: int = 8, n_multipliers: int = 384, seed: int = 2026
) -> tuple[list[dict], list[MulBal]]:
    """Vet :func:`candidates` and return (every result sorted by score, the pool): the ``pool_size``
    best-scoring passing candidates with distinct multipliers (the best field width of each)."""
    check_int(pool_size, "pool_size", 1)
    check_int(n_multipliers, "n_multipliers", 0)
    check_int(seed, "seed", 0)
    references = {L: reference_stats(L) for L in VET_LS}
    results = sorted((vet(c, references) for c in candidates(n_multipliers, seed)), key=lambda r: r["score"])
    return results, select_pool(results, pool_size)


def select_pool(results: list[dict], pool_size: int = 8) -> list[MulBal]:
    """The ``pool_size`` best passing results (sorted by score) with distinct multipliers."""
    pool, seen = [], set()
    for r in results:
        if r["passed"] and int(r["a"]) not in seen:
            seen.add(int(r["a"]))
            pool.append(MulBal(int(r["a"]), int(r["b"]), int(r["m"])))
    return pool[:pool_size]


def candidates(n_multipliers: int = 64, seed: int = 2026) -> list[MulBal]:
    """The candidates vetted: ``n_multipliers`` random odd 32-bit multipliers (each with a random
    increment) times field widths ``m`` in 6, 7, 8, plus QTIP's 1MAD constants with ``m = 8``."""
    gen = torch.Generator().manual_seed(seed)
    draws = torch.randint(0, 1 << 31, (n_multipliers, 2), generator=gen, dtype=torch.int64)
    out = [MulBal(34038481, 76625530, 8)]
    for a, b in draws.tolist():
        out.extend(MulBal(2 * a + 1, 2 * b + (a & 1), m) for m in (6, 7, 8))
    return out
