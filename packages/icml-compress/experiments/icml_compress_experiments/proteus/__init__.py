"""Experiments for :mod:`icml_compress.proteus`."""
