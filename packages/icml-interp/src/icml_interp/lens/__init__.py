"""Logit lens on the residual stream and on MLP value vectors (any mapped Hugging Face causal LM)."""

from icml_interp.lens.logit_lens import logit_lens, mlp_value_lens, token_rank_by_layer

__all__ = ["logit_lens", "mlp_value_lens", "token_rank_by_layer"]
