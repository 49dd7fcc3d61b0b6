"""TransformerLens-style named hook points on an unmodified Hugging Face language model (causal LMs, and ESM-2
masked protein LMs).

:class:`HookedModel` attaches plain torch forward (pre-)hooks to the modules of the wrapped model for the
duration of one context and removes them on exit, also when the forward pass raises. The weights are never
converted or copied, so the wrapped model's logits are the model's own logits, bit for bit.

Hook names (``L`` = layer, shapes for a batch of ``(batch, seq)`` token ids):

==================================  =====================================  ===================================
name                                what                                   shape
==================================  =====================================  ===================================
``hook_embed``                      token embeddings (the embedding        ``(batch, seq, d_model)``
                                    module's output; Gemma's are scaled
                                    by sqrt(d_model) in that module;
                                    vision-language models put the image
                                    features in afterwards: at image
                                    tokens read or write
                                    ``blocks.0.hook_resid_pre`` instead)
``hook_pos_embed``                  position embeddings (GPT-2 only; one   ``(batch, seq, d_model)``
                                    copy per prompt, writable per prompt)
``blocks.L.hook_resid_pre``         residual stream entering block L       ``(batch, seq, d_model)``
``blocks.L.ln1.hook_scale``         the norm's divisor before attention    ``(batch, seq, 1)``
                                    (RMS, or the std for LayerNorm);
                                    writable, as in TransformerLens (no
                                    ln1/ln2 hooks in OLMo 2: no norm there)
``blocks.L.ln1.hook_normalized``    the norm's output                      ``(batch, seq, d_model)``
``blocks.L.attn.hook_q/k/v``        per-head queries / keys / values,      ``(batch, seq, heads, d_head)``
                                    before rotary embeddings (after the    (keys, values: kv heads)
                                    query / key norms of Gemma 3, OLMo 2
                                    and Qwen 3: what hook_rot_q/k rotate;
                                    before them in TransformerLens)
``blocks.L.attn.hook_rot_q/k``      queries / keys after rotary            ``(batch, seq, heads, d_head)``
                                    embeddings (rotary models only)        (keys: kv heads)
``blocks.L.attn.hook_attn_scores``  scores after scaling, softcapping      ``(batch, heads, seq_q, seq_k)``
                                    (Gemma 2) and the additive mask
                                    (sliding windows included), before
                                    the softmax
``blocks.L.attn.hook_pattern``      attention probabilities                ``(batch, heads, seq_q, seq_k)``
                                    (these four switch the model to our
                                    eager attention, HOOKED_ATTENTION,
                                    while attached: eager's logits)
``blocks.L.attn.hook_z``            per-head outputs before ``o_proj``     ``(batch, seq, heads, d_head)``
``blocks.L.hook_attn_out``          attention output added to the stream  ``(batch, seq, d_model)``
                                    (Gemma 2 / 3, OLMo 2: after the norm
                                    of the attention output)
``blocks.L.hook_resid_mid``         resid_pre + attn_out (not in parallel  ``(batch, seq, d_model)``
                                    blocks such as GPT-NeoX's)
``blocks.L.ln2.hook_scale``         the same for the norm before the MLP   ``(batch, seq, 1)``
``blocks.L.ln2.hook_normalized``    the norm's output before the MLP       ``(batch, seq, d_model)``
``blocks.L.mlp.hook_pre``           MLP pre-activation (the gate           ``(batch, seq, d_mlp)``
                                    projection of gated MLPs)
``blocks.L.mlp.hook_pre_linear``    a gated MLP's up projection            ``(batch, seq, d_mlp)``
``blocks.L.mlp.hook_post``          input of the down projection: the      ``(batch, seq, d_mlp)``
                                    MLP keys (alias ``mlp.hook_key``)
``blocks.L.hook_mlp_out``           MLP output added to the stream         ``(batch, seq, d_model)``
                                    (Gemma 2 / 3, OLMo 2: after its norm)
``blocks.L.hook_resid_post``        residual stream leaving block L        ``(batch, seq, d_model)``
``ln_final.hook_scale``             the final norm's divisor               ``(batch, seq, 1)``
``ln_final.hook_normalized``        the final norm's output                ``(batch, seq, d_model)``
==================================  =====================================  ===================================

Naming note (our choice): as in TransformerLens, ``mlp.hook_post`` is the input of the output (down)
projection, i.e. the paper's "MLP keys"; ``mlp.hook_pre`` is the pre-activation. ``mlp.hook_key`` is an
alias of ``mlp.hook_post`` for readers of the Anchor–Adapter paper.

A hook function is called as ``fn(activation, hook)`` (``hook`` is the :class:`HookPoint`, with ``.name``
and ``.layer``) and returns ``None`` (leave the activation alone) or a tensor of the same shape.
"""

from __future__ import annotations

import difflib
import inspect
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeAlias, cast

import torch
from torch import nn

