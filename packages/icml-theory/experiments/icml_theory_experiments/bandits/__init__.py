"""Neural logistic bandits (issue 37): the logistic environments with tunable kappa, the reproduction ``neurallog-kappa`` and the benchmark ``neurallog-confidence``."""
