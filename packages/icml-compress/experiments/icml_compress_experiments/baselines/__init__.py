"""Experiments for :mod:`icml_compress.baselines`."""
