"""Benchmarks of the model backends (``icml_agents.backends``)."""
