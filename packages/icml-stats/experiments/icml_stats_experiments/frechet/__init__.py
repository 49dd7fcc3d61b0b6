"""DeSI (deep single-index Fréchet regression): simulations with known truth, the reproduction, the
fit-time benchmark and the larger sweep script."""
