"""Grounding-ID analyses on a hooked vision-language model: binding score, modality gap, partition attention
mass and the causal swap test (Grounding IDs, ICML 2026; the formulas as the research notes read the paper).

A :class:`Layout` says, for one input row, which token positions hold each partition's image tokens and which
hold each text group (the tokens naming a partition's symbol or its object), and which partition each text
group names. Every model-level function takes one layout per batch row.

- Binding score (per layer): ``mean_t cos(txt_t, img_match(t)) - mean_{t, p != match(t)} cos(txt_t, img_p)``
  with ``img_p`` the mean residual over partition ``p``'s image tokens and ``txt_t`` the mean over text group
  ``t``; with one text group per partition it is the paper's ``mean_p cos(img_p, txt_p) - mean_{p != q}
  cos(img_p, txt_q)``.
- Modality gap: ``|| mean(normalised image tokens) - mean(normalised text tokens) ||``.
- Partition attention mass (per head): for each query token of group ``t``, the attention to partition
  ``match(t)``'s image tokens divided by its attention to all image tokens, averaged over the group's tokens,
  then over groups.
- Swap test: patch activations at given positions from a source (counterfactual) run into the base run —
  whole vectors or only their component in a subspace — and count how often the answer follows the source.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from icml_interp.hooks import HookedModel, act_name, wrap
from icml_interp.validation import check_int, check_type, eval_mode

_MAX_POSITIONS = 1 << 20


def _positions(value, name: str) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise ValueError(f"{name} must be a non-empty list of token positions, got {value!r}")
    out = tuple(check_int(int(v) if isinstance(v, np.integer) else v, name, minimum=0, maximum=_MAX_POSITIONS)
                for v in value)  # fmt: skip
    if len(set(out)) != len(out):
        raise ValueError(f"{name} must not repeat a position, got {list(out)}")
    return out


def _indices(value, name: str, maximum: int) -> torch.Tensor:
    """``value`` (a list, 1-d array or tensor of ints in ``[0, maximum]``) as a ``torch.long`` tensor."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        if value.ndim != 1:
            raise ValueError(f"{name} must be a 1-d list of ints, got shape {tuple(value.shape)}")
        value = value.tolist()
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence | range):
        raise TypeError(f"{name} must be a list of ints, got {type(value).__name__}")
    ints = [
        check_int(int(v) if isinstance(v, np.integer) else v, name, minimum=0, maximum=maximum) for v in value
    ]
    return torch.tensor(ints, dtype=torch.long)


@dataclass(frozen=True)
class Layout:
    """Token positions of one input row: ``image[p]`` partition ``p``'s image tokens, ``text[t]`` text group
    ``t``'s tokens, ``match[t]`` the partition that group names (default: group ``t`` names partition ``t``)."""

    image: tuple[tuple[int, ...], ...]
    text: tuple[tuple[int, ...], ...]
    match: tuple[int, ...]

    def __init__(self, image, text, match=None):
        if isinstance(image, (str, bytes)) or not isinstance(image, Sequence) or len(image) < 2:
            raise ValueError(f"image must list the token positions of at least 2 partitions, got {image!r}")
        if isinstance(text, (str, bytes)) or not isinstance(text, Sequence) or len(text) < 1:
            raise ValueError(f"text must list the token positions of at least 1 text group, got {text!r}")
        img = tuple(_positions(p, f"image[{i}]") for i, p in enumerate(image))
        txt = tuple(_positions(t, f"text[{i}]") for i, t in enumerate(text))
        if match is None:
            if len(txt) != len(img):
                raise ValueError(
                    f"match is needed when text has a different number of groups ({len(txt)}) than image has "
                    f"partitions ({len(img)})"
                )
            match = range(len(img))
        if (
            isinstance(match, (str, bytes))
            or not isinstance(match, Sequence | range)
            or len(match) != len(txt)
        ):
            raise ValueError(f"match must give one partition per text group ({len(txt)}), got {match!r}")
        m = tuple(check_int(int(v) if isinstance(v, np.integer) else v, "match", minimum=0,
                            maximum=len(img) - 1) for v in match)  # fmt: skip
        flat = [q for p in img for q in p]
        if len(set(flat)) != len(flat):
            raise ValueError("image: a token position belongs to two partitions")
        if set(flat) & {q for t in txt for q in t}:
            raise ValueError("text: a text token position is also an image token position")
        object.__setattr__(self, "image", img)
        object.__setattr__(self, "text", txt)
        object.__setattr__(self, "match", m)

    @property
    def max_position(self) -> int:
        return max(q for group in (*self.image, *self.text) for q in group)


