"""EchoAttention as a diffusers attention processor for Wan video transformers.

:func:`apply_echo_attention` puts an :class:`EchoWanAttnProcessor` on the self-attention (``attn1``) of
every block of a ``WanTransformer3DModel`` (Wan 2.1 / 2.2, text-to-video and image-to-video) through
diffusers' own ``set_processor``; cross-attention (``attn2``) keeps diffusers' dense processor. A forward
pre-hook on the transformer reads the latent grid of each call (``hidden_states`` ``(B, C, F, H, W)`` and
the patch size) and checks it against the policy's :class:`~icml_generative.echo_attention.VideoLayout`,
so a video of another size raises instead of being cut into wrong frames. :func:`remove_echo_attention`
restores the processors the blocks had.
"""

from __future__ import annotations

from typing import Any

import torch

from icml_generative.echo_attention.ops import MAX_TOKENS, VideoLayout
from icml_generative.echo_attention.policy import EchoPolicy
from icml_generative.validation import check_instance, check_int, check_ints, check_module, check_tensor

_HANDLE = "_icml_echo_attention"


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Wan's rotary embedding on ``(B, N, H, D)``: interleaved pairs ``(x1, x2)`` rotated by ``(cos, sin)``."""
    x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1)
    c, s = cos[..., 0::2], sin[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * c - x2 * s
    out[..., 1::2] = x1 * s + x2 * c
    return out.type_as(x)


def _compute_dtype(layer: torch.nn.Module) -> torch.dtype:
    """The dtype ``layer`` computes in: its weight's, or the compute dtype of diffusers' layerwise casting
    (``enable_layerwise_casting``: the weight is stored in, e.g., float8 and cast by a ``LayerwiseCastingHook``,
    an object with ``compute_dtype``, registered on the layer's ``_diffusers_hook`` registry before each
    forward)."""
    registry = getattr(layer, "_diffusers_hook", None)
    for hook in getattr(registry, "hooks", {}).values():
        dtype = getattr(hook, "compute_dtype", None)
        if isinstance(dtype, torch.dtype):
            return dtype
    weight = layer.weight
    assert isinstance(weight, torch.Tensor)
    return weight.dtype


def _check_hidden_states(attn: Any, hidden_states: object, num_tokens: int) -> None:
    """Self-attention input ``(B, num_tokens, dim)``: non-empty, finite, in the dtype the attention's
    projections compute in (their weights', or the compute dtype of diffusers' layerwise casting) unless
    autocast is on (torch would fail deep inside the projection)."""
    layer = attn.to_out[0]
    weight = layer.weight  # (dim, inner_dim)
    check_tensor(
        hidden_states, "hidden_states", ("B", num_tokens, weight.shape[0]), floating=True, finite=True
    )
    assert isinstance(hidden_states, torch.Tensor)
    if hidden_states.numel() == 0:
        raise ValueError(f"hidden_states must not be empty, got shape {tuple(hidden_states.shape)}")
    dtype = _compute_dtype(layer)
    if hidden_states.dtype != dtype and not torch.is_autocast_enabled(hidden_states.device.type):
        raise TypeError(f"hidden_states must have the model's dtype {dtype}, got {hidden_states.dtype}")


class EchoWanAttnProcessor:
    """The self-attention processor of one Wan block under an :class:`EchoPolicy` (layer ``layer``).

    Projections, RMS norms and rotary embeddings are Wan's; the attention of ``(B, H, N, D)`` queries, keys
    and values is :meth:`EchoPolicy.attention`. Cross-attention calls are handed to diffusers' dense
    ``WanAttnProcessor``.
    """

    def __init__(self, policy: EchoPolicy, layer: int):
        from diffusers.models.transformers.transformer_wan import WanAttnProcessor

        self.policy = check_instance(policy, "policy", EchoPolicy)
        self.layer = check_int(layer, "layer", 0, policy.num_layers - 1)
        self.dense = WanAttnProcessor()

    def __call__(
        self,
        attn: Any,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        rotary_emb: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        if encoder_hidden_states is not None or attention_mask is not None:
            return self.dense(attn, hidden_states, encoder_hidden_states, attention_mask, rotary_emb)
        from diffusers.models.transformers.transformer_wan import _get_qkv_projections

        _check_hidden_states(attn, hidden_states, self.policy.layout.num_tokens)
        query, key, value = _get_qkv_projections(attn, hidden_states, None)
        query = attn.norm_q(query).unflatten(2, (attn.heads, -1))
        key = attn.norm_k(key).unflatten(2, (attn.heads, -1))
        value = value.unflatten(2, (attn.heads, -1))
        if rotary_emb is not None:
            query = _rotate(query, *rotary_emb)
            key = _rotate(key, *rotary_emb)
        q, k, v = (t.transpose(1, 2) for t in (query, key, value))  # (B, H, N, D)
        out = self.policy.attention(self.layer, q, k, v).transpose(1, 2)
        out = out.flatten(2, 3).type_as(query)
        return attn.to_out[1](attn.to_out[0](out))


def _wan_blocks(transformer: torch.nn.Module) -> list:
    blocks = getattr(transformer, "blocks", None)
    if (
        not isinstance(blocks, torch.nn.ModuleList)
        or not blocks
        or not all(hasattr(b, "attn1") for b in blocks)
    ):
        raise TypeError(
            "transformer must be a diffusers WanTransformer3DModel (blocks with a self-attention attn1), got "
            f"{type(transformer).__name__}"
        )
    return list(blocks)


def video_layout_of(transformer: torch.nn.Module, hidden_states_shape: tuple[int, ...]) -> VideoLayout:
    """The token layout a Wan transformer makes of latents shaped ``(B, C, F, H, W)``."""
    check_module(transformer, "video_layout_of", "transformer")
    patch = getattr(getattr(transformer, "config", None), "patch_size", None)
    if not (
        isinstance(patch, list | tuple)
        and len(patch) == 3
        and all(isinstance(p, int) and p > 0 for p in patch)
    ):
        raise TypeError(
            "transformer must be a diffusers WanTransformer3DModel (a config.patch_size (t, h, w)), got "
            f"{type(transformer).__name__}"
        )
    shape = check_ints(hidden_states_shape, "hidden_states_shape", 1)
    if len(shape) != 5:
        raise ValueError(f"hidden_states_shape must be the shape of latents (B, C, F, H, W), got {shape}")
    p_t, p_h, p_w = patch
    _, _, f, h, w = shape
    frames, tokens = f // p_t, (h // p_h) * (w // p_w)
    if not (1 <= frames <= MAX_TOKENS and 1 <= tokens <= MAX_TOKENS):
        raise ValueError(
            f"hidden_states_shape {shape} makes {frames} frames of {tokens} tokens with patch_size {tuple(patch)}"
        )
    return VideoLayout(frames, tokens)


def apply_echo_attention(transformer: torch.nn.Module, policy: EchoPolicy) -> torch.nn.Module:
    """Route every block's self-attention of a Wan transformer through ``policy``; returns the transformer.

    Raises TypeError for another model, ValueError when the policy's layer count, head count or head width
    differ from the transformer's, and (at call time) when a call's latent grid differs from the policy's
    layout. Applying twice replaces the earlier policy.
    """
    check_module(transformer, "apply_echo_attention", "transformer")
    check_instance(policy, "policy", EchoPolicy)
    blocks = _wan_blocks(transformer)
    heads = blocks[0].attn1.heads
    head_dim = blocks[0].attn1.inner_dim // heads
    if (len(blocks), heads, head_dim) != (policy.num_layers, policy.num_heads, policy.head_dim):
        raise ValueError(
            f"policy is for {policy.num_layers} layers x {policy.num_heads} heads of {policy.head_dim}, the "
            f"transformer has {len(blocks)} x {heads} of {head_dim}"
        )
    remove_echo_attention(transformer)

    def check_layout(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        hidden = kwargs.get("hidden_states", args[0] if args else None)
        if isinstance(hidden, torch.Tensor):
            layout = video_layout_of(module, tuple(hidden.shape))
            if layout != policy.layout:
                raise ValueError(
                    f"hidden_states of shape {tuple(hidden.shape)} make {layout.frames} frames of "
                    f"{layout.tokens_per_frame} tokens; the EchoPolicy was built for {policy.layout.frames} "
                    f"frames of {policy.layout.tokens_per_frame}"
                )

    originals = [b.attn1.processor for b in blocks]
    for i, block in enumerate(blocks):
        block.attn1.set_processor(EchoWanAttnProcessor(policy, i))
    hook = transformer.register_forward_pre_hook(check_layout, with_kwargs=True)
    setattr(transformer, _HANDLE, (originals, hook))
    return transformer


def remove_echo_attention(transformer: torch.nn.Module) -> torch.nn.Module:
    """Undo :func:`apply_echo_attention` (a no-op on a transformer without it)."""
    check_module(transformer, "remove_echo_attention", "transformer")
    state = getattr(transformer, _HANDLE, None)
    if state is None:
        return transformer
    originals, hook = state
    for block, processor in zip(_wan_blocks(transformer), originals, strict=True):
        block.attn1.set_processor(processor)
    hook.remove()
    delattr(transformer, _HANDLE)
    return transformer
