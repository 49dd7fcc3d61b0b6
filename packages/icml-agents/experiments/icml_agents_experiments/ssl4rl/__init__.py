"""Experiments for :mod:`icml_agents.ssl4rl`."""