def _cos(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Cosine similarities of every row of ``a`` with every row of ``b`` (float64; 0 for a zero vector)."""
    a, b = a.double(), b.double()
    na = a / a.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    nb = b / b.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    return na @ nb.transpose(-1, -2)


def _vectors(x, name: str, ndim: int = 2) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.ndim < ndim or x.shape[-1] < 1 or x.shape[-2] < 1 or not x.is_floating_point():
        raise ValueError(f"{name} must be a float tensor (..., n, d) with n, d >= 1, got {tuple(x.shape)}")
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} holds NaN or infinite values")
    return x


def binding_score(image_means: torch.Tensor, text_means: torch.Tensor, match=None) -> torch.Tensor:
    """The binding score of partition means ``image_means (..., P, d)`` and text-group means ``text_means
    (..., T, d)`` (``match``: the partition of each text group; default ``t -> t``); float64 ``(...)``."""
    img = _vectors(image_means, "image_means")
    txt = _vectors(text_means, "text_means")
    if img.shape[-1] != txt.shape[-1] or img.shape[:-2] != txt.shape[:-2]:
        raise ValueError(
            f"image_means {tuple(img.shape)} and text_means {tuple(txt.shape)} must agree in their leading "
            "and last dimensions"
        )
    n_p, n_t = img.shape[-2], txt.shape[-2]
    if n_p < 2:
        raise ValueError(f"image_means must hold at least 2 partitions, got {n_p}")
    if match is None:
        if n_t != n_p:
            raise ValueError(
                f"match is needed when text_means has {n_t} groups and image_means {n_p} partitions"
            )
        match = list(range(n_p))
    idx = _indices(match, "match", n_p - 1)
    if idx.ndim != 1 or idx.numel() != n_t or (idx < 0).any() or (idx >= n_p).any():
        raise ValueError(f"match must give one partition in [0, {n_p}) per text group ({n_t}), got {match!r}")
    sims = _cos(txt, img)  # (..., T, P)
    own = torch.zeros(n_t, n_p, dtype=torch.bool)
    own[torch.arange(n_t), idx] = True
    within = sims[..., own].mean(-1)
    cross = sims[..., ~own].mean(-1)
    return within - cross


def modality_gap(image_acts: torch.Tensor, text_acts: torch.Tensor) -> torch.Tensor:
    """``|| mean(normalised image_acts) - mean(normalised text_acts) ||`` over the token axis (-2); float64."""
    img = _vectors(image_acts, "image_acts").double()
    txt = _vectors(text_acts, "text_acts").double()
    if img.shape[-1] != txt.shape[-1] or img.shape[:-2] != txt.shape[:-2]:
        raise ValueError(
            f"image_acts {tuple(img.shape)} and text_acts {tuple(txt.shape)} must agree but in n"
        )
    ni = img / img.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    nt = txt / txt.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    return (ni.mean(-2) - nt.mean(-2)).norm(dim=-1)


def partition_attention_mass(pattern: torch.Tensor, layout: Layout) -> torch.Tensor:
    """Per-head partition attention mass of one row's attention probabilities ``pattern (heads, q, k)``
    (a leading batch dimension of 1 is allowed); float64 ``(heads,)``. A query with no attention on any image
    token contributes 0."""
    check_type(layout, "layout", Layout, "a Layout")
    if not isinstance(pattern, torch.Tensor):
        raise TypeError(f"pattern must be a torch.Tensor, got {type(pattern).__name__}")
    if pattern.ndim == 4 and pattern.shape[0] == 1:
        pattern = pattern[0]
    if pattern.ndim != 3 or not pattern.is_floating_point():
        raise ValueError(f"pattern must be a float tensor (heads, q, k), got {tuple(pattern.shape)}")
    if not torch.isfinite(pattern).all():
        raise ValueError("pattern holds NaN or infinite values")
    if layout.max_position >= min(pattern.shape[1], pattern.shape[2]):
        raise ValueError(
            f"layout: position {layout.max_position} is outside pattern's {pattern.shape[1]}x{pattern.shape[2]}"
        )
    p = pattern.double()
    all_image = [q for part in layout.image for q in part]
    groups = []
    for group, part in zip(layout.text, layout.match, strict=True):
        rows = p[:, list(group)]  # (heads, n_group, k)
        total = rows[..., all_image].sum(-1)
        own = rows[..., list(layout.image[part])].sum(-1)
        frac = torch.where(total > 0, own / total.clamp_min(1e-300), torch.zeros_like(total))
        groups.append(frac.mean(-1))
    return torch.stack(groups).mean(0)


def chance_mass(layout: Layout) -> float:
    """The partition attention mass of attention spread evenly over the image tokens."""
    check_type(layout, "layout", Layout, "a Layout")
    n = sum(len(p) for p in layout.image)
    return float(np.mean([len(layout.image[m]) / n for m in layout.match]))


# ---------------------------------------------------------------------------------------------- on a model
def _split_inputs(inputs, name: str = "inputs") -> tuple[torch.Tensor, dict]:
    if isinstance(inputs, torch.Tensor):
        return inputs, {}
    if isinstance(inputs, Mapping) and "input_ids" in inputs:
        rest = {k: v for k, v in inputs.items() if k != "input_ids"}
        return inputs["input_ids"], rest
    raise TypeError(
        f"{name} must be input ids (a tensor) or a dict with 'input_ids' and the model's other inputs "
        f"(pixel_values, ...), got {type(inputs).__name__}"
    )


def _layouts(layouts, rows: int, seq: int) -> list[Layout]:
    if isinstance(layouts, Layout):
        layouts = [layouts] * rows
    if not isinstance(layouts, Sequence) or len(layouts) != rows:
        raise ValueError(f"layouts must be a Layout or one per input row ({rows}), got {layouts!r}")
    for i, lay in enumerate(layouts):
        check_type(lay, f"layouts[{i}]", Layout, "a Layout")
        if lay.max_position >= seq:
            raise ValueError(f"layouts[{i}]: position {lay.max_position} is beyond the sequence length {seq}")
    return list(layouts)


def _layers(model: HookedModel, layers) -> list[int]:
    if layers is None:
        return list(range(model.n_layers))
    if isinstance(layers, int):
        layers = [layers]
    if not isinstance(layers, (list, tuple, range)) or not layers:
        raise ValueError(f"layers must be None, a layer or a non-empty list of layers, got {layers!r}")
    return [check_int(layer, "layers", minimum=0, maximum=model.n_layers - 1) for layer in layers]


@dataclass(frozen=True)
class BindingResult:
    """Binding score and modality gap by layer: ``binding[i]`` / ``modality_gap[i]`` are means over rows at
    ``layers[i]``; ``per_row`` ``(rows, layers)`` the binding scores of each row."""

    layers: list[int]
    hook: str
    binding: np.ndarray
    modality_gap: np.ndarray
    per_row: np.ndarray


@torch.no_grad()
def binding_by_layer(model, inputs, layouts, *, layers=None, hook: str = "resid_post") -> BindingResult:
    """Binding score and modality gap of the residual stream at ``hook`` (a short hook name) of each layer.

    Runs the model in eval mode; every submodule's mode is restored (also on a raise): in training mode the
    pass would draw a dropout mask, and the scores would be one sample of it."""
    hooked = wrap(model)
    ids, kwargs = _split_inputs(inputs)
    ids = hooked.token_ids(ids)
    lays = _layouts(layouts, ids.shape[0], ids.shape[1])
    chosen = _layers(hooked, layers)
    names = [act_name(hook, layer) for layer in chosen]
    with eval_mode(hooked.model):
        _, cache = hooked.run_with_cache(ids, names, **kwargs)
    per_row = np.zeros((len(lays), len(chosen)))
    gaps = np.zeros((len(lays), len(chosen)))
    for j, name in enumerate(names):
        acts = cache[name]
        for i, lay in enumerate(lays):
            img = torch.stack([acts[i, list(p)].double().mean(0) for p in lay.image])
            txt = torch.stack([acts[i, list(t)].double().mean(0) for t in lay.text])
            per_row[i, j] = float(binding_score(img, txt, lay.match))
            all_img = acts[i, [q for p in lay.image for q in p]]
            all_txt = acts[i, [q for t in lay.text for q in t]]
            gaps[i, j] = float(modality_gap(all_img, all_txt))
    return BindingResult(chosen, hook, per_row.mean(0), gaps.mean(0), per_row)


@dataclass(frozen=True)
class AttentionMass:
    """Partition attention mass ``mass (layers, heads)`` (mean over rows), and ``chance``: the mass of
    attention spread evenly over the image tokens (mean over rows)."""

    layers: list[int]
    mass: np.ndarray
    chance: float


@torch.no_grad()
def attention_mass(model, inputs, layouts, *, layers=None) -> AttentionMass:
    """Partition attention mass of every head of ``layers`` (default all), averaged over the input rows.

    Runs the model in eval mode; every submodule's mode is restored (also on a raise): in training mode the
    pass would draw a dropout mask, and the masses would be one sample of it."""
    hooked = wrap(model)
    ids, kwargs = _split_inputs(inputs)
    ids = hooked.token_ids(ids)
    lays = _layouts(layouts, ids.shape[0], ids.shape[1])
    chosen = _layers(hooked, layers)
    names = [act_name("pattern", layer) for layer in chosen]
    with eval_mode(hooked.model):
        _, cache = hooked.run_with_cache(ids, names, **kwargs)
    mass = np.stack([
        np.mean([partition_attention_mass(cache[n][i], lay).cpu().numpy() for i, lay in enumerate(lays)], axis=0)
        for n in names
    ])  # fmt: skip
    return AttentionMass(chosen, mass, float(np.mean([chance_mass(lay) for lay in lays])))


@dataclass(frozen=True)
class SwapResult:
    """Outcome of :func:`swap_test`: ``predictions`` (rows,) the argmax over the answer tokens after patching,
    ``clean_predictions`` without patching, ``follows`` whether the patched answer is the source answer,
    ``logits`` (rows, answers) after patching and ``clean_logits`` before."""

    predictions: np.ndarray
    clean_predictions: np.ndarray
    follows: np.ndarray
    logits: torch.Tensor
    clean_logits: torch.Tensor

    @property
    def swap_accuracy(self) -> float:
        """The fraction of rows whose patched answer is the source answer."""
        return float(self.follows.mean())


def _row_positions(positions, rows: int, seq: int, name: str) -> list[tuple[int, ...]]:
    if (
        isinstance(positions, Sequence)
        and positions
        and all(isinstance(p, (int, np.integer)) for p in positions)
    ):
        positions = [positions] * rows
    if isinstance(positions, (str, bytes)) or not isinstance(positions, Sequence) or len(positions) != rows:
        raise ValueError(
            f"{name} must be a list of positions, or one list per input row ({rows}), got {positions!r}"
        )
    out = [_positions(p, f"{name}[{i}]") for i, p in enumerate(positions)]
    for i, p in enumerate(out):
        if max(p) >= seq:
            raise ValueError(f"{name}[{i}]: position {max(p)} is beyond the sequence length {seq}")
    return out


def _subspace(subspace, d: int) -> torch.Tensor | None:
    if subspace is None:
        return None
    if not isinstance(subspace, torch.Tensor) or subspace.ndim != 2 or subspace.shape[1] != d:
        raise ValueError(
            f"subspace must be a tensor (k, {d}) whose rows span the patched subspace, got "
            f"{getattr(subspace, 'shape', type(subspace).__name__)}"
        )
    if subspace.shape[0] < 1 or not torch.isfinite(subspace).all():
        raise ValueError("subspace must hold at least one finite row")
    q, r = torch.linalg.qr(subspace.double().T)  # orthonormal basis of the row span
    rank = int((r.diagonal().abs() > 1e-9 * r.diagonal().abs().max().clamp_min(1e-300)).sum())
    if rank < subspace.shape[0]:
        raise ValueError(f"subspace's rows must be linearly independent (rank {rank} < {subspace.shape[0]})")
    return q  # (d, k)


@torch.no_grad()
def swap_test(
    model,
    base,
    source,
    positions,
    *,
    layer: int,
    answer_tokens,
    source_answers,
    source_positions=None,
    subspace: torch.Tensor | None = None,
    hook: str = "resid_pre",
    position: int = -1,
) -> SwapResult:
    """Patch the activation ``hook`` of ``layer`` at ``positions`` of the ``base`` run with the ``source``
    run's activation at ``source_positions`` (default: the same positions), and compare the answers.

    ``base`` and ``source`` are input ids or dicts of the model's inputs (same batch size and length).
    ``positions`` is one list for every row or one list per row. With ``subspace`` ``(k, d_model)``, only the
    component in the span of its rows is replaced (``x + P (s - x)``, ``P`` the orthogonal projection), as
    in an interchange intervention on a known ID subspace. The answer is the argmax over ``answer_tokens``
    at ``position``; ``source_answers`` (rows,) are indices into ``answer_tokens``.

    Runs the model in eval mode; every submodule's mode is restored (also on a raise): the passes it compares
    must see the same network, where in training mode each would draw its own dropout mask.
    """
    hooked = wrap(model)
    base_ids, base_kwargs = _split_inputs(base, "base")
    source_ids, source_kwargs = _split_inputs(source, "source")
    base_ids, source_ids = hooked.token_ids(base_ids), hooked.token_ids(source_ids)
    if base_ids.shape != source_ids.shape:
        raise ValueError(f"base and source must have the same shape, got {tuple(base_ids.shape)} and "
                         f"{tuple(source_ids.shape)}")  # fmt: skip
    rows, seq = base_ids.shape
    check_int(layer, "layer", minimum=0, maximum=hooked.n_layers - 1)
    check_int(position, "position", minimum=-seq, maximum=seq - 1)
    pos = _row_positions(positions, rows, seq, "positions")
    src = pos if source_positions is None else _row_positions(source_positions, rows, seq, "source_positions")
    for i, (a, b) in enumerate(zip(pos, src, strict=True)):
        if len(a) != len(b):
            raise ValueError(f"source_positions[{i}] must have as many positions as positions[{i}]")
    tokens = _indices(answer_tokens, "answer_tokens", hooked.d_vocab - 1)
    if tokens.ndim != 1 or tokens.numel() < 2 or (tokens < 0).any() or (tokens >= hooked.d_vocab).any():
        raise ValueError(
            f"answer_tokens must be at least 2 token ids in [0, {hooked.d_vocab}), got {answer_tokens!r}"
        )
    answers = _indices(source_answers, "source_answers", max(tokens.numel() - 1, 0))
    if answers.shape != (rows,) or (answers < 0).any() or (answers >= tokens.numel()).any():
        raise ValueError(
            f"source_answers must hold one index into answer_tokens (0..{tokens.numel() - 1}) per row ({rows}), "
            f"got {source_answers!r}"
        )
    basis = _subspace(subspace, hooked.d_model)
    name = act_name(hook, layer)

    def patch(act: torch.Tensor, point) -> torch.Tensor:
        out = act.clone()
        for i, (a, b) in enumerate(zip(pos, src, strict=True)):
            new = donor[i, list(b)].to(act.dtype)
            if basis is None:
                out[i, list(a)] = new
            else:
                old = act[i, list(a)].double()
                on = basis.to(act.device)
                delta = (new.double() - old) @ on @ on.T
                out[i, list(a)] = (old + delta).to(act.dtype)
        return out

    with eval_mode(hooked.model):
        _, cache = hooked.run_with_cache(source_ids, [name], **source_kwargs)
        donor = cache[name]
        if donor.ndim != 3:
            raise ValueError(
                f"hook must name a residual-stream activation (batch, seq, d_model), got {hook!r}"
            )
        clean = hooked(base_ids, **base_kwargs)[:, position][:, tokens]
        patched = hooked.run_with_hooks(base_ids, [(name, patch)], **base_kwargs)[:, position][:, tokens]
    predictions = patched.argmax(-1).cpu().numpy()
    return SwapResult(
        predictions=predictions,
        clean_predictions=clean.argmax(-1).cpu().numpy(),
        follows=predictions == answers.numpy(),
        logits=patched.float(),
        clean_logits=clean.float(),
    )


def image_partitions(
    input_ids: torch.Tensor, image_token_id: int, patch_grid: tuple[int, int], rows: int, cols: int = 1
) -> list[tuple[int, ...]]:
    """Token positions of each cell of a ``rows`` x ``cols`` grid over one image's tokens in ``input_ids``
    ``(seq,)``: the ``image_token_id`` positions, read as a row-major ``patch_grid`` ``(h, w)`` of patches,
    cut with :func:`icml_interp.grounding.partition_boxes` (in patch units); cells row by row."""
    from icml_interp.grounding.cues import partition_boxes

    if not isinstance(input_ids, torch.Tensor) or input_ids.ndim != 1:
        raise ValueError(
            f"input_ids must be one row of token ids (seq,), got {getattr(input_ids, 'shape', input_ids)}"
        )
    check_int(image_token_id, "image_token_id", minimum=0)
    if not (isinstance(patch_grid, tuple) and len(patch_grid) == 2):
        raise TypeError(f"patch_grid must be a pair (h, w) of patch counts, got {patch_grid!r}")
    h, w = (check_int(v, "patch_grid", minimum=1) for v in patch_grid)
    where = (input_ids == image_token_id).nonzero().flatten().tolist()
    if len(where) != h * w:
        raise ValueError(
            f"patch_grid {h}x{w} needs {h * w} image tokens, but input_ids holds {len(where)} of id {image_token_id}"
        )
    boxes = partition_boxes((h, w), rows, cols)
    return [tuple(where[y * w + x] for y in range(t, b) for x in range(left, r)) for t, b, left, r in boxes]
