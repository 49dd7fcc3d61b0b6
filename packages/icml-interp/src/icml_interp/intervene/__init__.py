"""Latent interventions through a sparse autoencoder that keep the SAE's error term.

``h' = h + decode(f') − decode(f)`` with ``f = sae.encode(h)``, which for a linear decoder is exactly
``h + (f' − f) · W_dec``: whatever the SAE fails to reconstruct passes through untouched. Edits are additive,
multiplicative or a clamp to reference values (e.g. a reference cohort's mean), optionally restricted to a
spatial mask, applied by a forward hook that replaces a module's output, as a context manager.
"""

from icml_interp.intervene.edits import (
    Add,
    Clamp,
    LatentEdit,
    Scale,
    apply_edit,
    intervene,
    reference_mean,
)

__all__ = ["Add", "Clamp", "LatentEdit", "Scale", "apply_edit", "intervene", "reference_mean"]
