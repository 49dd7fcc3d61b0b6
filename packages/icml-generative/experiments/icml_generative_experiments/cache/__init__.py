"""Experiments for :mod:`icml_generative.cache`."""
