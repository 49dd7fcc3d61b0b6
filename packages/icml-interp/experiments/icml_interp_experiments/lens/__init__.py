"""Experiments for :mod:`icml_interp.lens`."""
