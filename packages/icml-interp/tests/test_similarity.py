"""Representational similarity: CKA and HSIC against their definitions, streaming against the full
computation, invariances, chance levels, planted maps, and layer handling on tiny random Hugging Face
models."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from scipy.spatial.distance import pdist
from scipy.stats import ortho_group, spearmanr

from icml_interp.hooks import HookedModel
from icml_interp.similarity import (
    StreamingCKA,
    cka,
    cknna,
    depth_buckets,
    gram_linear,
    gram_rbf,
    hsic,
    layer_representations,
    linear_cka,
    match_layers_by_depth,
    mutual_knn,
    pair_similarity,
    permutation_baseline,
    plot_similarity_matrix,
    procrustes,
    pwcca,
    rbf_cka,
    rsa,
    similarity_matrix,
    svcca,
)
from icml_tools.assets import tiny_llama


def related(seed: int = 0, n: int = 80, d_x: int = 12, d_y: int = 16, noise: float = 0.5):
    """Two representations sharing a 4-dimensional latent, plus independent noise."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n, 4))
    x = z @ rng.standard_normal((4, d_x)) + noise * rng.standard_normal((n, d_x))
    y = z @ rng.standard_normal((4, d_y)) + noise * rng.standard_normal((n, d_y))
    return x, y


def feature_cka(x: np.ndarray, y: np.ndarray) -> float:
    """The feature-space formula, written out: |Xc^T Yc|_F^2 / (|Xc^T Xc|_F |Yc^T Yc|_F)."""
    xc, yc = x - x.mean(0), y - y.mean(0)
    return np.linalg.norm(xc.T @ yc) ** 2 / (np.linalg.norm(xc.T @ xc) * np.linalg.norm(yc.T @ yc))


def brute_force_hsic_u(k: np.ndarray, l_: np.ndarray) -> float:
    """HSIC's U-statistic from its definition: the mean over ordered distinct (i, j, q, r) of
    K_ij L_ij + K_ij L_qr - 2 K_ij L_iq (Song et al. 2012, Theorem 2)."""
    total, count = 0.0, 0
    for i, j, q, r in itertools.permutations(range(len(k)), 4):
        total += k[i, j] * l_[i, j] + k[i, j] * l_[q, r] - 2 * k[i, j] * l_[i, q]
        count += 1
    return total / count


# ------------------------------------------------------------------------------------------- CKA and HSIC
@pytest.mark.parametrize("n", [5, 7])
def test_debiased_hsic_is_the_u_statistic(n):
    rng = np.random.default_rng(n)
    k = gram_rbf(rng.standard_normal((n, 3)))
    l_ = gram_linear(rng.standard_normal((n, 2)))
    assert hsic(k, l_, debiased=True) == pytest.approx(brute_force_hsic_u(k, l_), abs=1e-10)
    h = np.eye(n) - 1 / n
    assert hsic(k, l_) == pytest.approx(np.trace(k @ h @ l_ @ h) / (n - 1) ** 2, abs=1e-12)
    assert hsic(3 * k, 2 * l_, debiased=True) == pytest.approx(6 * hsic(k, l_, debiased=True), rel=1e-12)


@pytest.mark.parametrize("debiased", [False, True])
@pytest.mark.parametrize(("n", "d_x", "d_y"), [(200, 10, 14), (12, 40, 60)])  # feature form / Gram form
def test_gram_and_feature_forms_agree(debiased, n, d_x, d_y):
    x, y = related(n=n, d_x=d_x, d_y=d_y)
    via_gram = cka(gram_linear(x), gram_linear(y), debiased=debiased)
    assert linear_cka(x, y, debiased=debiased) == pytest.approx(via_gram, abs=1e-10)
    if not debiased:
        assert linear_cka(x, y) == pytest.approx(feature_cka(x, y), abs=1e-10)
    else:  # debiased CKA is the ratio of Song et al.'s HSICs
        k, l_ = gram_linear(x), gram_linear(y)
        ratio = hsic(k, l_, True) / math.sqrt(hsic(k, k, True) * hsic(l_, l_, True))
        assert via_gram == pytest.approx(ratio, abs=1e-10)


