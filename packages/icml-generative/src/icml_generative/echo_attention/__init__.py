"""EchoAttention: sparse and "Echo" attention with a learned per-(layer, head) routing for video diffusion
transformers.

- Operators on ``(B, H, N, D)`` (:mod:`icml_generative.echo_attention.ops`): :func:`dense_attention`,
  :func:`sparse_attention` (top-k / top-p key blocks from pooled scores, own and neighbouring frames and text
  always kept; :func:`icml_kernels.block_sparse_attention`), :func:`echo_attention` (anchor frames exact,
  the other frames from calibrated anchor partial outputs, "same key frame" and "same temporal offset"
  variants; :func:`icml_kernels.echo_combine`).
- :class:`EchoCalibrator`: the closed-form Echo calibration; :class:`EchoPolicy`: routes, coefficients,
  router logits, FLOP accounting and budget fitting, save / load.
- Training in three stages: :func:`fit_echo_calibration`, :func:`train_router` + :func:`finalize_routes`,
  :func:`finetune_echo`, on inputs captured by :func:`capture_attention_inputs`.
- diffusers: :func:`apply_echo_attention` / :func:`remove_echo_attention` put an
  :class:`EchoWanAttnProcessor` on the self-attention of a ``WanTransformer3DModel``; cross-attention stays
  dense.
- Measurement: :func:`frame_block_similarity` per head, :func:`attention_flops` per route.

The paper's text was not available: the Echo operator, its calibration and the routing stages are our
reconstruction from the abstract (docs page ``echo-attention.md``).
"""

from icml_generative.echo_attention.ops import (
    VARIANTS,
    VideoLayout,
    anchor_frames,
    anchor_partials,
    attention_flops,
    dense_attention,
    echo_attention,
    frame_block_similarity,
    group_means,
    pooled_block_scores,
    select_key_blocks,
    sparse_attention,
)
from icml_generative.echo_attention.policy import ROUTES, EchoCalibrator, EchoPolicy
from icml_generative.echo_attention.processor import (
    EchoWanAttnProcessor,
    apply_echo_attention,
    remove_echo_attention,
    video_layout_of,
)
from icml_generative.echo_attention.train import (
    capture_attention_inputs,
    finalize_routes,
    finetune_echo,
    fit_echo_calibration,
    train_router,
)

__all__ = [
    "ROUTES",
    "VARIANTS",
    "EchoCalibrator",
    "EchoPolicy",
    "EchoWanAttnProcessor",
    "VideoLayout",
    "anchor_frames",
    "anchor_partials",
    "apply_echo_attention",
    "attention_flops",
    "capture_attention_inputs",
    "dense_attention",
    "echo_attention",
    "finalize_routes",
    "finetune_echo",
    "fit_echo_calibration",
    "frame_block_similarity",
    "group_means",
    "pooled_block_scores",
    "remove_echo_attention",
    "select_key_blocks",
    "sparse_attention",
    "train_router",
    "video_layout_of",
]
