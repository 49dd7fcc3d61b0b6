"""Latent alignment: decoder cosine within one activation space, activation correlation across spaces.

Within a space (two SAEs on the same layer, e.g. trained on different cohorts) decoder directions are
comparable: cost ``1 − cos``, Hungarian matching (``scipy.optimize.linear_sum_assignment``), a pair is
shared when ``cos > threshold``. Across spaces (U-Net vs SegFormer) only behaviour is comparable: both
models run on the same inputs, latent maps are resampled to a common grid (area averaging), Pearson
correlation over images × pixels, Hungarian matching on ``−C``. The null runs the same matching with the
second model's maps taken on a shuffled image order (a derangement), so any matched correlation it finds
is chance plus input-independent structure. Dead latents (constant on the inputs: correlation undefined) are
left out of the matching; an earlier version matched the full square matrix, where Hungarian could pair a
live latent with a dead one at score 0.

Best partner (:func:`best_partner`): for chosen latents of the first set, the largest correlation with any
latent of the second (no one-to-one constraint: two latents may share a partner) and its permutation null,
the same statistic with the second set's maps taken from a random derangement of the images, many draws, so
that a latent is judged against a quantile of its own null rather than a fixed correlation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from icml_interp.validation import check_bool, check_finite, check_int, check_number, check_tensor, check_type


@dataclass
class Alignment:
    """Matched latent pairs: ``pairs`` (n, 2) indices (a, b), ``score`` (n,) cosine or correlation,
    ``shared`` (n,) ``score > threshold``; ``matrix`` the full score matrix (d_a, d_b); ``null`` (optional)
    the matched score under the shuffled-input null for each ``a`` latent of ``pairs``."""

    pairs: np.ndarray
    score: np.ndarray
    shared: np.ndarray
    matrix: np.ndarray
    threshold: float
    kind: str
    null: np.ndarray | None = None
    null_matrix: np.ndarray | None = field(default=None, repr=False)

    def partner(self, a: int) -> int:
        """The latent of the second set matched to latent ``a`` of the first (``-1`` if none)."""
        hit = np.nonzero(self.pairs[:, 0] == a)[0]
        return int(self.pairs[hit[0], 1]) if hit.size else -1

    def rows(self) -> list[dict]:
        """Tidy table: one dict per matched pair."""
        out = []
        for i, (a, b) in enumerate(self.pairs):
            row = {
                "latent_a": int(a),
                "latent_b": int(b),
                self.kind: float(self.score[i]),
                "shared": bool(self.shared[i]),
            }
            if self.null is not None:
                row["null"] = float(self.null[i])
            out.append(row)
        return out


def _hungarian(score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from scipy.optimize import linear_sum_assignment

    rows, cols = linear_sum_assignment(-score)
    return np.stack([rows, cols], 1), score[rows, cols]


def _unit_rows(w: torch.Tensor) -> torch.Tensor:
    """``w`` with each row divided by its largest |entry| (a zero row stays zero): norms then never overflow."""
    return w / w.abs().amax(dim=-1, keepdim=True).clamp_min(torch.finfo(w.dtype).tiny)


def decoder_alignment(w_dec_a: torch.Tensor, w_dec_b: torch.Tensor, *, threshold: float = 0.7) -> Alignment:
    """Match the latents of two SAEs on the same activation space by decoder cosine (rows ``(d_sae, d_in)``)."""
    threshold = check_number(threshold, "threshold", minimum=-1, maximum=1)
    check_tensor(w_dec_a, "w_dec_a", "(d_sae, d_in)", ndim=2)
    check_tensor(w_dec_b, "w_dec_b", "(d_sae, d_in)", ndim=2)
    for w, name in ((w_dec_a, "w_dec_a"), (w_dec_b, "w_dec_b")):
        if w.is_complex():
            raise TypeError(f"{name} must be a real tensor, got {w.dtype}")
        check_finite(w, name)
    if w_dec_a.shape[1] != w_dec_b.shape[1]:
        raise ValueError(
            f"w_dec_a and w_dec_b: decoders live in different spaces (d_in {w_dec_a.shape[1]} vs "
            f"{w_dec_b.shape[1]}); "
            "use activation_alignment across spaces"
        )
    a = F.normalize(_unit_rows(w_dec_a.detach().double()), dim=1)
    b = F.normalize(_unit_rows(w_dec_b.detach().double()), dim=1)
    cos = (a @ b.T).cpu().numpy()
    pairs, score = _hungarian(cos)
    return Alignment(pairs, score, score > threshold, cos, threshold, "cosine")


def _resample(maps: torch.Tensor, grid: tuple[int, int] | None) -> torch.Tensor:
    if maps.dim() != 4:
        raise ValueError(f"latent maps must be (n_images, d_sae, H, W), got {tuple(maps.shape)}")
    if grid is not None and tuple(maps.shape[-2:]) != tuple(grid):
        maps = (
            F.adaptive_avg_pool2d(maps.double(), grid)
            if all(s >= g for s, g in zip(maps.shape[-2:], grid, strict=True))
            else F.interpolate(maps.double(), size=tuple(grid), mode="bilinear", align_corners=False)
        )
    return maps


def _standardized(maps: torch.Tensor, grid: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(z (n, H*W, d), alive (d,))``: each latent's values on ``grid`` over images x pixels, centred and scaled
    to unit norm (float64), so that ``sum(z_a * z_b)`` over images x pixels is their Pearson correlation; a
    constant (dead) latent is all zeros and not alive."""
    t = _resample(maps, grid).permute(0, 2, 3, 1).double()  # (n, H, W, d)
    t = t.reshape(t.shape[0], -1, t.shape[-1])  # (n, H*W, d)
    # each latent in units of its largest |value|: the sums of squares below cannot overflow
    t = t / t.abs().amax((0, 1)).clamp_min(torch.finfo(t.dtype).tiny)
    t = t - t.mean((0, 1))
    norm = torch.linalg.vector_norm(t, dim=(0, 1))
    alive = norm >= 1e-9
    return torch.where(alive, t / norm.clamp_min(1e-12), torch.zeros_like(t)), alive


