"""Experiments for :mod:`icml_kernels.echo_combine`."""
