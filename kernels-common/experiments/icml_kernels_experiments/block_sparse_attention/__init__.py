"""Experiments for :mod:`icml_kernels.block_sparse_attention`."""
