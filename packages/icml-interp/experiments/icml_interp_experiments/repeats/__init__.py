"""Repeat circuits (Kesten-Pomeranz et al. 2026): the causal induction toy and the masked protein-LM toy."""
