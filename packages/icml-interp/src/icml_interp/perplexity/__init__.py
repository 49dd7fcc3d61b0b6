"""Perplexity split into prompt-side and answer-side tokens, for one model or a sequence of checkpoints."""

from icml_interp.perplexity.split import split_perplexity, split_perplexity_over_checkpoints, token_nll

__all__ = ["split_perplexity", "split_perplexity_over_checkpoints", "token_nll"]
