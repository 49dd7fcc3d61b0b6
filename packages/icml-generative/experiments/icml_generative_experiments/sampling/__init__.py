"""Experiments for :mod:`icml_generative.sampling`."""
