"""Experiments for :mod:`icml_interp.patching`."""