def _check_grid(maps_a: torch.Tensor, grid) -> tuple[int, int]:
    if grid is None:
        grid = tuple(maps_a.shape[-2:])
    if not isinstance(grid, (tuple, list)):
        raise TypeError(f"grid must be None or two positive ints (H, W), got {grid!r}")
    if len(grid) != 2 or not all(isinstance(g, int) and not isinstance(g, bool) and g > 0 for g in grid):
        raise ValueError(f"grid must be two positive ints (H, W), got {grid!r}")
    return int(grid[0]), int(grid[1])


def _check_maps(maps_a, maps_b) -> None:
    check_tensor(maps_a, "maps_a", "(n_images, d_sae, H, W)", ndim=4)
    check_tensor(maps_b, "maps_b", "(n_images, d_sae, H, W)", ndim=4)
    if maps_a.shape[0] != maps_b.shape[0]:
        raise ValueError(
            f"maps_a and maps_b must come from the same inputs: {maps_a.shape[0]} vs {maps_b.shape[0]} images"
        )
    for maps, name in ((maps_a, "maps_a"), (maps_b, "maps_b")):
        if maps.is_complex():
            raise TypeError(f"{name} must be a real tensor, got {maps.dtype}")
        if not bool(torch.isfinite(maps).all()):
            raise ValueError(f"{name}: latent maps contain NaN or inf")


