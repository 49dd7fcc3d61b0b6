"""Experiments for :mod:`icml_agents.rl`."""
