"""Experiments for :mod:`icml_compress.cgc`: the ``cgc-smollm2`` reproduction and the latency benchmark."""
