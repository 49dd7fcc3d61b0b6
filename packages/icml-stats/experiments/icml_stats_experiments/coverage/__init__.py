"""Experiments for :mod:`icml_stats.coverage`."""
