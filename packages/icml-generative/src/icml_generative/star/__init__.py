"""STAR: structured topology-aware regularization of audio VAE latents (STAR-VAE), and flow matching on
them (STAR-Gen).

- :class:`STARLoss`, :func:`beta_schedule`, :func:`matched_uniform_beta`: the per-channel KL weights
  ``β_c = β_min + (β_max − β_min) · ((c − 1)/(C − 1))^γ`` as a drop-in loss for any VAE with channelled
  latents (diffusers' ``AutoencoderOobleck`` and ``AutoencoderKL`` included).
- Diagnostics: :func:`per_channel_kl`, :func:`channel_correlation`, :func:`latent_correlation`,
  :func:`channel_ordering`, :func:`truncate_channels`, :func:`truncation_curve`.
- :class:`STARVAE`: a 1-D CNN audio VAE with bidirectional Mamba blocks (:class:`BiMamba`, pure torch,
  chunked :func:`selective_scan` with a sequential reference).
- Audio losses and metrics: :func:`stft_distance`, :func:`si_sdr`, :func:`spectral_features`.
- STAR-Gen: :class:`LatentFlowTransformer`, :func:`flow_matching_loss`, :func:`sample_flow`,
  :func:`logit_normal_times`.

Paper: STAR-VAE / STAR-Gen, ICML 2026 (project page STAR-VAE.github.io). The loss is the page's formula;
the architecture sizes, the Mamba layout and the velocity field's size are ours (docs/star.md).
"""

from icml_generative.star.audio import si_sdr, spectral_features, stft_distance
from icml_generative.star.flow import (
    LatentFlowTransformer,
    flow_matching_loss,
    logit_normal_times,
    sample_flow,
)
from icml_generative.star.loss import (
    STARLoss,
    beta_schedule,
    channel_correlation,
    channel_ordering,
    latent_correlation,
    matched_uniform_beta,
    per_channel_kl,
    posterior_moments,
    truncate_channels,
    truncation_curve,
)
from icml_generative.star.mamba import BiMamba, Mamba, selective_scan, selective_scan_reference
from icml_generative.star.vae import STARVAE, STARVAEDecoderOutput, STARVAEEncoderOutput, STARVAEOutput

__all__ = [
    "STARVAE",
    "BiMamba",
    "LatentFlowTransformer",
    "Mamba",
    "STARLoss",
    "STARVAEDecoderOutput",
    "STARVAEEncoderOutput",
    "STARVAEOutput",
    "beta_schedule",
    "channel_correlation",
    "channel_ordering",
    "flow_matching_loss",
    "latent_correlation",
    "logit_normal_times",
    "matched_uniform_beta",
    "per_channel_kl",
    "posterior_moments",
    "sample_flow",
    "selective_scan",
    "selective_scan_reference",
    "si_sdr",
    "spectral_features",
    "stft_distance",
    "truncate_channels",
    "truncation_curve",
]
