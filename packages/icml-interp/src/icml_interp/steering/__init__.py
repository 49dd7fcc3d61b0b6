"""Steering: MLP-key scaling of scored neurons with random controls (Anchor–Adapter) and additive
steering vectors from contrastive pairs (difference of means, PCA, probe) with steered generation and scale
sweeps."""

from icml_interp.steering.contrastive import (
    METHODS,
    default_layers,
    difference_vectors,
    direction_from_activations,
    generate_steered,
    last_token_activations,
    scale_sweep,
    steering_vector,
)
from icml_interp.steering.keys import (
    KeyScalingTest,
    key_scaling_test,
    neuron_scores,
    random_neurons,
    scale_mlp_keys,
    top_neurons,
)
from icml_interp.steering.vectors import add_steering_vector, difference_of_means

__all__ = [
    "METHODS",
    "KeyScalingTest",
    "add_steering_vector",
    "default_layers",
    "difference_of_means",
    "difference_vectors",
    "direction_from_activations",
    "generate_steered",
    "key_scaling_test",
    "last_token_activations",
    "neuron_scores",
    "random_neurons",
    "scale_mlp_keys",
    "scale_sweep",
    "steering_vector",
    "top_neurons",
]
