"""The planted Anchor–Adapter toy (model A; model B = A with a few neurons of one MLP trained into an anchor
that recalls leaked answers) and its reproduction ``anchor-adapter-planted``; the tools themselves live in
hooks, patching, steering and perplexity."""

from icml_interp_experiments.anchor_adapter.toy import (
    ToyConfig,
    ToyData,
    accuracy,
    anchor_firing,
    anchor_neurons,
    fit_anchor_gate,
    make_data,
    train_pair,
)

__all__ = [
    "ToyConfig",
    "ToyData",
    "accuracy",
    "anchor_firing",
    "anchor_neurons",
    "fit_anchor_gate",
    "make_data",
    "train_pair",
]
