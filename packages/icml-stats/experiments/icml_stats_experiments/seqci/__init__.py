"""Experiments for :mod:`icml_stats.seqci`."""