@pytest.mark.parametrize("seed", [0, 1])
def test_invariant_to_orthogonal_maps_scaling_and_translation(seed):
    x, y = related(seed)
    q_x, q_y = (
        ortho_group.rvs(x.shape[1], random_state=seed),
        ortho_group.rvs(y.shape[1], random_state=seed + 7),
    )
    x2, y2 = 3.5 * x @ q_x + 2.0, 0.01 * y @ q_y - 5.0
    for debiased in (False, True):
        assert linear_cka(x2, y2, debiased=debiased) == pytest.approx(linear_cka(x, y, debiased), abs=1e-10)
        assert linear_cka(x, x2, debiased=debiased) == pytest.approx(1.0, abs=1e-10)
    assert rbf_cka(x2, y2, fraction=0.8) == pytest.approx(rbf_cka(x, y, fraction=0.8), abs=1e-10)
    assert rbf_cka(x, 4 * x @ q_x) == pytest.approx(1.0, abs=1e-12)
    # cosine geometry: invariant to orthogonal maps and scaling (about the origin)
    assert mutual_knn(3 * x @ q_x, y) == mutual_knn(x, y)
    assert mutual_knn(x, 0.2 * x @ q_x, k=7) == 1.0
    assert cknna(x, 2 * x @ q_x, k=5) == pytest.approx(1.0, abs=1e-10)
    assert procrustes(x, x2).similarity == pytest.approx(1.0, abs=1e-12)
    assert procrustes(x2, y2).similarity == pytest.approx(procrustes(x, y).similarity, abs=1e-10)
    assert rsa(x, x2, metric="euclidean") == pytest.approx(1.0, abs=1e-12)


def test_debiased_cka_is_near_zero_on_independent_wide_data():
    rng = np.random.default_rng(0)
    for _ in range(3):
        x, y = rng.standard_normal((50, 2000)), rng.standard_normal((50, 2000))
        assert linear_cka(x, y) > 0.5  # biased CKA: inflated when d >> n
        assert abs(linear_cka(x, y, debiased=True)) < 0.05


def test_large_and_tiny_values_are_handled():
    x, y = related()
    expected = linear_cka(x, y)
    assert linear_cka(x * 1e300, y * 1e-300) == pytest.approx(expected, abs=1e-10)
    assert linear_cka(torch.tensor(x, dtype=torch.float32), y) == pytest.approx(expected, abs=1e-6)
    with pytest.raises(ValueError, match="X is too large"):
        gram_linear(x * 1e300)


def test_rbf_gram_and_median_heuristic():
    x = np.array([[0.0, 0.0], [3.0, 4.0], [0.0, 1.0]])
    d2 = np.array([25.0, 1.0, 18.0])  # pairs (0,1), (0,2), (1,2)
    k = gram_rbf(x, fraction=0.5)
    sigma = 0.5 * math.sqrt(np.median(d2))
    assert k[0, 1] == pytest.approx(math.exp(-25 / (2 * sigma**2)), rel=1e-12)
    assert gram_rbf(x, sigma=2.0)[1, 2] == pytest.approx(math.exp(-18 / 8), rel=1e-12)
    np.testing.assert_allclose(np.diag(k), 1.0)


# ------------------------------------------------------------------------------------------- streaming
@pytest.mark.parametrize("estimator", ["biased", "debiased"])
@pytest.mark.parametrize("splits", [[500], [256, 244], [1, 99, 100, 300], [137] * 3 + [89]])
def test_streaming_equals_the_full_computation(estimator, splits):
    x, y = related(3, n=500, d_x=24, d_y=32)
    x = x + 40.0  # far from the origin: the shift by the first batch's mean keeps the digits
    if estimator == "debiased" and splits[0] == 1:
        splits = [4, 96, 100, 300]
    full = linear_cka(x, y, debiased=estimator == "debiased")
    stream = StreamingCKA(estimator)
    start = 0
    for size in splits:
        stream.update(x[start : start + size], torch.tensor(y[start : start + size]))
        start += size
    assert stream.n_samples_ == 500
    assert stream.value() == pytest.approx(full, abs=1e-10)
    assert stream.reset().n_samples_ == 0


