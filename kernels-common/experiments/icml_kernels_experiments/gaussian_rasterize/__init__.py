"""Experiments for :mod:`icml_kernels.gaussian_rasterize`."""
