"""Model diffing with sparse autoencoders (Med-SegLens, ICML 2026): latent alignment within and across
activation spaces, shared versus cohort-specific latents, attribution of latents to a metric, a diff report."""

from icml_interp.diffing.align import (
    Alignment,
    BestPartners,
    activation_alignment,
    best_partner,
    correlation_matrix,
    decoder_alignment,
    exclusive_latents,
)
from icml_interp.diffing.attribution import latent_attribution
from icml_interp.diffing.cohorts import cohort_latent_table, firing_frequency, specific_latents
from icml_interp.diffing.maps import latent_maps, layer_activations
from icml_interp.diffing.report import diff_report, plot_diff_report

__all__ = [
    "Alignment",
    "BestPartners",
    "activation_alignment",
    "best_partner",
    "cohort_latent_table",
    "correlation_matrix",
    "decoder_alignment",
    "diff_report",
    "exclusive_latents",
    "firing_frequency",
    "latent_attribution",
    "latent_maps",
    "layer_activations",
    "plot_diff_report",
    "specific_latents",
]
