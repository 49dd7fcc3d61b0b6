"""ViewMask-1-to-3: multi-view generation as masked discrete diffusion over lookup-free-quantized visual tokens.

- Tokenizer (:mod:`icml_generative.viewmask.lfq`): :class:`LFQ` (sign quantization, MSB-first indices,
  entropy and commitment losses) and :class:`LFQTokenizer` (a small conv encoder/decoder around it, save /
  load), trained by :func:`train_tokenizer`.
- Model (:mod:`icml_generative.viewmask.model`): :class:`MultiViewTransformer` over ``[text?][condition
  view][target views]`` with view-index and 2-D position embeddings (camera embedding optional), full
  attention across views or the ``"independent"`` ablation (block-diagonal between target views), on the
  shared :class:`ViewBackbone`; objectives MaskGIT (cosine schedule) and the masked-diffusion ELBO
  (:func:`masked_token_loss`, :func:`train_viewmask`); optional text tokens with classifier-free guidance.
- Sampler (:mod:`icml_generative.viewmask.sampler`): :func:`sample_views`, iterative unmasking by
  confidence with annealed Gumbel noise in a fixed number of steps, committed tokens never remasked;
  :func:`generate_views` tokenizes a condition image, samples and decodes.

The paper's text was not available: the tokenizer, the sequence layout and the training and sampling
details are our design on MAGVIT-v2's LFQ, MaskGIT and masked diffusion, as the abstract describes them
(docs page ``viewmask.md``).
"""

from icml_generative.viewmask.lfq import LFQ, LFQOutput, LFQTokenizer, TokenizerOutput, train_tokenizer
from icml_generative.viewmask.model import (
    ATTENTION,
    OBJECTIVES,
    MultiViewTransformer,
    ViewBackbone,
    cosine_schedule,
    mask_targets,
    masked_token_loss,
    train_viewmask,
    view_attention_mask,
)
from icml_generative.viewmask.sampler import Sample, generate_views, sample_views, unmasking_counts

__all__ = [
    "ATTENTION",
    "LFQ",
    "OBJECTIVES",
    "LFQOutput",
    "LFQTokenizer",
    "MultiViewTransformer",
    "Sample",
    "TokenizerOutput",
    "ViewBackbone",
    "cosine_schedule",
    "generate_views",
    "mask_targets",
    "masked_token_loss",
    "sample_views",
    "train_tokenizer",
    "train_viewmask",
    "unmasking_counts",
    "view_attention_mask",
]
