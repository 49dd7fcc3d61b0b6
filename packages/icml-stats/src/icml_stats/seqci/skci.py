"""SKCI: sequential kernel conditional independence testing by betting, robust to an estimated Model-X
conditional (He & Sutherland, ICML 2026).

H0: ``A _||_ B | C``, tested on a stream of batches. At each batch every quantity is computed from the
*past* data only, then the new batch is bet on:

1. **Model-X conditional**: the conditional mean embedding ``mu_A(c) = E[phi(A) | C = c]``, estimated
   online from the past (``model_x="online"``), fitted once on extra data (``"pretrained"``), or exact
   from a known Gaussian conditional (``"oracle"``). ``mu_B`` is always estimated online. Online, by
   default (``estimator="gaussian"``), the past is split at random into the witness anchors (at most half
   of it) and a fit set, and ``A | C`` and ``B | C`` are Gaussian location models fitted on the fit set
   only: ``N(m(c), s^2)`` with ``m`` by kernel ridge regression (input kernel affine, RBF + linear or RBF,
   and ridge, all by the closed-form LOO loss) and ``s`` from the exact LOO residuals, whose RBF
   embeddings are closed-form. ``estimator="cme"`` (earlier versions) regresses ``phi(A)`` on ``c`` by
   kernel ridge regression on the whole past, anchors included; the oracle and pretrained modes keep
   that estimate for ``mu_B``.
2. **Centered kernels** ``K~_A[i, j] = <phi(a_i) - mu_A(c_i), phi(a_j) - mu_A(c_j)>`` (same for B), and
   the KCI product kernel ``h_ij = K~_A[i, j] K~_B[i, j] k_C(c_i, c_j)``.
3. **Witness and normalization**: the KCI witness from past "anchor" points ``S``, evaluated on the new
   batch ``N``: ``V_raw = mean_{i in S, j in N} h_ij / (mean_{i, j in S} h_ij + eps)`` (``normalize=True``;
   the denominator is the squared norm of the witness, so ``V_raw`` is about 1 under the alternative and
   scale-free). Without normalization the denominator is 1.
4. **Truncate-and-shift**: ``V = max(V_raw - gamma, -1)``; ``gamma`` solves ``gamma = sigma Phi((gamma - 1) / sigma)``
   where ``sigma^2 = (1/m) mean_j (mean_{i != j} h_ij / norm)^2`` over the anchors (``shift=False``: gamma = 0).
   The shift makes the test pay a premium per bet, so that the small positive drift that an estimation
   error in ``mu_A`` gives the payoff under H0 no longer makes the wealth grow.
5. **Betting fraction** ``lambda = sigmoid(beta)`` learned on the past: the anchors are split into folds of
   the batch size, each fold's payoff is computed as in 3-4, and ``beta`` maximises the folds'
   log-wealth ``sum_f log(1 + lambda V_f)`` (:class:`~icml_stats.seqci.betting.SigmoidFraction`). The
   bandwidth of ``k_C`` is picked from ``c_bandwidth_factors`` x the median heuristic by the same objective.
   The wealth is ``W_t = W_{t-1} (1 + lambda_t V_t)``; reject once ``W_t >= 1/alpha``.

Everything that fixes the bet of a batch is a function of earlier batches, so when the payoff has
conditional mean ``<= 0`` under H0 (exactly so for the oracle conditional before truncation) the wealth is
a nonnegative supermartingale and the test is anytime-valid by Ville's inequality. With an estimated
conditional the validity is approximate; normalization and truncate-and-shift are the paper's remedies.

**Why the default splits the past and fits location models** (issue 25; our own design). Write
``delta_A(c) = mu_A(c) - mu^_A(c)``. When the estimates do not depend on the anchors' or the new batch's
noise (the split), the payoff's conditional mean under H0 is, before normalization,
``E[k_C(c_i, c_j) <delta_A(c_i), delta_A(c_j)> <delta_B(c_i), delta_B(c_j)>] >= 0``: a drift that is the
product of the two estimation errors and has no other term (an in-sample fit adds one: it pulls
``mu^(c_j)`` towards ``phi(a_i)`` for both A and B, and the two pulls multiply to a positive term).
Normalization divides by about ``1 / n_anchors`` of the residuals' size, so even a small drift becomes a
payoff near 1, the size an alternative pays. When C drives A and B through the same function, the
embedding's ridge shrinkage biases ``mu^_A`` and ``mu^_B`` in the same direction and the drift is the
square of that bias: the ``"cme"`` estimate then rejected up to 100% of null streams
(``skci-confounding``). A Gaussian location model reduces the estimate to a regression of the mean (at
the parametric rate when it is affine, which the LOO choice of kernel finds), so both errors, and their
product, are small. The price: the validity argument assumes ``A | C`` and ``B | C`` are Gaussian with a
constant variance and a mean the kernels can fit; under other conditionals the embedding is biased and
the drift returns. Half the past carries the witness early on, which costs power in the first batches.

Our own design, because only the abstract and the official code (he-zh/SKCI) were available to us:

* fixed-form kernels instead of the official trained MLP-feature kernels: RBF kernels on ``a`` and ``b``
  (median heuristic on the past), RBF on ``c`` for both embeddings (median heuristic, ridge by the
  closed-form LOO loss over ``RIDGE_GRID`` on at most 300 past points), and the KCI kernel ``k_C`` chosen
  from three bandwidths instead of trained by gradient ascent; bandwidths and ridges are re-chosen only
  when the past has grown by 25% since their last choice (a geometric schedule; predictable, cheap);
* the betting fraction is the exact maximiser of the penalised fold log-wealth (the code takes Adam steps
  with early stopping on a validation batch);
* ``sigma`` for the shift comes from the in-sample anchor block (the code's "train" formula), not from a
  separate validation batch;
* **anchors**: the witness uses at most ``n_anchors`` past points drawn at random each step (all of them
  when ``n_anchors=None``), while the embeddings use all ``max_past`` most recent points. This keeps a
  step at ``O(max_past^3 + max_past^2 n_anchors)`` time;
* **bounded memory**: only the ``max_past`` most recent samples are kept (a sliding window; default 500),
  so memory is ``O(max_past^2)`` and time per update is bounded however long the stream runs;
  the defaults (``max_past=500``, ``n_anchors=128``) were chosen for speed (a 1,000-sample run in a few
  seconds on one core), not tuned on test results;
* oracle mode uses the exact Gaussian embedding (the code regresses ``phi`` of the noiseless conditional
  mean instead).

After a rejection the test keeps accepting data: the wealth keeps being updated (and reported), but the
decision is final: ``rejected`` stays True and ``stopping_time`` is the first crossing.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy.optimize import brentq
from scipy.special import ndtr  # the standard normal cdf, without scipy.stats' overhead
from threadpoolctl import threadpool_limits  # a scikit-learn dependency

from icml_stats.seqci.betting import (
    SequentialTestResult,
    SigmoidFraction,
    WealthProcess,
    make_strategy,
    result_from_process,
)
from icml_stats.seqci.kernels import (
    RBF,
    Affine,
    ConditionalMeanEmbedding,
    GaussianConditional,
    Linear,
    RBFLinear,
    choose_kernel_and_ridge,
    choose_ridge,
    median_bandwidth,
)
from icml_stats.validation import (
    as_array,
    as_batch,
    as_matched_samples,
    as_rng,
    as_samples,
    check_choice,
    check_int,
    check_real,
)

MODEL_X_MODES = ("online", "pretrained", "oracle")
ESTIMATORS = ("gaussian", "cme")  # how model_x="online" estimates A | C and B | C
SPLIT = "online-gaussian"  # the one scheme that fits the conditionals on the past minus the anchors
CONFOUNDING_EXPLAINED = 0.4  # estimator="cme" warns when c explains this much of a (out of sample)
C_BANDWIDTH_FACTORS = (0.5, 1.0, 2.0)
REFRESH_GROWTH = 1.25  # bandwidths and ridges are re-chosen when the past has grown by this factor


def shift_for(sigma: float) -> float:
    """The truncate-and-shift premium: the root of ``gamma = sigma Phi((gamma - 1) / sigma)`` (the official
    code's formula; 0 when ``sigma == 0``)."""
    sigma = check_real(sigma, "sigma", "[0, inf)")
    if sigma == 0:
        return 0.0
    if sigma > 1e100:  # solve for gamma / sigma instead: the bracket below would overflow
        return sigma * float(brentq(lambda u: u - ndtr(u - 1.0 / sigma), 0.0, 2.0, xtol=1e-15))
    f = lambda g: g - sigma * ndtr((g - 1.0) / sigma)  # noqa: E731  (increasing past 0: one root)
    return float(brentq(f, 0.0, max(2.0, 8.0 * sigma + 1.0), xtol=1e-10))


def mean_kernels(bandwidth: float) -> tuple:
    """The candidate input kernels of the Gaussian location models' mean regressions (on the scale of
    ``k_C``'s median bandwidth): affine, RBF plus linear, RBF; the LOO loss picks one."""
    return (Affine(bandwidth), RBFLinear(bandwidth), RBF(bandwidth))


class ConfoundingWarning(UserWarning):
    """C explains much of A and the conditional is estimated by a method that did not keep the level under
    such confounding in our measurements (see the ``skci-confounding`` reproduction)."""


def check_model_x(model_x, conditional, pretrain):
    """Check a Model-X mode and what it needs; returns the pretraining samples ``(a, c)`` or None."""
    check_choice(model_x, "model_x", MODEL_X_MODES)
    if model_x == "oracle" and not isinstance(conditional, GaussianConditional):
        raise ValueError("model_x='oracle' needs conditional=GaussianConditional(mean, std), the known A | C")
    if model_x != "pretrained":
        return None
    if pretrain is None or len(pretrain) != 2:
        raise ValueError("model_x='pretrained' needs pretrain=(a, c), extra samples of A and C")
    pa = as_samples(pretrain[0], "pretrain[0] (a)")
    return pa, as_samples(pretrain[1], "pretrain[1] (c)", pa.shape[0])


class SKCI:
    """Sequential kernel conditional independence test of ``A _||_ B | C`` by betting.

    Args:
        alpha: level; reject when the wealth reaches ``1/alpha``.
        model_x: ``"online"`` (estimate ``A | C`` from the past), ``"pretrained"`` (fit it once on
            ``pretrain=(a, c)``) or ``"oracle"`` (use the known ``conditional``).
        estimator: how ``model_x="online"`` estimates ``A | C`` and ``B | C``: ``"gaussian"`` (default:
            Gaussian location models, the mean by kernel ridge regression with an affine, RBF-plus-linear
            or RBF kernel chosen by the LOO loss, fitted on the past *minus* the anchors) or ``"cme"`` (the nonparametric conditional mean
            embedding on the whole past, the estimator of earlier versions; it exceeds the level when C
            strongly confounds A and B and warns with :class:`ConfoundingWarning`).
        conditional: a :class:`~icml_stats.seqci.kernels.GaussianConditional` for ``model_x="oracle"``.
        pretrain: ``(a, c)`` extra samples of A and C for ``model_x="pretrained"``.
        normalize: divide the witness by its squared norm (the paper's normalization).
        shift: subtract the truncate-and-shift premium ``gamma`` (payoffs are truncated at -1 either way).
        betting: ``"sigmoid"`` (fraction learned on past folds, the paper's choice), ``"ons"``,
            ``"agrapa"``, or a strategy object (see :mod:`icml_stats.seqci.betting`).
        max_past: at most this many most recent samples are kept (memory ``O(max_past^2)``).
        n_anchors: at most this many past points carry the witness (None: all kept samples).
        warmup: samples seen before the first bet (they only train).
        c_bandwidth_factors: candidate multiples of the median heuristic for the KCI kernel ``k_C``.
        eps: added to the normalizer.
        random_state: seeds the anchor draws and subsamples.

    ``update(a_batch, b_batch, c_batch)`` bets on one batch and returns the current
    :class:`~icml_stats.seqci.betting.SequentialTestResult`; ``run(a, b, c, batch_size=20)`` streams arrays.
    """

    def __init__(
        self,
        alpha: float = 0.05,
        *,
        model_x: str = "online",
        estimator: str = "gaussian",
        conditional=None,
        pretrain=None,
        normalize: bool = True,
        shift: bool = True,
        betting="sigmoid",
        max_past: int = 500,
        n_anchors: int | None = 128,
        warmup: int = 40,
        c_bandwidth_factors=C_BANDWIDTH_FACTORS,
        eps: float = 1e-6,
        random_state=None,
    ):
        self.alpha = check_real(alpha, "alpha", "(0, 1)")
        self.model_x = model_x
        self._pretrain = check_model_x(model_x, conditional, pretrain)
        self.estimator = check_choice(estimator, "estimator", ESTIMATORS)
        # the kernel blocks it bets on: one scheme per Model-X mode, two for the online estimators
        self._key = f"online-{estimator}" if model_x == "online" else model_x
        self._warned = False
        self.conditional = conditional
        self.normalize, self.shift = bool(normalize), bool(shift)
        self.betting = betting
        self.max_past = check_int(max_past, "max_past", 4)
        self.n_anchors = None if n_anchors is None else check_int(n_anchors, "n_anchors", 2)
        self.warmup = check_int(warmup, "warmup", 4, self.max_past)  # at most max_past
        self.c_bandwidth_factors = tuple(
            float(f)
            for f in as_array(
                c_bandwidth_factors,
                "c_bandwidth_factors",
                ("n_factors",),
                interval="(0, inf)",
                hint=" (at least one factor)",
            )
        )
        self.eps = check_real(eps, "eps", "(0, inf)")
        self.random_state = random_state
        self._rng = as_rng(random_state)
        self._learned = betting == "sigmoid"
        self._fraction = SigmoidFraction()  # used when the fraction is learned
        strategy = None if self._learned else make_strategy(betting)
        if strategy is None and not self._learned:
            raise TypeError("betting must be 'sigmoid', another strategy name or a strategy object, got None")
        self._process = WealthProcess(strategy, self.alpha)
        self._past: list[np.ndarray] | None = None  # [A (n, p), B (n, q), C (n, d)]
        self._dims: tuple[int, ...] | None = None
        self._n_seen = 0
        self._bet_n: list[int] = []
        self._info: dict[str, list] = {"gamma": [], "normalizer": [], "raw_payoff": [], "c_bandwidth": []}
        self._pretrained_cme: ConditionalMeanEmbedding | None = None
        self._hyper: dict | None = None

    # ----------------------------------------------------------------------------- public API
    @property
    def n_seen(self) -> int:
        """Samples received so far (including warm-up)."""
        return self._n_seen

    def update(self, a_batch, b_batch, c_batch) -> SequentialTestResult:
        """Bet on one batch (rows are matched samples) and return the test's state afterwards.

        Raises ``ValueError`` for batches of different lengths, NaN or infinite entries, or a column count
        that differs from the first batch.
        """
        a, b, c = self._check_batch(a_batch, b_batch, c_batch)
        blocks = self._prepare(a, b, c)
        if blocks is not None:
            self._bet(blocks, a.shape[0])
        self._append(a, b, c)
        return self.result()

    def run(self, a, b, c, batch_size: int = 20) -> SequentialTestResult:
        """Stream ``a, b, c`` in consecutive batches of ``batch_size`` (the last may be shorter).

        BLAS is limited to one thread meanwhile: the matrices are at most ``max_past`` wide, where more
        threads gain little and, on a busy machine, oversubscription made runs ten times slower.
        """
        a, b, c = as_matched_samples(a=a, b=b, c=c)
        batch_size = check_int(batch_size, "batch_size", 1)
        with threadpool_limits(limits=1, user_api="blas"):
            for start in range(0, a.shape[0], batch_size):
                stop = start + batch_size
                self.update(a[start:stop], b[start:stop], c[start:stop])
        return self.result()

    def result(self) -> SequentialTestResult:
        return result_from_process(self._process, self._bet_n, "SKCI", self._info)

    # ----------------------------------------------------------------------------- internals
    def _check_batch(self, a_batch, b_batch, c_batch):
        (a, b, c), self._dims = as_batch(self._dims, a_batch=a_batch, b_batch=b_batch, c_batch=c_batch)
        return a, b, c

    def _append(self, a, b, c) -> None:
        self._n_seen += a.shape[0]
        if self._past is None:
            self._past = [a.copy(), b.copy(), c.copy()]  # never the caller's arrays, which it may refill
        else:
            self._past = [
                np.concatenate([p, x])[-self.max_past :] for p, x in zip(self._past, (a, b, c), strict=True)
            ]

    def _hyperparameters(self, A, B, C, seed: int, keys) -> dict:
        """Bandwidths (median heuristic) and ridges (closed-form LOO) from the past, those that the schemes
        ``keys`` need; re-chosen only when the past has grown by ``REFRESH_GROWTH`` since the last choice
        (they change little in between). Each draws its subsample from its own stream of ``seed``, so
        what one scheme chooses does not depend on which others run beside it (:func:`run_ablation`)."""
        n = A.shape[0]
        if self._hyper is not None and n < REFRESH_GROWTH * self._hyper["n"]:
            return self._hyper
        keys = set(keys)
        rng = [np.random.default_rng([seed, i]) for i in range(7)]
        h_c = median_bandwidth(C, rng=rng[0])
        k_c = RBF(h_c)
        hyper = {
            "n": n,
            "k_c": k_c,
            "k_a": RBF(median_bandwidth(A, rng=rng[1])),
            "k_b": RBF(median_bandwidth(B, rng=rng[2])),
        }
        if keys - {SPLIT}:  # the conditional mean embedding of B | C on the whole past
            hyper["ridge_b"] = choose_ridge(k_c, hyper["k_b"], C, B, rng=rng[3])
        if "online-cme" in keys:
            hyper["ridge_a"] = choose_ridge(k_c, hyper["k_a"], C, A, rng=rng[4])
        if SPLIT in keys:  # Gaussian location models: input kernels and ridges of the mean regressions
            kernels = mean_kernels(h_c)
            for side, Y, r in (("a", A, rng[5]), ("b", B, rng[6])):
                hyper[f"mean_{side}"] = choose_kernel_and_ridge(kernels, Linear(), C, Y, rng=r)
        self._hyper = hyper
        return hyper

    def _c_grams(self, hp: dict, c_u: np.ndarray) -> list:
        h_c = hp["k_c"].bandwidth
        return [(f * h_c, RBF(f * h_c)(c_u, c_u)) for f in self.c_bandwidth_factors]

    def _prepare(self, a, b, c, keys=None):
        """The kernel blocks on anchors + new batch for each scheme in ``keys`` (default this test's),
        or None while warming up.

        Schemes ``"oracle"``, ``"pretrained"`` and ``"online-cme"`` use anchors drawn from the whole past and
        conditional mean embeddings fitted on the whole past (the anchors included). ``"online-gaussian"``
        splits the past at random: at most half of it carries the witness, the rest fits the Gaussian
        location models of ``A | C`` and ``B | C``, so that the fits do not depend on the anchors' noise.
        """
        if self._past is None or self._past[0].shape[0] < self.warmup:
            return None
        keys = (self._key,) if keys is None else tuple(dict.fromkeys(keys))
        A, B, C = self._past
        n = A.shape[0]
        s = n if self.n_anchors is None else min(n, self.n_anchors)
        anchors = np.sort(self._rng.choice(n, s, replace=False)) if s < n else np.arange(n)
        seed = int(self._rng.integers(2**31))
        order = self._rng.permutation(s)  # the anchors' folds
        hp = self._hyperparameters(A, B, C, seed, keys)
        blocks = {}
        in_sample = [k for k in keys if k != SPLIT]
        if in_sample:
            a_u, b_u, c_u = (np.concatenate([P[anchors], x]) for P, x in ((A, a), (B, b), (C, c)))
            cme_b = ConditionalMeanEmbedding(hp["k_c"], hp["k_b"], ridge=hp["ridge_b"]).fit(C, B)
            Kb = cme_b.centered_gram(c_u, b_u)  # (s + m, s + m)
            Kcs = self._c_grams(hp, c_u)
            for key in in_sample:
                if key == "oracle":
                    Ka = self.conditional.centered_gram(hp["k_a"], c_u, a_u, c_u, a_u)
                elif key == "pretrained":
                    if self._pretrained_cme is None:
                        pa, pc = self._pretrain
                        self._pretrained_cme = ConditionalMeanEmbedding(random_state=seed).fit(pc, pa)
                    Ka = self._pretrained_cme.centered_gram(c_u, a_u)
                else:
                    cme_a = ConditionalMeanEmbedding(hp["k_c"], hp["k_a"], ridge=hp["ridge_a"]).fit(C, A)
                    self._warn_if_confounded(C, A, hp, seed, n)
                    Ka = cme_a.centered_gram(c_u, a_u)
                blocks[key] = {"KaKb": Ka * Kb, "Kcs": Kcs, "s": s, "order": order}
        if SPLIT in keys:
            s2 = min(s, n // 2)
            perm = np.random.default_rng([seed, 7]).permutation(n)
            witness, fit = np.sort(perm[:s2]), perm[s2:]
            a_u, b_u, c_u = (np.concatenate([P[witness], x]) for P, x in ((A, a), (B, b), (C, c)))
            grams = []
            for Y, y_u, side in ((A, a_u, "a"), (B, b_u, "b")):
                model = GaussianConditional.estimate(C[fit], Y[fit], *hp[f"mean_{side}"])
                grams.append(model.centered_gram(hp[f"k_{side}"], c_u, y_u, c_u, y_u))
            blocks[SPLIT] = {
                "KaKb": grams[0] * grams[1],
                "Kcs": self._c_grams(hp, c_u),
                "s": s2,
                "order": order[order < s2],
            }
        return blocks

    def _warn_if_confounded(self, C, A, hp: dict, seed: int, n: int) -> None:
        """``estimator="cme"``: warn once when c explains much of a out of sample (checked at each
        refresh of the hyperparameters until it warns)."""
        if self._warned or hp["n"] != n:
            return
        explained = GaussianConditional.estimate(
            C, A, RBFLinear(hp["k_c"].bandwidth), random_state=seed
        ).explained_
        if explained >= CONFOUNDING_EXPLAINED:
            self._warned = True
            warnings.warn(
                ConfoundingWarning(
                    f"SKCI(estimator='cme'): c explains {explained:.0%} of a out of sample (from {n} past "
                    "samples); under confounding this strong the conditional mean embedding's bias makes the "
                    "test exceed its level (the skci-confounding reproduction); the default "
                    "estimator='gaussian' kept it"
                ),
                stacklevel=4,
            )

    def _bet(self, blocks: dict, m: int) -> None:
        """Pick k_C and lambda on the anchors, then bet on the new batch (columns s: of the blocks)."""
        blocks = blocks[self._key]
        s = blocks["s"]
        folds = [blocks["order"][i : i + m] for i in range(0, s, m)]
        best: tuple | None = None
        for bandwidth, Kc in blocks["Kcs"]:
            H = blocks["KaKb"] * Kc  # (s + m, s + m)
            HSS = H[:s, :s]
            normalizer = float(HSS.mean()) + self.eps if self.normalize else 1.0
            off = HSS.sum(0) - np.diag(HSS)  # (s,) sum over i != j
            sigma = math.sqrt(np.mean((off / (s - 1) / normalizer) ** 2) / m)
            gamma = shift_for(sigma) if self.shift else 0.0
            fold_v = np.array(
                [max(off[f].sum() / (len(f) * (s - 1)) / normalizer - gamma, -1.0) for f in folds]
            )
            if self._learned:
                lam = self._fraction.fit(fold_v).fraction()
                score = float(np.log1p(lam * fold_v).sum())
            else:
                lam, score = None, float(np.log1p(0.5 * fold_v).sum())
            if best is None or score > best[0]:
                raw = float(H[:s, s:].mean()) / normalizer
                best = (score, lam, raw, gamma, normalizer, bandwidth)
        assert best is not None  # c_bandwidth_factors is never empty
        _, lam, raw, gamma, normalizer, bandwidth = best
        self._process.step(max(raw - gamma, -1.0), fraction=lam)
        self._bet_n.append(self._n_seen + m)
        for key, value in zip(
            ("gamma", "normalizer", "raw_payoff", "c_bandwidth"),
            (gamma, normalizer, raw, bandwidth),
            strict=True,
        ):
            self._info[key].append(float(value))


ABLATION_KEYS = ("normalize", "shift", "betting", "model_x", "estimator")


def run_ablation(a, b, c, variants: dict, batch_size: int = 20, **common) -> dict[str, SequentialTestResult]:
    """Run several SKCI variants on one stream, sharing the (expensive) kernel computations.

    ``variants`` maps a name to overrides of ``normalize``, ``shift``, ``betting``, ``model_x`` and/or
    ``estimator`` (e.g. ``{"SKCI": {}, "no shift": {"shift": False}, "oracle": {"model_x": "oracle"}}``); ``common``
    holds the other :class:`SKCI` arguments (with ``conditional``/``pretrain`` when a variant needs them).
    The anchors, bandwidths and ridges are the first variant's; each variant gives the same result as
    its own :class:`SKCI` with the same ``random_state`` (the tests check this).
    """
    if not isinstance(variants, dict) or not variants:
        raise ValueError("variants must be a non-empty dict name -> overrides")
    for name, over in variants.items():
        if not isinstance(over, dict):
            raise TypeError(f"variants[{name!r}] must be a dict of overrides, got {over!r}")
        bad = set(over) - set(ABLATION_KEYS)
        if bad:
            raise ValueError(f"variants[{name!r}] may only override {ABLATION_KEYS}, got {sorted(bad)}")
    tests = {name: SKCI(**{**common, **over}) for name, over in variants.items()}
    a, b, c = as_matched_samples(a=a, b=b, c=c)
    batch_size = check_int(batch_size, "batch_size", 1)
    leader = next(iter(tests.values()))
    keys = [t._key for t in tests.values()]
    with threadpool_limits(limits=1, user_api="blas"):  # small matrices: see SKCI.run
        for start in range(0, a.shape[0], batch_size):
            batch = tuple(x[start : start + batch_size] for x in (a, b, c))
            blocks = leader._prepare(batch[0], batch[1], batch[2], keys=keys)
            for test in tests.values():
                if blocks is not None:
                    test._bet(blocks, batch[0].shape[0])
                test._append(*batch)
    return {name: test.result() for name, test in tests.items()}
