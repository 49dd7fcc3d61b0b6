"""Experiments for :mod:`icml_interp.sae`."""