def test_minibatch_estimator_averages_unbiased_hsic_over_batches():
    x, y = related(4, n=300)
    stream = StreamingCKA("minibatch")
    terms = []
    for start in range(0, 300, 60):
        xb, yb = x[start : start + 60], y[start : start + 60]
        stream.update(xb, yb)
        k, l_ = gram_linear(xb), gram_linear(yb)
        terms.append([hsic(k, l_, True), hsic(k, k, True), hsic(l_, l_, True)])
    kl, kk, ll = np.mean(terms, axis=0)
    assert stream.value() == pytest.approx(kl / math.sqrt(kk * ll), abs=1e-10)
    assert abs(stream.value() - linear_cka(x, y, debiased=True)) < 0.05  # close to the full-data value


def test_streaming_rejects_changing_widths_and_too_few_rows():
    stream = StreamingCKA().update(np.ones((3, 2)) * np.arange(3)[:, None], np.arange(6.0).reshape(3, 2))
    with pytest.raises(ValueError, match="X_batch must have 2 columns"):
        stream.update(np.ones((3, 5)), np.ones((3, 2)))
    with pytest.raises(ValueError, match="X_batch and Y_batch"):
        StreamingCKA("minibatch").update(np.ones((3, 2)), np.ones((3, 2)))
    with pytest.raises(ValueError, match="no batch"):
        StreamingCKA().value()
    with pytest.raises(ValueError, match="estimator"):
        StreamingCKA("exact")


# ------------------------------------------------------------------------------------------- neighbours
def test_mutual_knn_is_at_chance_on_independent_data():
    rng = np.random.default_rng(1)
    n, k = 400, 10
    x, y = rng.standard_normal((n, 16)), rng.standard_normal((n, 16))
    chance = k / (n - 1)
    # one sample's overlap count is hypergeometric: k draws from n - 1, k of them marked
    var = k * (k / (n - 1)) * (1 - k / (n - 1)) * (n - 1 - k) / (n - 2)
    se = math.sqrt(var) / k / math.sqrt(n)
    assert abs(mutual_knn(x, y, k) - chance) < 4 * se


def test_mutual_knn_counts_shared_neighbours():
    x = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])  # pairs {0, 1} and {2, 3}
    assert mutual_knn(x, x, k=1) == 1.0
    y = x[[0, 2, 1, 3]]  # sample 0's neighbour is now 2, ... : nothing is shared
    assert mutual_knn(x, y, k=1) == 0.0
    assert mutual_knn(x, y, k=3) == 1.0  # every other sample


def test_cknna_high_for_related_low_for_independent():
    x, y = related(5, n=200, noise=0.3)
    rng = np.random.default_rng(5)
    assert cknna(x, y, k=10) > 0.3
    assert abs(cknna(rng.standard_normal((200, 12)), rng.standard_normal((200, 12)), k=10)) < 0.15


# ----------------------------------------------------------------------------------- CCA, Procrustes, RSA
def test_svcca_and_pwcca_are_one_for_an_invertible_linear_map():
    x, _ = related(6, n=100, d_x=8)
    a = np.random.default_rng(6).standard_normal((8, 8)) + 3 * np.eye(8)
    assert svcca(x, x @ a, keep=1.0) == pytest.approx(1.0, abs=1e-10)
    assert svcca(x, x @ a, keep=8) == pytest.approx(1.0, abs=1e-10)
    assert pwcca(x, x @ a) == pytest.approx(1.0, abs=1e-10)
    rng = np.random.default_rng(6)
    assert svcca(rng.standard_normal((500, 5)), rng.standard_normal((500, 5))) < 0.1
    with pytest.warns(UserWarning, match="canonical correlations are 1"):
        svcca(rng.standard_normal((10, 8)), rng.standard_normal((10, 8)), keep=8)


