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
    cos = (a @ b.T).numpy()
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


def _tokens(maps: torch.Tensor) -> torch.Tensor:
    return maps.permute(0, 2, 3, 1).reshape(-1, maps.shape[1]).double()  # (n*H*W, d)


def _correlation(maps_a, maps_b, grid) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(correlation (d_a, d_b), alive_a (d_a,), alive_b (d_b,)); alive = not constant over images x pixels."""
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
    if grid is None:
        grid = tuple(maps_a.shape[-2:])
    if not isinstance(grid, (tuple, list)):
        raise TypeError(f"grid must be None or two positive ints (H, W), got {grid!r}")
    if len(grid) != 2 or not all(isinstance(g, int) and not isinstance(g, bool) and g > 0 for g in grid):
        raise ValueError(f"grid must be two positive ints (H, W), got {grid!r}")
    grid = (int(grid[0]), int(grid[1]))
    a, b = _tokens(_resample(maps_a, grid)), _tokens(_resample(maps_b, grid))
    # each latent in units of its largest |value|: the sums of squares below cannot overflow
    a = a / a.abs().amax(0).clamp_min(torch.finfo(a.dtype).tiny)
    b = b / b.abs().amax(0).clamp_min(torch.finfo(b.dtype).tiny)
    a, b = a - a.mean(0), b - b.mean(0)
    sa, sb = a.norm(dim=0), b.norm(dim=0)
    c = ((a.T @ b) / (sa[:, None] * sb[None, :]).clamp_min(1e-12)).clamp(-1.0, 1.0)
    alive_a, alive_b = sa >= 1e-9, sb >= 1e-9
    c[~alive_a] = 0.0
    c[:, ~alive_b] = 0.0
    return c.numpy(), alive_a.numpy(), alive_b.numpy()


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
