"""The per-tensor rules of SpeechCombine's weight arithmetic, shared by the in-memory and the streaming merge.

``θ = θ_cpt + λ (θ_instruct − θ_base)`` on every tensor the three models share. A vocabulary tensor (input or
output embedding, rows = tokens) may have more rows in the CPT model (new tokens, such as speech units) and in
the instruct model (new chat tokens) than in the base: the delta goes to the rows of the base vocabulary only,
the CPT model's other rows are kept exactly, and the instruct model's extra rows (tokens the CPT model does not
have) are not transferred. The vocabularies are aligned by token id: the CPT and instruct vocabularies extend
the base's by appending (what ``tokenizer.add_tokens`` and ``resize_token_embeddings`` do).

Where mergekit's ``task_arithmetic`` differs: it cuts every mismatched embedding to the base's rows
(``x[:base_rows]``), so the CPT model's new rows are silently lost (mergekit issues #47, #139, #169, #425,
#469).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any

import torch

from icml_compress.validation import check_finite_float, check_instance, check_int, check_one_of

METHODS = ("task_arithmetic", "ties", "dare")
MODULE_KINDS = ("attention", "mlp", "embeddings", "norms", "other")
ACTIONS = {
    "delta": "θ_cpt + λ (θ_instruct − θ_base)",
    "delta-shared-rows": "the delta on the rows of the base vocabulary; the CPT model's other rows kept",
    "kept": "kept from the CPT model",
    "tied": "the same tensor as another one of the CPT model (tied), merged once with it",
}
# (kind, name fragments), the first match wins: a norm inside an attention block is a norm
_KIND_PATTERNS = (
    ("embeddings", ("embed", "lm_head", "wte", "wpe", "output_layer")),
    ("norms", ("norm", "ln_", ".ln")),
    ("attention", ("attn", "attention", "q_proj", "k_proj", "v_proj", "o_proj", "query", "key", "value")),
    ("mlp", ("mlp", "ffn", "feed_forward", "gate_proj", "up_proj", "down_proj", "fc1", "fc2")),
)
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def module_kind(name: str) -> str:
    """The module type of a tensor name, for a per-module λ: ``embeddings``, ``norms``, ``attention``, ``mlp``
    or ``other`` (matched on name fragments such as ``embed``/``lm_head``, ``norm``, ``attn``/``q_proj``,
    ``mlp``/``up_proj``; the first that matches, in that order)."""
    check_instance(name, "name", str)
    low = name.lower()
    for kind, fragments in _KIND_PATTERNS:
        if any(f in low for f in fragments):
            return kind
    return "other"


@dataclass(frozen=True)
class MergeSettings:
    """What to merge with: ``lam`` (λ of every module type unless ``per_module`` says otherwise), the
    ``method`` (``task_arithmetic`` is SpeechCombine's formula; ``ties`` and ``dare`` are ablations, see
    :func:`merge_tensor`), ``density`` (the fraction kept by TIES' trimming or DARE's dropping), ``normalize``
    (TIES' disjoint mean instead of the sum) and ``seed`` (DARE's random masks)."""

    lam: float = 1.0
    per_module: dict[str, float] = field(default_factory=dict)
    method: str = "task_arithmetic"
    density: float = 1.0
    normalize: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "lam", check_finite_float(self.lam, "lam"))
        per = self.per_module
        if per is None:
            per = {}
        check_instance(per, "per_module", dict, f"dict {{module kind: λ}} with kinds from {MODULE_KINDS}")
        for kind, value in per.items():
            check_one_of(kind, "per_module key", MODULE_KINDS)
            check_finite_float(value, f"per_module[{kind!r}]")
        object.__setattr__(self, "per_module", {k: float(v) for k, v in per.items()})
        check_one_of(self.method, "method", METHODS)
        if isinstance(self.density, bool) or not isinstance(self.density, (int, float)):
            raise TypeError(f"density must be a number in (0, 1], got {self.density!r}")
        if not (0 < self.density <= 1):
            raise ValueError(f"density must be in (0, 1], got {self.density!r}")
        object.__setattr__(self, "density", float(self.density))
        if not isinstance(self.normalize, bool):
            raise TypeError(f"normalize must be a bool, got {self.normalize!r}")
        check_int(self.seed, "seed", 0)

    def lam_for(self, kind: str) -> float:
        """λ of a module kind."""
        return self.per_module.get(kind, self.lam)


def settings_from(
    lam: Any, per_module: Any, method: Any, density: Any, normalize: Any, seed: Any
) -> MergeSettings:
    """:class:`MergeSettings` from the keyword arguments of ``combine``/``combine_checkpoints``
    (``per_module=None``: no override)."""
    return MergeSettings(lam, {} if per_module is None else per_module, method, density, normalize, seed)


@dataclass(frozen=True)
class TensorAction:
    """What the merge does to one tensor of the CPT model: ``action`` (a key of :data:`ACTIONS`), why,
    its shape and module kind, the λ applied (None when nothing is added) and, for a vocabulary tensor, the
    rows that get the delta (``shared_rows``; the rest are the CPT model's own)."""

    name: str
    action: str
    reason: str
    shape: tuple[int, ...]
    kind: str
    lam: float | None = None
    shared_rows: int | None = None
    source: str | None = None  # "tied": the tensor it is tied to


@dataclass
class MergeReport:
    """Every tensor's :class:`TensorAction` (the dry run is this report without writing anything)."""

    settings: MergeSettings
    actions: list[TensorAction]

    def counts(self) -> dict[str, int]:
        """How many tensors took each action."""
        out: dict[str, int] = {}
        for a in self.actions:
            out[a.action] = out.get(a.action, 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (what a merged model records as ``icml_merge``)."""
        return {
            "settings": asdict(self.settings),
            "counts": self.counts(),
            "actions": [{**asdict(a), "shape": list(a.shape)} for a in self.actions],
        }

    def table(self) -> str:
        """A Markdown table of every tensor's action."""
        rows = ["| tensor | kind | shape | action | λ | why |", "|---|---|---|---|---|---|"]
        for a in self.actions:
            lam = "" if a.lam is None else f"{a.lam:g}"
            rows.append(f"| {a.name} | {a.kind} | {tuple(a.shape)} | {a.action} | {lam} | {a.reason} |")
        return "\n".join(rows)

    def __str__(self) -> str:
        s = self.settings
        counts = ", ".join(f"{n} {k}" for k, n in sorted(self.counts().items()))
        return f"merge {s.method} λ={s.lam:g} {s.per_module or ''}: {len(self.actions)} tensors ({counts})"


def plan_tensor(
    name: str,
    cpt: tuple[tuple[int, ...], torch.dtype],
    instruct: tuple[tuple[int, ...], torch.dtype] | None,
    base: tuple[tuple[int, ...], torch.dtype] | None,
    settings: MergeSettings,
    labels: tuple[str, ...] = ("cpt", "instruct", "base"),
) -> TensorAction:
    """The action for the CPT model's tensor ``name`` given ``(shape, dtype)`` of it and of the instruct and
    base models' tensors of that name (None: the model lacks it, which raises: the architectures differ).
    Shapes that cannot be aligned raise ``ValueError`` naming the tensor and the models (``labels``: how the
    messages name the CPT, instruct and base models: the caller's argument names)."""
    lc, li, lb = labels
    for which, meta in ((li, instruct), (lb, base)):
        if meta is None:
            raise ValueError(f"{name} is in {lc} but not in {which}: the architectures differ")
    assert instruct is not None and base is not None  # for the type checker: refused above
    (cs, cd), (i_s, i_d), (bs, bd) = cpt, instruct, base
    kind = module_kind(name)
    lam = settings.lam_for(kind)
    shape = tuple(cs)
    if cd not in FLOAT_DTYPES:
        if not (cs == i_s == bs):
            raise ValueError(
                f"{name}: shapes differ ({lc} {cs}, {li} {i_s}, {lb} {bs}): the architectures differ"
            )
        return TensorAction(name, "kept", f"not floating point ({cd})", shape, kind)
    for which, dt in ((li, i_d), (lb, bd)):
        if dt not in FLOAT_DTYPES:
            raise ValueError(f"{name} is {cd} in {lc} but {dt} in {which}")
    if tuple(cs) == tuple(i_s) == tuple(bs):
        if lam == 0:
            return TensorAction(name, "kept", f"λ = 0 for {kind}", shape, kind)
        return TensorAction(name, "delta", "in all three models, same shape", shape, kind, lam)
    aligned = (
        kind == "embeddings"
        and len(cs) == len(i_s) == len(bs) >= 1
        and tuple(cs[1:]) == tuple(i_s[1:]) == tuple(bs[1:])
        and cs[0] >= bs[0]
        and i_s[0] >= bs[0]
    )
    if not aligned:
        raise ValueError(
            f"{name}: shapes cannot be aligned ({lc} {tuple(cs)}, {li} {tuple(i_s)}, {lb} {tuple(bs)}): only "
            "a vocabulary tensor (embeddings, lm_head) may differ, in its rows, the CPT and instruct models "
            "holding at least the base's rows"
        )
    rows = bs[0]
    why = f"rows 0..{rows - 1} (the base vocabulary) get the delta; the CPT model's rows {rows}..{cs[0] - 1} kept"
    if cs[0] == rows:
        why = f"all {rows} rows (the base vocabulary) get the delta"
    if i_s[0] > rows:
        why += f"; the instruct model's rows {rows}..{i_s[0] - 1} (tokens the base lacks) not transferred"
    if lam == 0:
        return TensorAction(name, "kept", f"λ = 0 for {kind}", shape, kind)
    return TensorAction(name, "delta-shared-rows", why, shape, kind, lam, rows)


def _generator(seed: int, name: str) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))