from icml_interp.hooks.arch import ArchSpec, get_module, spec_for
from icml_interp.validation import check_bool, check_int, check_replacement, check_token_ids, check_type

HookFn = Callable[[torch.Tensor, "HookPoint"], "torch.Tensor | None"]
NameFilter: TypeAlias = "str | Iterable[str] | Callable[[str], bool] | None"

_BLOCK_HOOKS = {  # short name -> (suffix in the block, stage: the order of computation inside a block)
    "resid_pre": ("hook_resid_pre", 0),
    "ln1_scale": ("ln1.hook_scale", 1),
    "ln1_normalized": ("ln1.hook_normalized", 2),
    "q": ("attn.hook_q", 3),
    "k": ("attn.hook_k", 3),
    "v": ("attn.hook_v", 3),
    "rot_q": ("attn.hook_rot_q", 4),
    "rot_k": ("attn.hook_rot_k", 4),
    "attn_scores": ("attn.hook_attn_scores", 4),
    "pattern": ("attn.hook_pattern", 4),
    "z": ("attn.hook_z", 5),
    "attn_out": ("hook_attn_out", 6),
    "resid_mid": ("hook_resid_mid", 7),
    "ln2_scale": ("ln2.hook_scale", 8),
    "ln2_normalized": ("ln2.hook_normalized", 9),
    "pre": ("mlp.hook_pre", 10),
    "pre_linear": ("mlp.hook_pre_linear", 10),
    "post": ("mlp.hook_post", 11),
    "key": ("mlp.hook_key", 11),
    "mlp_out": ("hook_mlp_out", 12),
    "resid_post": ("hook_resid_post", 13),
}


def act_name(short: str, layer: int | None = None) -> str:
    """The full hook name of a short one: ``act_name("resid_post", 3) == "blocks.3.hook_resid_post"``."""
    check_type(short, "short", str, "a short hook name (a string)")
    if short in ("embed", "pos_embed"):
        return f"hook_{short}"
    if short in ("normalized", "ln_final"):
        return "ln_final.hook_normalized"
    if short not in _BLOCK_HOOKS:
        known = [*sorted(_BLOCK_HOOKS), "embed", "pos_embed", "normalized"]
        raise ValueError(
            f"unknown short hook name {short!r}; close matches: "
            f"{difflib.get_close_matches(short, known, n=3, cutoff=0.5)}; known: {known}"
        )
    check_int(layer, f"layer of {short!r}", minimum=0)
    return f"blocks.{layer}.{_BLOCK_HOOKS[short][0]}"


@dataclass(eq=False)
class HookPoint:
    """One named place in the forward pass: which module, and how its tensor is read and written."""

    name: str
    layer: int | None
    kind: str  # out | in | heads_in | heads_out | fused_qkv | mid | scale | pos | inner
    module: nn.Module
    stage: int
    extra: dict = field(default_factory=dict)


class ActivationCache(dict):
    """Activations by hook name. ``cache["resid_post", 3]`` is ``cache["blocks.3.hook_resid_post"]``."""

    def __getitem__(self, key):
        if isinstance(key, tuple):
            key = act_name(*key)
        try:
            return super().__getitem__(key)
        except KeyError:
            close = difflib.get_close_matches(str(key), list(self), n=5)
            raise KeyError(f"{key!r} is not in this cache; close matches: {close}") from None

    def stack(self, short: str, layers: Iterable[int]) -> torch.Tensor:
        """``torch.stack`` of one activation over ``layers`` (leading dimension = layer)."""
        check_type(short, "short", str, "a short hook name (a string)")
        if isinstance(layers, (str, bytes)) or not isinstance(layers, Iterable):
            raise TypeError(f"layers must be an iterable of ints, got {type(layers).__name__}")
        layers = list(layers)
        if not layers:
            raise ValueError("layers must name at least one layer")
        tensors = []
        for layer in layers:
            check_int(layer, "layers", minimum=0)
            name = act_name(short, layer)
            if name not in self:
                raise ValueError(
                    f"layers: {name!r} is not in this cache; close matches: "
                    f"{difflib.get_close_matches(name, list(self), n=5)}"
                )
            tensors.append(self[name])
        return torch.stack(tensors)


def _norm_parts(
    module: nn.Module, x: torch.Tensor, offset: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Any]:
    """A norm's input split as TransformerLens' ``hook_scale`` sees it: ``(centred input, scale, weight,
    bias)`` with ``output = centred / scale * weight + bias``; LayerNorm centres and has a bias, RMSNorm
    (Llama's, in float32 as it computes) neither. ``scale`` is ``(batch, seq, 1)``. Half precision is computed
    in float32, as torch's LayerNorm computes it (in float16 the squares overflow past 65504). ``offset``
    (the spec's ``norm_weight_offset``) is added to an RMSNorm's weight: Gemma's multiplies by ``1 + weight``,
    in float32."""
    if isinstance(module, nn.LayerNorm):
        x = x.to(torch.promote_types(x.dtype, torch.float32))
        centred = x - x.mean(-1, keepdim=True)
        scale = (centred.pow(2).mean(-1, keepdim=True) + module.eps).sqrt()
        return centred, scale, module.weight, module.bias
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    weight = getattr(module, "weight", None)
    if eps is None or not isinstance(weight, torch.Tensor):
        raise TypeError(f"hook_scale supports nn.LayerNorm and RMSNorm modules, got {type(module).__name__}")
    x32 = x.float()
    if offset:
        weight = offset + weight.float()
    return x32, (x32.pow(2).mean(-1, keepdim=True) + eps).sqrt(), weight, None


