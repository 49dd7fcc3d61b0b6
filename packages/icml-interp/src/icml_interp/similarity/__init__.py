"""Representational similarity of model pairs (issue 39; Potter et al., ICML 2026, compare LLM pairs by CKA).

Metrics of two representations ``X`` ``(n, d_x)`` and ``Y`` ``(n, d_y)`` of the same ``n`` samples (rows),
numpy arrays or torch tensors, computed in float64:

- CKA and HSIC: :func:`linear_cka` (biased, or debiased with Song et al.'s unbiased HSIC), :func:`rbf_cka`,
  and on Gram matrices :func:`cka`, :func:`hsic`, :func:`gram_linear`, :func:`gram_rbf`;
  :class:`StreamingCKA` accumulates linear CKA over minibatches (exactly, or Nguyen et al.'s minibatch
  estimator) for probe sets too large for ``n x n`` Gram matrices.
- neighbours: :func:`mutual_knn` (chance level ``k / (n - 1)``) and :func:`cknna` (platonic-rep's CKNNA).
- :func:`svcca`, :func:`pwcca`, :func:`procrustes` (orthogonal map and similarity), :func:`rsa`.
- :func:`permutation_baseline`: any metric's chance level with the samples' pairing shuffled. Biased CKA
  is inflated when ``d`` is comparable to ``n``: prefer ``debiased=True`` there and report the baseline.

Layers: :func:`layer_representations` (mean- or last-token-pooled hidden states of a Hugging Face causal
LM, embeddings as layer 0), :func:`depth_buckets` (early / middle / late thirds),
:func:`match_layers_by_depth` (models of different depths), :func:`pair_similarity` (per bucket, with
an optional chance level), :func:`similarity_matrix` and :func:`plot_similarity_matrix`.

Example::

    from icml_interp.similarity import layer_representations, pair_similarity, linear_cka
    reps_a = layer_representations(model_a, tok_a, texts)
    reps_b = layer_representations(model_b, tok_b, texts)
    pair_similarity(reps_a, reps_b, metric=lambda x, y: linear_cka(x, y, debiased=True), n_permutations=20)
"""

from icml_interp.similarity.baseline import PermutationBaseline, permutation_baseline
from icml_interp.similarity.cca import pwcca, svcca
from icml_interp.similarity.cka import cka, gram_linear, gram_rbf, hsic, linear_cka, rbf_cka
from icml_interp.similarity.compare import pair_similarity, plot_similarity_matrix, similarity_matrix
from icml_interp.similarity.layers import depth_buckets, layer_representations, match_layers_by_depth
from icml_interp.similarity.neighbors import cknna, mutual_knn
from icml_interp.similarity.procrustes import ProcrustesResult, procrustes
from icml_interp.similarity.rsa import rsa
from icml_interp.similarity.streaming import StreamingCKA

__all__ = [
    "PermutationBaseline",
    "ProcrustesResult",
    "StreamingCKA",
    "cka",
    "cknna",
    "depth_buckets",
    "gram_linear",
    "gram_rbf",
    "hsic",
    "layer_representations",
    "linear_cka",
    "match_layers_by_depth",
    "mutual_knn",
    "pair_similarity",
    "permutation_baseline",
    "plot_similarity_matrix",
    "procrustes",
    "pwcca",
    "rbf_cka",
    "rsa",
    "similarity_matrix",
    "svcca",
]