def _dare(tau: torch.Tensor, density: float, gen: torch.Generator) -> torch.Tensor:
    if density == 1:
        return tau
    keep = torch.rand(tau.shape, generator=gen, dtype=torch.float64) < density  # drawn on the CPU
    return torch.where(keep.to(tau.device), tau / density, torch.zeros_like(tau))


def _trim(tau: torch.Tensor, density: float) -> torch.Tensor:
    """``tau`` with all but its ``⌈density · numel⌉`` (at least 1) largest magnitudes set to 0 (ties at the
    threshold kept)."""
    if density == 1 or tau.numel() == 0:
        return tau
    # the product taken exactly on the density as written (its shortest decimal): the float product rounds
    # up past an integer (0.07 * 100 = 7.000000000000001, ceil 8) where the decimal one is exact (7)
    k = max(1, math.ceil(Fraction(repr(density)) * tau.numel()))
    threshold = tau.abs().flatten().kthvalue(tau.numel() - k + 1).values
    return torch.where(tau.abs() >= threshold, tau, torch.zeros_like(tau))


def merge_tensor(
    action: TensorAction,
    cpt: torch.Tensor,
    instruct: torch.Tensor,
    base: torch.Tensor,
    settings: MergeSettings,
    *,
    inplace: bool = False,
) -> torch.Tensor:
    """The merged tensor (the CPT tensor's dtype and device) for ``action`` (from :func:`plan_tensor`): a new
    tensor, or ``cpt`` itself changed with ``inplace=True`` (the streaming merge, which owns what it read).
    Computed in float32 for float16/bfloat16 weights, else in their own dtype.

    ``task_arithmetic``: ``θ_cpt + λ (θ_instruct − θ_base)``. ``dare`` (Yu et al. 2024, as an ablation): the
    delta's entries kept with probability ``density`` and rescaled by ``1/density`` (masks drawn on the CPU
    from ``seed`` and the tensor's name: the same in memory and streaming). ``ties`` (Yadav et al. 2023, as an
    ablation): the two task vectors ``θ_cpt − θ_base`` (weight 1) and ``θ_instruct − θ_base`` (weight λ), each
    trimmed to its ``density`` fraction of largest magnitudes (``⌈density · numel⌉`` entries, at least 1, the
    product exact on the density as written); per entry the sign of the weighted sum is elected and the
    weighted entries that agree with it are summed (``normalize=True``: divided by the sum of their weights,
    the TIES paper's disjoint mean); ``θ = θ_base + merged``. At density 1 without sign conflicts TIES (sum)
    is task arithmetic.
    """
    if action.action not in ("delta", "delta-shared-rows"):
        return cpt if inplace else cpt.clone()
    assert action.lam is not None  # for the type checker: a delta action carries its λ
    rows = action.shared_rows if action.shared_rows is not None else cpt.shape[0]
    work = torch.float32 if cpt.dtype in (torch.float16, torch.bfloat16) else cpt.dtype
    c, i, b = (t[:rows].to(cpt.device, work) for t in (cpt, instruct, base))
    lam, s = action.lam, settings
    if s.method == "task_arithmetic":  # c + lam * (i - b) with one temporary: the same operations, same bits
        merged = torch.sub(i, b)
        merged.mul_(lam)
        torch.add(c, merged, out=merged)
    elif s.method == "dare":
        merged = c + lam * _dare(i - b, s.density, _generator(s.seed, action.name))
    else:
        taus = [_trim(c - b, s.density), _trim(i - b, s.density)]
        weights = [1.0, lam]
        weighted = [w * t for w, t in zip(weights, taus, strict=True)]
        sign = torch.sign(weighted[0] + weighted[1])
        total = torch.zeros_like(c)
        mass = torch.zeros_like(c)
        for w, t, wt in zip(weights, taus, weighted, strict=True):
            agree = (torch.sign(wt) == sign) & (t != 0)
            total = total + torch.where(agree, wt, torch.zeros_like(wt))
            mass = mass + agree.to(work) * abs(w)
        if s.normalize:
            total = torch.where(mass > 0, total / mass.clamp_min(1e-30), total)
        merged = b + total
    result = merged.to(cpt.dtype)  # checked after the cast: a float32 merge can overflow float16 or bfloat16
    if not bool(torch.isfinite(result).all()):
        raise ValueError(
            f"{action.name}: the merge is not finite (lam={lam:g} too large for {cpt.dtype}, or NaN or infinity "
            "in the CPT, instruct or base tensor?)"
        )
    out = cpt if inplace else cpt.clone()
    out[:rows] = result
    return out
