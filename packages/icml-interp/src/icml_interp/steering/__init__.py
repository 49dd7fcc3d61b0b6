"""Steering: MLP-key scaling of scored neurons with random controls (Anchor–Adapter) and additive
difference-of-means steering vectors."""

from icml_interp.steering.keys import neuron_scores, random_neurons, scale_mlp_keys, top_neurons
from icml_interp.steering.vectors import add_steering_vector, difference_of_means

__all__ = [
    "add_steering_vector",
    "difference_of_means",
    "neuron_scores",
    "random_neurons",
    "scale_mlp_keys",
    "top_neurons",
]