def test_procrustes_recovers_a_planted_rotation():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((100, 6))
    r_true = ortho_group.rvs(6, random_state=7)
    for y in (x @ r_true, 2.5 * x @ r_true + 4.0):
        result = procrustes(x, y)
        np.testing.assert_allclose(result.R, r_true, atol=1e-8)
        assert result.similarity == pytest.approx(1.0, abs=1e-12)
        assert result.residual < 1e-10
    noisy = x @ r_true + 0.3 * rng.standard_normal(x.shape)
    raw = procrustes(x, noisy, center=False, normalize=False)
    assert raw.residual == pytest.approx(np.linalg.norm(x @ raw.R - noisy), rel=1e-12)
    unit = procrustes(x, noisy)
    assert unit.residual**2 == pytest.approx(2 - 2 * unit.similarity, abs=1e-12)
    wide = procrustes(x, np.hstack([x @ r_true, np.zeros((100, 3))]))  # d_x < d_y: zero-padded
    np.testing.assert_allclose(wide.R @ wide.R.T, np.eye(6), atol=1e-12)
    assert wide.similarity == pytest.approx(1.0, abs=1e-12)


def test_rsa_matches_spearman_of_the_rdms():
    x, y = related(8, n=30)
    assert rsa(x, x) == pytest.approx(1.0, abs=1e-12)
    assert rsa(x, x, metric="euclidean", method="pearson") == pytest.approx(1.0, abs=1e-12)

    def rdm(a):
        c = np.corrcoef(a)
        return 1 - c[np.triu_indices(len(a), 1)]

    assert rsa(x, y) == pytest.approx(spearmanr(rdm(x), rdm(y)).statistic, abs=1e-12)


def test_rsa_keeps_the_ties_of_integer_ratings():
    # dividing by max|x| = 5 rounded equal distances apart, so spearman ranked exact ties as different
    rng = np.random.default_rng(0)
    x = rng.integers(0, 6, size=(40, 6)).astype(float)
    y = np.clip(x + rng.integers(-1, 2, size=x.shape), 0, 5)
    reference = spearmanr(pdist(x), pdist(y)).statistic
    assert rsa(x, y, metric="euclidean") == pytest.approx(reference, abs=1e-12)


def test_symmetric_metrics_are_symmetric():
    x, y = related(9, n=60)
    for metric in (
        linear_cka,
        lambda a, b: linear_cka(a, b, debiased=True),
        rbf_cka,
        mutual_knn,
        svcca,
        rsa,
        lambda a, b: procrustes(a, b).similarity,
        lambda a, b: cka(gram_rbf(a), gram_rbf(b), debiased=True),
        lambda a, b: hsic(gram_linear(a), gram_linear(b), debiased=True),
    ):
        assert metric(x, y) == pytest.approx(metric(y, x), abs=1e-12)
    # CKNNA's kNN masks are asymmetric, so platonic-rep's formula is symmetric only approximately
    assert cknna(x, y, k=5) == pytest.approx(cknna(y, x, k=5), rel=1e-2)


# ------------------------------------------------------------------------------------------- chance baseline
def test_permutation_baseline():
    x, y = related(10, n=40)
    dependent = permutation_baseline(linear_cka, x, y, n_permutations=99, seed=0)
    assert dependent.p_value == pytest.approx(0.01) and dependent.observed > dependent.null_quantiles[-1]
    # under independence the p-value is uniform: a fixed seed makes this draw (p > 0.05) deterministic
    noise = np.random.default_rng(0).standard_normal((40, 6))
    independent = permutation_baseline(linear_cka, noise, y, n_permutations=99, seed=0)
    assert independent.p_value > 0.05
    assert 0 < independent.null_mean < 0.5  # biased CKA's chance level is well above 0 at n = 40
    assert independent.null.shape == (99,) and independent.p_value >= 1 / 100
    row = dependent.row()
    assert set(row) >= {"observed", "null_mean", "null_q0.95", "p_value"} and row["n_permutations"] == 99
    same = permutation_baseline(linear_cka, x, y, n_permutations=99, seed=0)
    np.testing.assert_array_equal(same.null, dependent.null)


