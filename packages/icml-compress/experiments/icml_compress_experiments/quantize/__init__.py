"""Experiments for :mod:`icml_compress.quantize`."""
