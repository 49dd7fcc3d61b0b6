"""DualGraph (issue 52): the synthetic research world, the reproduction and the benchmark."""
