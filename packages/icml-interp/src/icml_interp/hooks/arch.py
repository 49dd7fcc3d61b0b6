"""The per-architecture map: where a Hugging Face causal LM keeps its blocks, norms, heads and MLP weights.

The hooks never convert weights; they attach plain torch hooks to the modules named here. Supporting a new
architecture means adding one :class:`ArchSpec` with :func:`register_architecture` (the error raised for an
unmapped ``model.config.model_type`` says how).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import reduce

from torch import nn

from icml_interp.validation import check_choice, check_number, check_type


@dataclass(frozen=True)
class ArchSpec:
    """Dotted module paths of one architecture (relative to the model, or to one block where noted).

    ``qkv`` says how queries, keys and values are produced: ``"separate"`` (``q_proj``, ``k_proj``,
    ``v_proj`` in ``attn``), ``"gpt2"`` (one ``c_attn`` output split into q | k | v) or ``"neox"`` (one
    ``query_key_value`` output laid out per head as q | k | v). ``down_is_conv1d`` is true where the down
    projection stores its weight as ``(d_mlp, d_model)`` (GPT-2's ``Conv1D``) instead of ``nn.Linear``'s
    ``(d_model, d_mlp)``. ``parallel_attr`` names a config flag that, when true, makes attention and MLP read
    the same residual (GPT-NeoX): such blocks have no ``hook_resid_mid``. ``ln1`` and ``ln2`` (in a block)
    are the norms before attention and before the MLP (their ``hook_scale`` / ``hook_normalized``);
    ``mlp_up`` (in mlp) is a gated MLP's up projection (its output is ``mlp.hook_pre_linear``).

    Where a module's own output already holds the residual (ESM, BERT-style blocks), three optional paths say
    where the pieces are: ``attn_core`` (in attn) is the module that calls the attention function (its
    ``hook_pattern`` and other inner slots), ``attn_out`` and ``mlp_out`` (in a block) are the modules whose
    outputs are added to the stream (``hook_attn_out``, ``hook_mlp_out``). ``"."`` names the module itself
    (ESM's MLP lives in the block). ``head_module`` says that ``unembed`` is the whole output head (ESM's
    dense, GELU, norm and decoder) rather than one linear layer.

    Blocks that norm a sublayer's output before adding it (Gemma 2 / 3, OLMo 2) name that norm as ``attn_out``
    / ``mlp_out``; a block with no norm before attention or the MLP (OLMo 2) leaves ``ln1`` / ``ln2`` ``None``
    (no ``hook_scale`` / ``hook_normalized`` there). ``qk_norm`` (in attn) names the query and key norms applied
    before the rotary embeddings (Gemma 3, OLMo 2, Qwen 3): ``hook_q`` / ``hook_k`` are their outputs, the
    queries and keys that ``hook_rot_q`` / ``hook_rot_k`` rotate; ``qk_norm_layout`` is the shape of those
    outputs: ``"flat"`` ``(batch, seq, heads * d_head)`` (OLMo 2's norm of the whole projection), ``"bshd"``
    ``(batch, seq, heads, d_head)`` (Qwen 3's per-head norm) or ``"bhsd"`` ``(batch, heads, seq, d_head)``
    (Gemma 3's per-head norm).
    ``norm_weight_offset`` is added to every norm's weight where the norm multiplies by ``offset + weight``
    (Gemma's RMSNorm: ``1 + weight``); ``hook_scale`` needs it to rebuild a norm's output from a written scale.
    """

    layers: str
    embed: str
    final_norm: str
    unembed: str
    attn: str  # in a block
    mlp: str  # in a block
    o_proj: str  # in attn: its input is hook_z
    qkv: str  # "separate" | "gpt2" | "neox"
    qkv_modules: tuple[str, ...]  # in attn
    mlp_in: str  # in mlp: its output is hook_pre (the gate pre-activation for gated MLPs)
    down: str  # in mlp: its input is hook_post (the MLP keys), its weight holds the value vectors
    down_is_conv1d: bool = False
    pos_embed: str | None = None
    parallel_attr: str | None = None
    ln1: str | None = None  # in a block
    ln2: str | None = None  # in a block
    mlp_up: str | None = None  # in mlp, gated MLPs only
    attn_core: str | None = None  # in attn: the module calling the attention function (default: attn)
    attn_out: str | None = None  # in a block: the module whose output is added to the stream (default: attn)
    mlp_out: str | None = None  # in a block: likewise for the MLP (default: mlp)
    head_module: bool = False  # unembed is the whole output head (default: the output embeddings)
    qk_norm: tuple[str, str] | None = (
        None  # in attn: query and key norms before rotary (their outputs: hook_q/k)
    )
    qk_norm_layout: str = "flat"  # the qk_norm outputs: "flat" | "bshd" | "bhsd"
    norm_weight_offset: float = 0.0  # the norms scale by offset + weight (Gemma: 1.0)

    def __post_init__(self):
        for name in ("layers", "embed", "final_norm", "unembed", "attn", "mlp", "o_proj", "mlp_in", "down"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise TypeError(f"{name} must be a non-empty dotted module path (a string), got {value!r}")
        for name in (
            "pos_embed",
            "parallel_attr",
            "ln1",
            "ln2",
            "mlp_up",
            "attn_core",
            "attn_out",
            "mlp_out",
        ):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise TypeError(f"{name} must be None or a non-empty string, got {value!r}")
        check_choice(self.qkv, "qkv", ("separate", "gpt2", "neox"))
        n_modules = 3 if self.qkv == "separate" else 1
        if not (
            isinstance(self.qkv_modules, tuple)
            and len(self.qkv_modules) == n_modules
            and all(isinstance(m, str) and m.strip() for m in self.qkv_modules)
        ):
            raise TypeError(
                f"qkv_modules must be a tuple of {n_modules} module path(s) for qkv={self.qkv!r}, "
                f"got {self.qkv_modules!r}"
            )
        for name in ("down_is_conv1d", "head_module"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if self.qk_norm is not None and not (
            isinstance(self.qk_norm, tuple)
            and len(self.qk_norm) == 2
            and all(isinstance(m, str) and m.strip() for m in self.qk_norm)
        ):
            raise TypeError(
                f"qk_norm must be None or a tuple of 2 module paths (query norm, key norm), got {self.qk_norm!r}"
            )
        check_choice(self.qk_norm_layout, "qk_norm_layout", ("flat", "bshd", "bhsd"))
        check_number(self.norm_weight_offset, "norm_weight_offset")


_LLAMA = ArchSpec(
    layers="model.layers",
    embed="model.embed_tokens",
    final_norm="model.norm",
    unembed="lm_head",
    attn="self_attn",
    mlp="mlp",
    o_proj="o_proj",
    qkv="separate",
    qkv_modules=("q_proj", "k_proj", "v_proj"),
    mlp_in="gate_proj",
    down="down_proj",
    ln1="input_layernorm",
    ln2="post_attention_layernorm",
    mlp_up="up_proj",
)


_GEMMA2 = replace(
    _LLAMA,
    ln2="pre_feedforward_layernorm",
    attn_out="post_attention_layernorm",
    mlp_out="post_feedforward_layernorm",
    norm_weight_offset=1.0,
)


def _language_model(spec: ArchSpec, prefix: str) -> ArchSpec:
    """``spec`` (a causal LM's map) for a model whose language model, the causal LM's base model, sits at
    ``prefix`` (a vision-language wrapper): the paths into the base model (``model.layers``,
    ``transformer.wte``, ...) move under ``prefix``; the head and the per-block paths stay."""

    def moved(path: str) -> str:
        return f"{prefix}.{path.partition('.')[2]}"

    return replace(
        spec,
        layers=moved(spec.layers),
        embed=moved(spec.embed),
        final_norm=moved(spec.final_norm),
        pos_embed=None if spec.pos_embed is None else moved(spec.pos_embed),
    )


ARCHITECTURES: dict[str, ArchSpec] = {
    "llama": _LLAMA,  # also SmolLM2
    "mistral": _LLAMA,
    "qwen2": _LLAMA,
    # Qwen 3: Llama's layout plus a norm of each head's queries and keys, on (batch, seq, heads, d_head), before
    # the rotary embeddings (hook_q / hook_k are their outputs, as for Gemma 3 and OLMo 2)
    "qwen3": replace(_LLAMA, qk_norm=("q_norm", "k_norm"), qk_norm_layout="bshd"),
    # Gemma: Llama's layout; its RMSNorm scales by 1 + weight, and its embedding module multiplies by
    # sqrt(d_model) (hook_embed is the scaled embedding, = blocks.0.hook_resid_pre)
    "gemma": replace(_LLAMA, norm_weight_offset=1.0),
    # Gemma 2 and Gemma 3 (text, Gemma3ForCausalLM): norms around both sublayers; the output norms' results are
    # what is added to the stream (hook_attn_out, hook_mlp_out). Gemma 3 norms each head's queries and keys
    "gemma2": _GEMMA2,
    "gemma3_text": replace(_GEMMA2, qk_norm=("q_norm", "k_norm"), qk_norm_layout="bhsd"),
    # OLMo 2: no norm before attention or the MLP, norms of their outputs; query and key norms over the whole
    # projections (before the split into heads)
    "olmo2": replace(
        _LLAMA,
        ln1=None,
        ln2=None,
        attn_out="post_attention_layernorm",
        mlp_out="post_feedforward_layernorm",
        qk_norm=("q_norm", "k_norm"),
    ),
    "gpt2": ArchSpec(
        layers="transformer.h",
        embed="transformer.wte",
        final_norm="transformer.ln_f",
        unembed="lm_head",
        attn="attn",
        mlp="mlp",
        o_proj="c_proj",
        qkv="gpt2",
        qkv_modules=("c_attn",),
        mlp_in="c_fc",
        down="c_proj",
        down_is_conv1d=True,
        pos_embed="transformer.wpe",
        ln1="ln_1",
        ln2="ln_2",
    ),
    "gpt_neox": ArchSpec(
        layers="gpt_neox.layers",
        embed="gpt_neox.embed_in",
        final_norm="gpt_neox.final_layer_norm",
        unembed="lm_head",
        attn="attention",
        mlp="mlp",
        o_proj="dense",
        qkv="neox",
        qkv_modules=("query_key_value",),
        mlp_in="dense_h_to_4h",
        down="dense_4h_to_h",
        parallel_attr="use_parallel_residual",
        ln1="input_layernorm",
        ln2="post_attention_layernorm",
    ),
    # ESM-2 (masked protein LMs, EsmForMaskedLM): pre-norm blocks whose attention and MLP outputs add the
    # residual inside their own modules; bidirectional attention, rotary (query scaled before rotation)
    "esm": ArchSpec(
        layers="esm.encoder.layer",
        embed="esm.embeddings.word_embeddings",
        final_norm="esm.encoder.emb_layer_norm_after",
        unembed="lm_head",
        attn="attention",
        mlp=".",
        o_proj="output.dense",
        qkv="separate",
        qkv_modules=("self.query", "self.key", "self.value"),
        mlp_in="intermediate.dense",
        down="output.dense",
        ln1="attention.LayerNorm",
        ln2="LayerNorm",
        attn_core="self",
        attn_out="attention.output.dense",
        mlp_out="output.dense",
        head_module=True,
    ),
    # vision-language models: the hooks are on the language model (image tokens are positions of its
    # sequence); LLaVA (this entry: a Llama-family language model; spec_for maps another family's language
    # model, text_config.model_type, with that family's own spec), Qwen2-VL / Qwen2.5-VL, and Gemma 3
    # (Gemma3ForConditionalGeneration, what AutoModelForCausalLM loads for Gemma 3 4B and larger)
    "llava": _language_model(_LLAMA, "model.language_model"),
    "qwen2_vl": _language_model(_LLAMA, "model.language_model"),
    "qwen2_5_vl": _language_model(_LLAMA, "model.language_model"),
}
ARCHITECTURES["gemma3"] = _language_model(ARCHITECTURES["gemma3_text"], "model.language_model")

# wrappers whose language model may be of any family (text_config.model_type), with the prefix of that language
# model and the built-in entry used for a family with no hook map (and for Llama's); an entry registered over
# the built-in one is used as it is
_ANY_LANGUAGE_MODEL: dict[str, tuple[str, ArchSpec]] = {
    "llava": ("model.language_model", ARCHITECTURES["llava"]),
}


def register_architecture(model_type: str, spec: ArchSpec) -> None:
    """Map ``model.config.model_type`` to the module paths of its architecture (see :class:`ArchSpec`)."""
    if not isinstance(model_type, str) or not model_type:
        raise TypeError(f"model_type must be a non-empty string, got {model_type!r}")
    check_type(spec, "spec", ArchSpec, "an ArchSpec")
    ARCHITECTURES[model_type] = spec


def get_module(root: nn.Module, path: str) -> nn.Module:
    """``root.a.b.0.c`` for the dotted ``path`` ``"a.b.0.c"`` (``"."``: ``root`` itself)."""
    if path == ".":
        return root
    try:
        return reduce(getattr, path.split("."), root)
    except AttributeError:
        raise AttributeError(f"{type(root).__name__} has no submodule {path!r}") from None


def spec_for(model: nn.Module) -> ArchSpec:
    """The :class:`ArchSpec` of a Hugging Face causal LM, by ``model.config.model_type``; for LLaVA (``"llava"``)
    the spec of its language model's family (``model.config.text_config.model_type``: Gemma, Gemma 2, ...)
    under ``model.language_model``, or the ``"llava"`` entry (Llama's layout) for a family with no hook map."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if not isinstance(model_type, str):
        raise TypeError(
            f"model must be a Hugging Face causal LM with a config.model_type, got {type(model).__name__}"
        )
    if model_type not in ARCHITECTURES:
        raise ValueError(
            f"architecture {model_type!r} has no hook map (known: {sorted(ARCHITECTURES)}). Add one with "
            "icml_interp.hooks.register_architecture("
            f"{model_type!r}, ArchSpec(layers='model.layers', "
            "embed='model.embed_tokens', final_norm='model.norm', unembed='lm_head', attn='self_attn', mlp='mlp', "
            "o_proj='o_proj', qkv='separate', qkv_modules=('q_proj', 'k_proj', 'v_proj'), mlp_in='gate_proj', "
            "down='down_proj')), with the module paths of your model (print(model) shows them)."
        )
    spec = ARCHITECTURES[model_type]
    if model_type in _ANY_LANGUAGE_MODEL:
        prefix, builtin = _ANY_LANGUAGE_MODEL[model_type]
        text_type = getattr(getattr(model.config, "text_config", None), "model_type", None)
        if spec is builtin and text_type in ARCHITECTURES and text_type not in _ANY_LANGUAGE_MODEL:
            # LLaVA with a Gemma (or any mapped family's) language model: that family's norms, sublayer
            # output norms and query / key norms, not Llama's
            return _language_model(ARCHITECTURES[text_type], prefix)
    return spec
