"""AMNet: low-light video enhancement with any subset of auxiliary modalities (events, infrared).

- Simulators of the synthetic modalities AMNet pretrains on: :func:`low_light` (shot + read noise, gamma,
  quantization), :func:`simulate_events` (a v2e-style DVS model with refractory period) and
  :func:`event_voxels` (voxel grids), :func:`infrared_proxy` (a thermal look), :func:`luminance`.
- The network: :class:`AMNet` (a diffusers ``ModelMixin``) with its :class:`S2DGTranslator`
  (:class:`SpatialGate`, :class:`SpectralGate`) producing implicit auxiliary features from RGB when a
  modality is missing.
- Training and inference: :func:`amnet_loss` (L1 + SSIM + :func:`alignment_loss`, modality dropout),
  :func:`frame_windows`, :func:`enhance` (any combination of inputs, batched, progress bar).

Paper: AMNet / AnyMod-LLVE, ICML 2026. The paper's text was not available: the architecture is our
reconstruction from its abstract, labelled so (docs/amnet.md).
"""

from icml_generative.amnet.model import (
    MODALITIES,
    AMNet,
    AMNetOutput,
    S2DGTranslator,
    SpatialGate,
    SpectralGate,
)
from icml_generative.amnet.simulate import (
    Events,
    event_voxels,
    infrared_proxy,
    low_light,
    luminance,
    simulate_events,
)
from icml_generative.amnet.train import AMNetLoss, alignment_loss, amnet_loss, enhance, frame_windows

__all__ = [
    "MODALITIES",
    "AMNet",
    "AMNetLoss",
    "AMNetOutput",
    "Events",
    "S2DGTranslator",
    "SpatialGate",
    "SpectralGate",
    "alignment_loss",
    "amnet_loss",
    "enhance",
    "event_voxels",
    "frame_windows",
    "infrared_proxy",
    "low_light",
    "luminance",
    "simulate_events",
]
