"""Experiments for :mod:`icml_kernels.trellis`."""
