"""Cond-DP (conditioned DP-SGD for label-private regression): the spectral-decay testbed and two bundled
real datasets, the reproduction ``cond-dp-spectra`` and the step-time benchmark."""
