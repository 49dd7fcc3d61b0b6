"""Experiments for :mod:`icml_interp.similarity`."""
