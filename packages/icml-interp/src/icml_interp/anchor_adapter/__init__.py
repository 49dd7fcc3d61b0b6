"""The planted Anchor–Adapter toy (model A, model B = A with one MLP fine-tuned to recall leaked answers) and
its reproduction ``anchor-adapter-planted``; the tools themselves live in hooks, patching, steering and
perplexity."""

from icml_interp.anchor_adapter.toy import ToyConfig, ToyData, accuracy, make_data, train_pair

__all__ = ["ToyConfig", "ToyData", "accuracy", "make_data", "train_pair"]
