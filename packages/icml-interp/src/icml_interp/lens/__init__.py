"""Lenses on the residual stream of Hugging Face causal LMs: the logit lens (plain torch hooks)."""

from icml_interp.lens.logit_lens import logit_lens

__all__ = ["logit_lens"]
