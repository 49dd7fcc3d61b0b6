"""Experiments for :mod:`icml_theory.privacy`."""