def _correlation(maps_a, maps_b, grid) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(correlation (d_a, d_b), alive_a (d_a,), alive_b (d_b,)); alive = not constant over images x pixels."""
    _check_maps(maps_a, maps_b)
    grid = _check_grid(maps_a, grid)
    a, alive_a = _standardized(maps_a, grid)
    b, alive_b = _standardized(maps_b, grid)
    c = (a.reshape(-1, a.shape[-1]).T @ b.reshape(-1, b.shape[-1])).clamp(-1.0, 1.0)  # dead rows/cols: 0
    return c.cpu().numpy(), alive_a.cpu().numpy(), alive_b.cpu().numpy()


def correlation_matrix(
    maps_a: torch.Tensor, maps_b: torch.Tensor, *, grid: tuple[int, int] | None = None
) -> np.ndarray:
    """Pearson correlation ``(d_a, d_b)`` of two sets of latent maps ``(n, d, H, W)`` on the same ``n`` inputs,
    over images × pixels of the common ``grid`` (default: ``maps_a``'s grid). Constant (dead) latents, whose
    correlation is undefined, score 0."""
    return _correlation(maps_a, maps_b, grid)[0]


def _match_alive(corr: np.ndarray, alive_a: np.ndarray, alive_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hungarian matching restricted to the alive rows and columns (indices of the full matrix)."""
    ia, ib = np.nonzero(alive_a)[0], np.nonzero(alive_b)[0]
    if ia.size == 0 or ib.size == 0:
        return np.zeros((0, 2), dtype=np.int64), np.zeros(0)
    pairs, score = _hungarian(corr[np.ix_(ia, ib)])
    return np.stack([ia[pairs[:, 0]], ib[pairs[:, 1]]], 1), score


def _derangement(n: int, g: torch.Generator) -> torch.Tensor:
    if n < 2:
        raise ValueError("the shuffled-input null needs at least 2 images")
    while True:
        p = torch.randperm(n, generator=g)
        if not (p == torch.arange(n)).any():
            return p


def activation_alignment(
    maps_a: torch.Tensor,
    maps_b: torch.Tensor,
    *,
    grid: tuple[int, int] | None = None,
    threshold: float = 0.5,
    null: bool = True,
    null_draws: int = 1,
    seed: int = 0,
) -> Alignment:
    """Match latents of two models (different activation spaces) by activation correlation on the same inputs.

    ``maps_a`` (n, d_a, H_a, W_a) and ``maps_b`` (n, d_b, H_b, W_b) from :func:`~icml_interp.diffing.latent_maps`.
    Only alive latents (not constant over the inputs; a dead latent's correlation is undefined) take part in the
    matching, so a latent is never paired with a dead one; with unequal alive counts some latents stay
    unmatched (``Alignment.partner`` returns -1). With ``null=True`` also the null score of each matched ``a``
    latent: the same matching run with ``maps_b`` from a deranged image order, averaged over ``null_draws``
    derangements (``Alignment.null``); an ``a`` latent left unmatched in a null draw scores its largest null
    correlation with any alive ``b`` latent (an upper bound on what a matching could give it).
    """
    threshold = check_number(threshold, "threshold", minimum=-1, maximum=1)
    check_int(null_draws, "null_draws", minimum=1)
    check_bool(null, "null")
    check_int(seed, "seed", minimum=0, maximum=2**63 - 1)
    corr, alive_a, alive_b = _correlation(maps_a, maps_b, grid)
    if null and maps_b.shape[0] < 2:
        raise ValueError(
            f"the shuffled-input null needs at least 2 images, maps_a and maps_b hold {maps_b.shape[0]} "
            "(pass null=False)"
        )
    pairs, score = _match_alive(corr, alive_a, alive_b)
    result = Alignment(pairs, score, score > threshold, corr, threshold, "correlation")
    if null:
        g = torch.Generator().manual_seed(seed)
        draws = []
        for _ in range(null_draws):
            perm = _derangement(maps_b.shape[0], g)
            null_corr = _correlation(maps_a, maps_b[perm], grid)[0]
            null_pairs, null_score = _match_alive(null_corr, alive_a, alive_b)
            best = null_corr[:, alive_b].max(1) if alive_b.any() else np.zeros(len(alive_a))
            by_a = dict(zip(null_pairs[:, 0].tolist(), null_score.tolist(), strict=True))
            draws.append([by_a.get(int(a), float(best[a])) for a in pairs[:, 0]])
        result.null = np.mean(np.array(draws, dtype=float).reshape(null_draws, len(pairs)), 0)
        result.null_matrix = null_corr  # of the last draw
    return result


@dataclass
class BestPartners:
    """Best partners of chosen latents of a first set among the latents of a second, with a permutation null.

    ``latents`` (n,) the chosen latents of the first set; ``partner`` (n,) the latent of the second set they
    correlate with most (``-1`` where the chosen latent or every latent of the second set is constant, so no
    correlation is defined; its ``score`` and ``null`` are then 0); ``score`` (n,) that correlation; ``null``
    (n, draws) the same statistic, the largest correlation with any latent of the second set, with the second
    set's maps taken from a deranged image order, one column per derangement (the same derangements for
    every row)."""

    latents: np.ndarray
    partner: np.ndarray
    score: np.ndarray
    null: np.ndarray = field(repr=False)

    def null_quantile(self, q: float = 0.99) -> np.ndarray:
        """The ``q`` quantile of each latent's null (n,) (linear interpolation between draws)."""
        q = check_number(q, "q", minimum=0, maximum=1)
        return np.quantile(self.null, q, axis=1)

    def above_null(self, q: float = 0.99) -> np.ndarray:
        """(n,) bool: ``score`` strictly above the ``q`` quantile of the latent's null (never for ``partner`` -1)."""
        return (self.score > self.null_quantile(q)) & (self.partner >= 0)

    def p_values(self) -> np.ndarray:
        """(n,) one-sided permutation p-values ``(1 + #{null >= score}) / (1 + draws)``."""
        return (1 + (self.null >= self.score[:, None]).sum(1)) / (1 + self.null.shape[1])

    def rows(self, q: float = 0.99) -> list[dict]:
        """Tidy table: one dict per chosen latent, with the null's mean and ``q`` quantile and the p-value."""
        quantile, p = self.null_quantile(q), self.p_values()
        return [
            {
                "latent_a": int(a),
                "partner": int(b),
                "correlation": float(r),
                "null_mean": float(self.null[i].mean()),
                f"null_q{q:g}": float(quantile[i]),
                "p_value": float(p[i]),
            }
            for i, (a, b, r) in enumerate(zip(self.latents, self.partner, self.score, strict=True))
        ]


NULL_CHUNK = 64  # derangements summed at once: (chunk, n, d_b) float64 values in memory


def best_partner(
    maps_a: torch.Tensor,
    maps_b: torch.Tensor,
    latents=None,
    *,
    grid: tuple[int, int] | None = None,
    null_draws: int = 1000,
    seed: int = 0,
) -> BestPartners:
    """The best partner of each chosen latent of ``maps_a`` among the latents of ``maps_b``, with its null.

    ``maps_a`` (n, d_a, H_a, W_a) and ``maps_b`` (n, d_b, H_b, W_b): latent maps of two models (or concept
    maps, or any maps) on the same ``n`` inputs, resampled to ``grid`` (default: ``maps_a``'s) as in
    :func:`activation_alignment`. ``latents``: indices into ``maps_a`` (default: all). For each, the best
    partner is the latent of ``maps_b`` with the largest Pearson correlation over images x pixels (signed:
    the partner must rise where the latent rises), and its null is that largest correlation when ``maps_b``
    comes from a random derangement of the images, ``null_draws`` draws from a generator seeded with
    ``seed``. The derangement keeps every latent map whole (its values, sparsity, spatial layout within an
    image) and breaks only the pairing of images between the two sets, so the null contains what chance and
    input-independent structure (a latent that fires at the same place in every image) give by themselves.
    Judge a latent by ``BestPartners.above_null(q)`` or ``p_values()``. Needs at least 2 images. Cost: one
    image-by-image Gram block of ``n * n * d_b`` float64 values per chosen latent (64 images and 512 latents:
    16 MB), so the null's draws cost sums, not new correlations; for thousands of images, pass a subset.
    """
    _check_maps(maps_a, maps_b)
    grid = _check_grid(maps_a, grid)
    check_int(null_draws, "null_draws", minimum=1)
    check_int(seed, "seed", minimum=0, maximum=2**63 - 1)
    d_a = maps_a.shape[1]
    if latents is None:
        chosen = list(range(d_a))
    else:
        if isinstance(latents, (str, bytes)) or not isinstance(latents, (list, tuple, range, np.ndarray)):
            raise TypeError(
                f"latents must be None or a sequence of latent indices, got {type(latents).__name__}"
            )
        chosen = list(latents)
        if not chosen:
            raise ValueError("latents must hold at least one latent index, got an empty sequence")
        for j in chosen:
            if isinstance(j, (bool, np.bool_)) or not isinstance(j, (int, np.integer)):
                raise TypeError(f"latents must hold ints, got {type(j).__name__} {j!r}")
            if not 0 <= int(j) < d_a:
                raise ValueError(
                    f"latents must be indices in [0, {d_a}) (maps_a has {d_a} latents), got {int(j)}"
                )
        chosen = [int(j) for j in chosen]
    n = maps_a.shape[0]
    if n < 2:
        raise ValueError(f"the derangement null needs at least 2 images, maps_a and maps_b hold {n}")
    a, alive_a = _standardized(maps_a[:, chosen], grid)  # (n, P, len(chosen))
    b, alive_b = _standardized(maps_b, grid)  # (n, P, d_b)
    g = torch.Generator().manual_seed(seed)
    perms = torch.stack([_derangement(n, g) for _ in range(null_draws)])  # (draws, n)
    rows = torch.arange(n)
    b_flat = b.permute(1, 0, 2).reshape(b.shape[1], -1)  # (P, n * d_b)
    partner = np.full(len(chosen), -1, dtype=np.int64)
    score = np.zeros(len(chosen))
    null = np.zeros((len(chosen), null_draws))
    if not bool(alive_b.any()):
        return BestPartners(np.array(chosen, dtype=np.int64), partner, score, null)
    for i in range(len(chosen)):
        if not bool(alive_a[i]):
            continue
        # gram[u, v, :]: image u of the chosen latent against image v of every latent of b; the correlation
        # with b's images in the order perm is sum_u gram[u, perm[u], :]
        gram = (a[:, :, i] @ b_flat).reshape(n, n, -1)  # (n, n, d_b)
        corr = gram[rows, rows].sum(0).clamp(-1.0, 1.0).masked_fill(~alive_b, -np.inf)
        partner[i], score[i] = int(corr.argmax()), float(corr.max())
        for start in range(0, null_draws, NULL_CHUNK):
            p = perms[start : start + NULL_CHUNK]
            c = gram[rows, p].sum(1).clamp(-1.0, 1.0).masked_fill(~alive_b, -np.inf)  # (chunk, d_b)
            null[i, start : start + p.shape[0]] = c.max(1).values.cpu().numpy()
    return BestPartners(np.array(chosen, dtype=np.int64), partner, score, null)


def exclusive_latents(alignment: Alignment, alive_a=None, alive_b=None) -> tuple[np.ndarray, np.ndarray]:
    """Latents of each side without a shared partner (``score <= threshold`` or unmatched), among the alive ones
    (boolean masks; default all): the population-specific candidates of a within-space comparison."""
    check_type(alignment, "alignment", Alignment, "an Alignment")
    d_a, d_b = alignment.matrix.shape
    shared_a = np.zeros(d_a, bool)
    shared_b = np.zeros(d_b, bool)
    shared_a[alignment.pairs[alignment.shared, 0]] = True
    shared_b[alignment.pairs[alignment.shared, 1]] = True
    masks = []
    for alive, name, d in ((alive_a, "alive_a", d_a), (alive_b, "alive_b", d_b)):
        if alive is None:
            masks.append(np.ones(d, bool))
            continue
        if isinstance(alive, torch.Tensor):
            alive = alive.detach().cpu().numpy()
        if isinstance(alive, (str, bytes)) or not isinstance(alive, (np.ndarray, list, tuple)):
            raise TypeError(
                f"{name} must be None or a boolean mask of length {d}, got {type(alive).__name__}"
            )
        mask = np.asarray(alive)
        if mask.dtype != bool:
            raise TypeError(f"{name} must be a boolean mask, got dtype {mask.dtype}")
        if mask.shape != (d,):
            raise ValueError(f"{name} must be a boolean mask of length {d}, got shape {mask.shape}")
        masks.append(mask)
    alive_a, alive_b = masks
    return np.nonzero(~shared_a & alive_a)[0], np.nonzero(~shared_b & alive_b)[0]
