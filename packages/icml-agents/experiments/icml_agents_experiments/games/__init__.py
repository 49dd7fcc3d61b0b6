"""LLM-pair games (issue 39): the synthetic zoo, the reproduction."""