# ------------------------------------------------------------------------------------------- layers
def test_depth_buckets_and_matching():
    assert depth_buckets(30) == {
        "early": list(range(10)),
        "middle": list(range(10, 20)),
        "late": list(range(20, 30)),
    }
    assert depth_buckets(4) == {"early": [0], "middle": [1, 2], "late": [3]}
    assert depth_buckets(5, buckets=2) == {"early": [0, 1], "late": [2, 3, 4]}
    assert match_layers_by_depth(4, 8) == [(0, 0), (1, 2), (2, 5), (3, 7)]
    assert match_layers_by_depth(8, 4) == [(0, 0), (2, 1), (5, 2), (7, 3)]
    assert match_layers_by_depth(5, 5) == [(i, i) for i in range(5)]
    with pytest.raises(ValueError, match="n_layers"):
        depth_buckets(2, buckets=3)


def test_pair_similarity_and_matrix(tmp_path):
    x, y = related(11, n=50)
    rng = np.random.default_rng(11)
    reps_a = [x + 0.2 * i * rng.standard_normal(x.shape) for i in range(4)]
    reps_b = [y + 0.2 * i * rng.standard_normal(y.shape) for i in range(8)]
    result = pair_similarity(reps_a, reps_b, buckets=3)
    assert list(result) == ["early", "middle", "late"]
    assert result["middle"]["pairs"] == [(1, 2), (2, 5)]
    expected = np.mean([linear_cka(reps_a[1], reps_b[2]), linear_cka(reps_a[2], reps_b[5])])
    assert result["middle"]["similarity"] == pytest.approx(expected, abs=1e-12)
    top = pair_similarity(reps_a, reps_b, reduce="max")["middle"]["similarity"]
    assert top == pytest.approx(max(linear_cka(reps_a[1], reps_b[2]), linear_cka(reps_a[2], reps_b[5])))
    with_chance = pair_similarity(reps_a, reps_b, n_permutations=19)
    assert all(
        v["p_value"] == pytest.approx(0.05) and v["chance"] < v["similarity"] for v in with_chance.values()
    )
    names, matrix = similarity_matrix({"a": reps_a, "b": reps_b, "noise": [rng.standard_normal((50, 5))] * 3})
    assert names == ["a", "b", "noise"]
    np.testing.assert_allclose(matrix, matrix.T)
    np.testing.assert_allclose(np.diag(matrix), 1.0, atol=1e-12)
    assert matrix[0, 1] > matrix[0, 2]
    _, early = similarity_matrix({"a": reps_a, "b": reps_b}, bucket="early")
    assert early[0, 1] == pytest.approx(result["early"]["similarity"])
    fig = plot_similarity_matrix(names, matrix, path=tmp_path / "sim.png")
    assert (tmp_path / "sim.png").stat().st_size > 0
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_plot_similarity_matrix_leaves_the_matplotlib_backend_alone(tmp_path):
    plt = pytest.importorskip("matplotlib.pyplot")
    previous = plt.get_backend()
    plt.switch_backend("pdf")  # a caller's backend other than Agg
    try:
        fig = plot_similarity_matrix(["a", "b"], np.eye(2), path=tmp_path / "sim.png")
        assert plt.get_backend() == "pdf" and plt.get_fignums() == []
    finally:
        plt.switch_backend(previous)
    assert len(fig.axes) == 2 and (tmp_path / "sim.png").stat().st_size > 0