HOOKED_ATTENTION = "icml_hooked_eager"
# attention module -> slot ("rot_q", "rot_k", "attn_scores", "pattern") -> the (point, fn) pairs attached there
_INNER: weakref.WeakKeyDictionary[nn.Module, dict[str, list[tuple[HookPoint, HookFn]]]] = (
    weakref.WeakKeyDictionary()
)
# model -> (how many attached hook sets need HOOKED_ATTENTION, the implementation(s) the first of them found, as
# _attn_implementations gives them):
# contexts and add_hook hooks end in any order, and only the last one restores the implementation
_ATTENTION_USERS: weakref.WeakKeyDictionary[nn.Module, tuple[int, str | dict | None]] = (
    weakref.WeakKeyDictionary()
)


def _run_slot(module: nn.Module, slot: str, tensor: torch.Tensor) -> torch.Tensor:
    for point, fn in list(_INNER.get(module, {}).get(slot, ())):
        new = _apply(point, fn, tensor)
        tensor = tensor if new is None else new
    return tensor


def _hooked_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Eager attention with four hook slots, registered with transformers as ``HOOKED_ATTENTION``.

    The same operations in the same order as the eager attention of the mapped architectures (Llama family,
    GPT-2, GPT-NeoX, Gemma 1-3, OLMo 2; float32 softmax), so that with no hook attached the logits equal eager
    attention's bit for bit (tested). ``query``/``key`` arrive rotated, ``(batch, heads, seq, d_head)``; their
    hooks see TransformerLens' ``(batch, seq, heads, d_head)``. Scores are ``(batch, heads, seq_q, seq_k)``
    after scaling, the ``softcap`` a model passes (Gemma 2: ``softcap * tanh(scores / softcap)``, before the
    mask as in its eager attention) and the additive mask (masked entries hold the mask's large negative
    value; sliding-window layers get their window's mask from transformers, as eager attention does).
    """
    query = _run_slot(module, "rot_q", query.transpose(1, 2)).transpose(1, 2)
    key = _run_slot(module, "rot_k", key.transpose(1, 2)).transpose(1, 2)
    groups = query.shape[1] // key.shape[1]
    if groups > 1:  # grouped-query attention: each key/value head serves `groups` query heads
        b, kv, n, d = key.shape
        key = key[:, :, None].expand(b, kv, groups, n, d).reshape(b, kv * groups, n, d)
        value = value[:, :, None].expand(b, kv, groups, n, d).reshape(b, kv * groups, n, d)
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    softcap = kwargs.get("softcap")
    if softcap is not None:  # Gemma 2's eager attention, op for op
        scores = scores / softcap
        scores = torch.tanh(scores)
        scores = scores * softcap
    if attention_mask is not None:
        scores = scores + attention_mask
    scores = _run_slot(module, "attn_scores", scores)
    weights = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = _run_slot(module, "pattern", weights)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    out = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return out, weights


def _attn_implementations(config: Any) -> str | dict:
    """The attention implementation of a model's ``config``, in the form ``set_attn_implementation`` takes back:
    a string, or where a sub-model's differs (a vision-language model whose language model has no SDPA, Gemma 2
    in LLaVA: eager beside the vision tower's sdpa) a dict by sub-config name, ``""`` for the model itself."""
    own = config._attn_implementation
    subs = {}
    for key in getattr(config, "sub_configs", None) or {}:
        sub = getattr(config, key, None)
        if sub is not None and sub is not config:
            subs[key] = _attn_implementations(sub)
    if all(value == own for value in subs.values()):
        return own
    return {"": own, **subs}


def _register_hooked_attention() -> None:
    """Make ``HOOKED_ATTENTION`` a transformers attention implementation (with eager attention's masks)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(HOOKED_ATTENTION, _hooked_attention)
    AttentionMaskInterface.register(HOOKED_ATTENTION, eager_mask)


def split_fused_qkv(output: torch.Tensor, layout: str, n: int, d: int) -> list[torch.Tensor]:
    """A fused q|k|v projection output ``(..., 3 * n * d)`` as ``[q, k, v]``, each ``(..., n, d)``: GPT-2's
    layout is q | k | v (each ``n * d`` wide), GPT-NeoX's is per head q | k | v."""
    lead = output.shape[:-1]
    if layout == "gpt2":
        return [part.view(*lead, n, d) for part in output.split(n * d, dim=-1)]
    return list(output.view(*lead, n, 3 * d).split(d, dim=-1))


def _apply(point: HookPoint, fn: HookFn, given: torch.Tensor) -> torch.Tensor | None:
    """``fn(given, point)``, checked: ``None`` or a tensor of ``given``'s shape and dtype."""
    return check_replacement(fn(given, point), given, f"hook function on {point.name!r}")


class HookedModel:
    """A Hugging Face causal LM with named hook points; the model itself is not modified.

    ``HookedModel(model)`` looks up the module paths of ``model.config.model_type`` in
    :data:`icml_interp.hooks.arch.ARCHITECTURES` (Llama family including SmolLM2, Mistral, Qwen2/3, Gemma,
    Gemma 2, Gemma 3 text-only (``Gemma3ForCausalLM``), OLMo 2, GPT-2, GPT-NeoX/Pythia, ESM-2, and the language
    model of LLaVA (mapped as its own family: Llama, Gemma, ...) / Qwen2-VL / Qwen2.5-VL / Gemma 3
    (``Gemma3ForConditionalGeneration``, what
    ``AutoModelForCausalLM`` loads for Gemma 3 4B and larger), whose other inputs such as ``pixel_values`` pass
    through as keywords). Calling it returns the model's logits; :meth:`run_with_cache` and
    :meth:`run_with_hooks` read or change activations; :meth:`hooks` is the context manager underneath.
    """

    def __init__(self, model: nn.Module, spec: ArchSpec | None = None, tokenizer: Any = None):
        if isinstance(model, HookedModel):
            raise TypeError("model is already a HookedModel")
        check_type(model, "model", nn.Module, "a torch.nn.Module (a Hugging Face causal LM)")
        if spec is not None:
            check_type(spec, "spec", ArchSpec, "an ArchSpec (or None: looked up by model.config.model_type)")
        if tokenizer is not None and not callable(tokenizer):
            raise TypeError(
                f"tokenizer must be None or a Hugging Face tokenizer, got {type(tokenizer).__name__}"
            )
        self.model: Any = model  # a Hugging Face causal LM: config, generate, set_attn_implementation
        self.tokenizer = tokenizer
        self.spec = spec if spec is not None else spec_for(model)
        self._persistent = ExitStack()  # the hooks of add_hook, removed by reset_hooks
        # the keywords the forward pass takes: its named parameters and the outputs HF reads from **kwargs
        forward = inspect.signature(model.forward).parameters
        self._forward_keywords = frozenset(
            name for name, p in forward.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
        ) - {"input_ids"} | {"output_attentions", "output_hidden_states", "return_dict"}
        try:
            self._locate(model)
        except AttributeError as err:
            raise ValueError(
                f"spec does not fit model ({err}); its module paths must name the model's modules"
            ) from None

    def _locate(self, model: nn.Module) -> None:
        """Find the modules the spec names (``AttributeError`` for a path the model lacks)."""
        self.blocks = cast(nn.ModuleList, get_module(model, self.spec.layers))
        self.final_norm = get_module(model, self.spec.final_norm)
        # the head's name moved between transformers releases (GPT-NeoX: embed_out, then lm_head); the
        # Hugging Face accessor finds it in each, the spec's path is the fallback for other models
        head = None if self.spec.head_module else getattr(model, "get_output_embeddings", lambda: None)()
        self.unembed = head if isinstance(head, nn.Module) else get_module(model, self.spec.unembed)
        self.embed = cast(nn.Embedding, get_module(model, self.spec.embed))
        cfg: Any = model.config  # a Hugging Face PretrainedConfig; a vision-language model's text config
        if hasattr(cfg, "get_text_config"):
            cfg = cfg.get_text_config()
        self._text_config = cfg
        self.n_layers: int = len(self.blocks)
        self.n_heads: int = cfg.num_attention_heads
        self.n_kv_heads: int = getattr(cfg, "num_key_value_heads", None) or self.n_heads
        self.d_model: int = cfg.hidden_size
        self.d_head: int = getattr(cfg, "head_dim", None) or self.d_model // self.n_heads
        self.d_vocab: int = self.embed.num_embeddings
        self.parallel = bool(self.spec.parallel_attr and getattr(cfg, self.spec.parallel_attr, False))
        self.rotary = (
            getattr(cfg, "rope_parameters", None) is not None
            or hasattr(cfg, "rope_theta")
            or getattr(cfg, "position_embedding_type", None) == "rotary"  # ESM
        )
        self._points = self._build_points()

    # ------------------------------------------------------------------ hook points
    def _build_points(self) -> dict[str, HookPoint]:
        s = self.spec
        points = {"hook_embed": HookPoint("hook_embed", None, "out", self.embed, -1)}
        if s.pos_embed:  # the module that calls the position embedding gives the batch size (see "pos")
            parent = s.pos_embed.rpartition(".")[0] or "."
            points["hook_pos_embed"] = HookPoint(
                "hook_pos_embed",
                None,
                "pos",
                get_module(self.model, s.pos_embed),
                -1,
                {"base": get_module(self.model, parent)},
            )
        for i, block in enumerate(self.blocks):
            attn, mlp = get_module(block, s.attn), get_module(block, s.mlp)
            heads = {"n": self.n_heads, "d": self.d_head}
            kv = {"n": self.n_kv_heads, "d": self.d_head}

            def add(short, kind, module, i=i, **extra):
                name = act_name(short, i)
                points[name] = HookPoint(name, i, kind, module, _BLOCK_HOOKS[short][1], extra)

            add("resid_pre", "in", block)
            for ln in ("ln1", "ln2"):
                if getattr(s, ln):
                    norm = get_module(block, getattr(s, ln))
                    add(f"{ln}_scale", "scale", norm, offset=s.norm_weight_offset)
                    add(f"{ln}_normalized", "out", norm)
            if s.qkv == "separate":
                paths = list(s.qkv_modules)
                layouts = ["flat"] * 3
                if s.qk_norm:  # hook_q / hook_k: the normed queries and keys, as rotary receives them
                    paths[:2] = s.qk_norm
                    layouts[:2] = [s.qk_norm_layout] * 2
                for short, path, shape, layout in zip("qkv", paths, (heads, kv, kv), layouts, strict=True):
                    add(short, "heads_out", get_module(attn, path), heads_layout=layout, **shape)
            else:
                for which, short in enumerate("qkv"):
                    add(
                        short,
                        "fused_qkv",
                        get_module(attn, s.qkv_modules[0]),
                        which=which,
                        layout=s.qkv,
                        **heads,
                    )
            core = get_module(attn, s.attn_core) if s.attn_core else attn
            if self.rotary:
                add("rot_q", "inner", core, slot="rot_q")
                add("rot_k", "inner", core, slot="rot_k")
            add("attn_scores", "inner", core, slot="attn_scores")
            add("pattern", "inner", core, slot="pattern")
            add("z", "heads_in", get_module(attn, s.o_proj), **heads)
            attn_out = get_module(block, s.attn_out) if s.attn_out else attn
            add("attn_out", "out", attn_out)
            if not self.parallel:
                add("resid_mid", "mid", attn_out, block=block)
            add("pre", "out", get_module(mlp, s.mlp_in))
            if s.mlp_up:
                add("pre_linear", "out", get_module(mlp, s.mlp_up))
            add("post", "in", get_module(mlp, s.down))
            add("key", "in", get_module(mlp, s.down))
            add("mlp_out", "out", get_module(block, s.mlp_out) if s.mlp_out else mlp)
            add("resid_post", "out", block)
        points["ln_final.hook_scale"] = HookPoint(
            "ln_final.hook_scale", None, "scale", self.final_norm, 10**6, {"offset": s.norm_weight_offset}
        )
        points["ln_final.hook_normalized"] = HookPoint(
            "ln_final.hook_normalized", None, "out", self.final_norm, 10**6 + 1
        )
        return points

    @property
    def hook_names(self) -> list[str]:
        """Every hook name of this model, in the order of the forward pass."""
        return list(self._points)

    @property
    def hook_dict(self) -> dict[str, HookPoint]:
        """Every hook point by name, in the order of the forward pass (TransformerLens' ``hook_dict``)."""
        return dict(self._points)

    def hook_point(self, name: str) -> HookPoint:
        """The :class:`HookPoint` called ``name``; an unknown name raises with the closest known names."""
        check_type(name, "hook name", str, "a string")
        if name not in self._points:
            close = difflib.get_close_matches(name, self.hook_names, n=5, cutoff=0.5)
            hint = ""
            if name.endswith("hook_resid_mid") and self.parallel:
                hint = " (this model's blocks are parallel: attention and MLP both read resid_pre)"
            raise ValueError(
                f"unknown hook name {name!r}{hint}; close matches: {close}. "
                f"This model has {self.n_layers} blocks (0..{self.n_layers - 1}); "
                "see HookedModel.hook_names"
            )
        return self._points[name]

    def resolve(self, names: NameFilter, argument: str = "names") -> list[str]:
        """Hook names from a name, a list, a predicate ``f(name) -> bool``, or ``None`` (every hook except
        the attention internals ``hook_rot_q/k``, ``hook_attn_scores`` and ``hook_pattern``, which switch the
        model to our eager attention, and the ``mlp.hook_key`` alias); errors name
        ``argument``, the caller's name for ``names``."""
        if names is None:
            return [
                n for n, p in self._points.items() if p.kind != "inner" and not n.endswith("mlp.hook_key")
            ]
        if isinstance(names, str):
            names = [names]
        if callable(names):
            return [n for n in self._points if names(n)]
        if not isinstance(names, (list, tuple)):
            raise TypeError(
                f"{argument} must be a hook name, a list of them, a predicate or None, got {names!r}"
            )
        for name in names:
            try:
                self.hook_point(name)
            except (TypeError, ValueError) as err:
                raise type(err)(f"{argument}: {err}") from None
        return list(names)

    # ------------------------------------------------------------------ registering
    def _register(self, point: HookPoint, fn: HookFn, stack: ExitStack) -> None:
        kind, extra = point.kind, point.extra

        def add(handle):
            stack.callback(handle.remove)

        if kind == "out":

            def hook(module, args, output):
                tensor = output[0] if isinstance(output, tuple) else output
                new = _apply(point, fn, tensor)
                if new is None:
                    return None
                return (new, *output[1:]) if isinstance(output, tuple) else new

            add(point.module.register_forward_hook(hook))
        elif kind == "in":

            def pre_hook(module, args, kwargs):
                tensor = args[0] if args else kwargs["hidden_states"]
                new = _apply(point, fn, tensor)
                if new is None:
                    return None
                return ((new, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": new})

            add(point.module.register_forward_pre_hook(pre_hook, with_kwargs=True))
        elif kind == "heads_in":

            def z_hook(module, args):
                flat = args[0]  # (batch, seq, heads * d_head)
                heads = flat.view(*flat.shape[:-1], extra["n"], extra["d"])
                new = _apply(point, fn, heads)
                return None if new is None else (new.reshape(flat.shape), *args[1:])

            add(point.module.register_forward_pre_hook(z_hook))
        elif kind == "heads_out":
            layout = extra["heads_layout"]

            def qkv_hook(module, args, output):
                if layout == "flat":  # (batch, seq, heads * d_head)
                    heads = output.view(*output.shape[:-1], extra["n"], extra["d"])
                else:  # a per-head norm's output, (batch, seq, heads, d_head) or (batch, heads, seq, d_head)
                    heads = output.transpose(1, 2) if layout == "bhsd" else output
                new = _apply(point, fn, heads)
                if new is None:
                    return None
                if layout == "flat":
                    return new.reshape(output.shape)
                return new.transpose(1, 2) if layout == "bhsd" else new

            add(point.module.register_forward_hook(qkv_hook))
        elif kind == "fused_qkv":
            n, d, which = extra["n"], extra["d"], extra["which"]

            def fused_hook(module, args, output):
                lead = output.shape[:-1]
                parts = split_fused_qkv(output, extra["layout"], n, d)
                new = _apply(point, fn, parts[which])
                if new is None:
                    return None
                parts[which] = new
                if extra["layout"] == "gpt2":
                    return torch.cat([p.reshape(*lead, n * d) for p in parts], dim=-1)
                return torch.cat(parts, dim=-1).reshape(output.shape)

            add(point.module.register_forward_hook(fused_hook))
        elif kind == "mid":
            stash = {}

            def stash_pre(module, args, kwargs):
                stash["pre"] = args[0] if args else kwargs["hidden_states"]

            def mid_hook(module, args, output):
                attn_out = output[0] if isinstance(output, tuple) else output
                mid = stash.pop("pre") + attn_out  # exactly the block's own sum
                new = _apply(point, fn, mid)
                if new is None or new is mid:
                    return None
                new_out = new - (mid - attn_out)  # so that resid_pre + attn_out' == new (up to rounding)
                return (new_out, *output[1:]) if isinstance(output, tuple) else new_out

            add(extra["block"].register_forward_pre_hook(stash_pre, with_kwargs=True))
            add(point.module.register_forward_hook(mid_hook))
        elif kind == "scale":

            def scale_hook(module, args, output):
                x = args[0]  # (batch, seq, d_model), the norm's input
                centred, scale, weight, bias = _norm_parts(module, x, extra["offset"])
                new = _apply(point, fn, scale.to(output.dtype))
                if new is None or torch.equal(new, scale.to(output.dtype)):
                    return None  # the module's own output, bit for bit
                out = centred / new.to(centred.dtype) * weight
                return (out if bias is None else out + bias).to(output.dtype)

            add(point.module.register_forward_hook(scale_hook))
        elif kind == "pos":
            # GPT-2 looks up one row of position ids for the whole batch: its position embeddings are
            # (1, seq, d_model). The hook sees them as TransformerLens' (batch, seq, d_model), the batch size
            # read from the input ids (or embeddings) of the module that calls the position embedding, so that
            # a hook can read or write each prompt's own; the model then adds that (batch, seq, d_model)
            # tensor, which gives the same sums as the broadcast one.
            batch: dict[str, int] = {}

            def batch_pre(module, args, kwargs):
                batch.pop("n", None)
                given = args[0] if args else kwargs.get("input_ids")
                if given is None:
                    given = kwargs.get("inputs_embeds")
                if isinstance(given, torch.Tensor) and given.ndim >= 2:
                    batch["n"] = given.shape[0]

            def pos_hook(module, args, output):
                n = batch.pop("n", output.shape[0])
                given = output
                if output.shape[0] == 1 and n > 1:  # a copy: the hook may write each prompt's row in place
                    given = output.expand(n, *output.shape[1:]).clone()
                new = _apply(point, fn, given)
                if new is None:
                    return None if given is output else given
                return new

            add(extra["base"].register_forward_pre_hook(batch_pre, with_kwargs=True))
            add(point.module.register_forward_hook(pos_hook))
        elif kind == "inner":  # inside the attention function: see _hooked_attention
            slots = _INNER.setdefault(point.module, {}).setdefault(extra["slot"], [])
            entry = (point, fn)
            slots.append(entry)
            stack.callback(slots.remove, entry)
        else:  # pragma: no cover - the map above defines every kind
            raise AssertionError(kind)

    @contextmanager
    def hooks(self, fwd_hooks: Iterable[tuple] = ()) -> Iterator[HookedModel]:
        """Attach ``(name_or_filter, fn)`` pairs for the duration of the context; all are removed on exit,
        also when the body raises. Asking for ``hook_pattern`` switches to eager attention meanwhile."""
        with ExitStack() as stack:
            self._attach(fwd_hooks, stack)
            yield self

    def _attach(self, fwd_hooks: Iterable[tuple], stack: ExitStack, argument: str = "fwd_hooks") -> None:
        pairs = []
        for item in fwd_hooks:
            if not (isinstance(item, tuple) and len(item) == 2 and callable(item[1])):
                raise TypeError(f"fwd_hooks must hold (hook name or filter, function) pairs, got {item!r}")
            pairs += [(name, item[1]) for name in self.resolve(item[0], argument)]
        pairs.sort(key=lambda p: (self._points[p[0]].stage,))  # attn_out before resid_mid on the same module
        if any(self._points[name].kind == "inner" for name, _ in pairs):
            self._use_hooked_attention(stack)
        for name, fn in pairs:
            self._register(self._points[name], fn, stack)

    def _use_hooked_attention(self, stack: ExitStack) -> None:
        """Switch the model to ``HOOKED_ATTENTION`` until ``stack`` closes and no other hook set needs it."""
        model = self.model
        users, previous = _ATTENTION_USERS.get(model, (0, _attn_implementations(model.config)))
        if users == 0 and previous != HOOKED_ATTENTION:
            _register_hooked_attention()
            model.set_attn_implementation(HOOKED_ATTENTION)
        _ATTENTION_USERS[model] = (users + 1, previous)

        def release() -> None:
            users, previous = _ATTENTION_USERS.pop(model)
            if users > 1:
                _ATTENTION_USERS[model] = (users - 1, previous)
            elif previous != HOOKED_ATTENTION:
                model.set_attn_implementation(previous)  # each sub-model's own again

        stack.callback(release)

    def add_hook(self, name: NameFilter, fn: HookFn) -> None:
        """Attach ``fn`` at ``name`` (a name, a list or a predicate) until :meth:`reset_hooks`, as in
        TransformerLens; the context manager :meth:`hooks` is the safer habit (removed on exit)."""
        if not callable(fn):
            raise TypeError(f"fn must be a hook function (tensor, hook) -> tensor or None, got {fn!r}")
        with ExitStack() as stack:  # nothing stays attached if resolving or registering fails
            self._attach([(name, fn)], stack, "name")
            self._persistent.push(stack.pop_all())

    def reset_hooks(self) -> None:
        """Remove every hook :meth:`add_hook` attached (and restore the attention implementation)."""
        self._persistent.close()
        self._persistent = ExitStack()

    # ------------------------------------------------------------------ running
    def token_ids(self, input_ids) -> torch.Tensor:
        """``input_ids`` checked (a non-empty ``torch.long`` tensor ``(seq,)`` or ``(batch, seq)`` of ids in
        ``[0, d_vocab)``), as ``(batch, seq)``."""
        return check_token_ids(input_ids, self.d_vocab)

    def to_tokens(self, text: str | list[str], *, move_to_device: bool = True) -> torch.Tensor:
        """``text`` as token ids ``(batch, seq)`` with the tokenizer given at construction (its own special
        tokens: SmolLM2's adds none); a list of texts must tokenize to equal lengths. The ids are on the
        device of the model's input embedding, ready for a forward pass (TransformerLens' default), or on the
        CPU with ``move_to_device=False``."""
        check_bool(move_to_device, "move_to_device")
        if self.tokenizer is None:
            raise ValueError("to_tokens needs a tokenizer: HookedModel(model, tokenizer=tokenizer)")
        texts = [text] if isinstance(text, str) else text
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t for t in texts):
            raise ValueError(f"text must be a non-empty string or a list of them, got {text!r}")
        rows = [self.tokenizer(t)["input_ids"] for t in texts]
        if len({len(r) for r in rows}) != 1:
            raise ValueError(
                f"the texts tokenize to different lengths {[len(r) for r in rows]}; pad them yourself"
            )
        ids = torch.tensor(rows, dtype=torch.long)
        return ids.to(self.embed.weight.device) if move_to_device else ids

    def __call__(self, input_ids: torch.Tensor, **kwargs) -> torch.Tensor:
        """The model's logits ``(batch, seq, vocab)`` for ``input_ids`` shaped ``(seq,)`` or ``(batch, seq)``;
        ``kwargs`` go to the model's forward pass, and one it does not take raises ``TypeError`` (HF forward
        passes swallow unknown keywords silently)."""
        unknown = sorted(set(kwargs) - self._forward_keywords)
        if unknown:
            raise TypeError(
                f"unexpected keyword argument(s) {unknown}: the forward pass of {type(self.model).__name__} "
                f"takes {sorted(self._forward_keywords)}"
            )
        kwargs.setdefault("use_cache", False)
        return self.model(input_ids=self.token_ids(input_ids), **kwargs).logits

    def run_with_hooks(
        self, input_ids: torch.Tensor, fwd_hooks: Iterable[tuple] = (), **kwargs
    ) -> torch.Tensor:
        """Logits of one forward pass with ``fwd_hooks`` attached (removed afterwards)."""
        with self.hooks(fwd_hooks):
            return self(input_ids, **kwargs)

    def run_with_cache(
        self,
        input_ids: torch.Tensor,
        names: NameFilter = None,
        *,
        names_filter: NameFilter = None,
        grad: bool = False,
        fwd_hooks: Iterable[tuple] = (),
        **kwargs,
    ) -> tuple[torch.Tensor, ActivationCache]:
        """Logits and an :class:`ActivationCache` of the activations at ``names`` (default: all but
        ``hook_pattern``; ``names_filter`` is TransformerLens' name for it). Without ``grad`` the pass runs
        under ``torch.no_grad`` and stores detached tensors. Extra ``fwd_hooks`` run before the caching
        hooks of the same point."""
        if names is not None and names_filter is not None:
            raise ValueError("give names or names_filter (TransformerLens' name for it), not both")
        argument = "names" if names is not None else "names_filter"
        resolved = self.resolve(names if names is not None else names_filter, argument)
        cache = ActivationCache()

        def save(tensor, hook):
            cache[hook.name] = tensor if grad else tensor.detach()
            return tensor if grad else None  # with grad, pass the cached tensor on so that it is in the graph

        with torch.set_grad_enabled(grad):
            logits = self.run_with_hooks(input_ids, [*fwd_hooks, *((n, save) for n in resolved)], **kwargs)
        return logits, cache

    def generate(self, *args, **kwargs):
        """``model.generate`` unchanged (use inside :meth:`hooks` to generate with interventions)."""
        return self.model.generate(*args, **kwargs)

    # ------------------------------------------------------------------ weights
    def lens(self, resid: torch.Tensor) -> torch.Tensor:
        """Logit lens: the final norm and unembedding applied to any residual-stream tensor ``(..., d_model)``,
        cast to the unembedding's dtype first (a float32 steering vector or SAE row on a bfloat16 model), then
        the final logit softcap where the model's config has one (Gemma 2: ``final_logit_softcapping``), as
        the model computes its logits: the last block's ``hook_resid_post`` gives the model's logits."""
        if not isinstance(resid, torch.Tensor) or resid.shape[-1:] != (self.d_model,):
            raise ValueError(
                f"resid must be a tensor shaped (..., {self.d_model}), "
                f"got {getattr(resid, 'shape', type(resid).__name__)}"
            )
        dtype = next(self.unembed.parameters()).dtype
        logits = self.unembed(self.final_norm(resid.to(dtype)))
        # the model's own config, not its text config: Gemma 2 / 3's causal LMs softcap their logits, the
        # vision-language wrappers (Gemma3ForConditionalGeneration, LLaVA) do not, whatever their text config says
        softcap = getattr(self.model.config, "final_logit_softcapping", None)
        if softcap is not None:  # Gemma 2 / 3's causal LM head, op for op
            logits = logits / softcap
            logits = torch.tanh(logits)
            logits = logits * softcap
        return logits

    def mlp_values(self, layer: int) -> torch.Tensor:
        """The value vectors of block ``layer``'s MLP: row ``i`` is what key ``i`` writes, ``(d_mlp, d_model)``."""
        check_int(layer, "layer", minimum=0, maximum=self.n_layers - 1)
        weight = cast(
            torch.Tensor, get_module(get_module(self.blocks[layer], self.spec.mlp), self.spec.down).weight
        )
        return weight if self.spec.down_is_conv1d else weight.T

    @property
    def d_mlp(self) -> int:
        return self.mlp_values(0).shape[0]


def wrap(model) -> HookedModel:
    """``model`` itself if it is a :class:`HookedModel`, else ``HookedModel(model)``."""
    return model if isinstance(model, HookedModel) else HookedModel(model)
