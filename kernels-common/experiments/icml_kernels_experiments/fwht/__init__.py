"""Experiments for :mod:`icml_kernels.fwht`."""