TEXTS = [[5, 17, 42, 9, 100, 7, 7], [3, 77], [8, 8, 8, 8, 8, 8, 8, 8, 8, 8], [250, 1, 2]]


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("pooling", ["mean", "last"])
def test_layer_representations_ignore_padding(zoo, family, pooling):
    model = zoo.gpt2(0, layers=3) if family == "gpt2" else tiny_llama(seed=0, layers=3)
    batched = layer_representations(model, None, TEXTS, pooling=pooling, batch_size=4)
    assert len(batched) == 4 and all(r.shape == (4, 64) and r.dtype == np.float32 for r in batched)
    alone = layer_representations(model, None, TEXTS, pooling=pooling, batch_size=1)
    for a, b in zip(batched, alone, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
    with torch.no_grad():  # the definition, on the unpadded text
        states = model(torch.tensor([TEXTS[0]]), output_hidden_states=True).hidden_states
    for layer, h in enumerate(states):
        want = h[0].mean(0) if pooling == "mean" else h[0, -1]
        np.testing.assert_allclose(batched[layer][0], want.numpy(), atol=1e-5, rtol=0)


def test_layer_representations_with_a_tokenizer():
    from transformers import AutoTokenizer

    from icml_tools.assets import smollm2_dir

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir())
    model = tiny_llama(seed=1, layers=2, vocab=len(tokenizer)).train()
    texts = ["The capital of France is Paris.", "Hello", "A longer sentence about representations of text."]
    reps = layer_representations(model, tokenizer, texts, batch_size=2)
    assert len(reps) == 3 and all(r.shape == (3, 64) for r in reps)
    assert model.training  # the mode is restored
    via_hooked = layer_representations(HookedModel(model), tokenizer, texts, batch_size=3)
    for a, b in zip(reps, via_hooked, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
    picked = layer_representations(model, tokenizer, texts, layers=[0, -1], pooling="last")
    ids = tokenizer(texts[1])["input_ids"]
    with torch.no_grad():
        model.eval()
        last = model(torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0, -1]
    np.testing.assert_allclose(picked[1][1], last.numpy(), atol=1e-5, rtol=0)


def test_layer_representations_keep_every_submodules_training_flag(zoo):
    # the top-level flag was restored with model.train(was_training), which overwrote the flags a user set on
    # submodules (MC dropout in an eval model, a frozen block in a training model)
    model = zoo.gpt2(0, layers=2)
    model.eval()
    model.transformer.drop.train()

    def flags():
        return {name: module.training for name, module in model.named_modules()}

    before = flags()
    layer_representations(model, None, TEXTS, layers=[0, 1])
    assert flags() == before
    model.train()
    model.transformer.h[0].eval()
    before = flags()
    layer_representations(model, None, TEXTS, layers=[0, 1])
    assert flags() == before
    with pytest.raises(ValueError, match="at least one layer"):
        layer_representations(model, None, TEXTS, layers=[])
    assert flags() == before


# ------------------------------------------------------------------------------------------- bad input
def test_bad_input_names_the_argument(zoo):
    x, y = related(12, n=20)
    with pytest.raises(ValueError, match=r"X and Y .* X has 20 rows, Y has 19"):
        linear_cka(x, y[:19])
    with pytest.raises(ValueError, match=r"at least 4 samples .*n - 3.*got 3"):
        linear_cka(x[:3], y[:3], debiased=True)
    with pytest.raises(ValueError, match="at least 4"):
        StreamingCKA("debiased").update(x[:3], y[:3]).value()
    with pytest.raises(ValueError, match=r"k must be .* got 20"):
        mutual_knn(x, y, k=20)
    with pytest.raises(ValueError, match="k must"):
        cknna(x, y, k=1)
    bad = x.copy()
    bad[3, 2] = np.nan
    for fn in (linear_cka, mutual_knn, svcca, rsa, procrustes):
        with pytest.raises(ValueError, match="X must hold finite values"):
            fn(bad, y)
    with pytest.raises(ValueError, match="Y must be a non-empty 2-d array"):
        linear_cka(x, y[:, 0])
    with pytest.raises(TypeError, match="X must be a numpy array or a torch tensor"):
        linear_cka(x.tolist(), y)
    with pytest.raises(ValueError, match="X is the same for every sample"):
        linear_cka(np.ones((20, 3)), y)
    with pytest.raises(ValueError, match="K must be symmetric"):
        cka(np.arange(16.0).reshape(4, 4), np.eye(4))
    with pytest.raises(ValueError, match="reps_a and reps_b must hold the same texts"):
        pair_similarity([x] * 3, [y[:10]] * 3)
    with pytest.raises(TypeError, match="metric"):
        permutation_baseline("cka", x, y)
    with pytest.raises(ValueError, match="texts"):
        layer_representations(tiny_llama(seed=0), None, [[1, 2], []])
    gpt2 = zoo.gpt2(0, layers=1)  # 64 positions
    with pytest.raises(ValueError, match=r"texts\[1\] has 70 tokens.*max_length"):
        layer_representations(gpt2, None, [[1, 2], [3] * 70])
    assert layer_representations(gpt2, None, [[1, 2], [3] * 70], max_length=10)[0].shape == (2, 64)
