"""Experiments for :mod:`icml_theory.boolean`."""
