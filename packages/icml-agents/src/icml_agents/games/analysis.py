"""Relating a pair outcome (cooperation, novelty) to the pair's representational similarity.

Pairs of models are not independent observations: the pairs (A, B) and (A, C) share model A. Both tests
here respect that.

- :func:`spearman`: Spearman's rho with average ranks for ties.
- :func:`pair_permutation_test`: a QAP (Mantel-style) test of rho between a pair outcome and pair
  similarity. The null permutes the model labels: rows and columns of the model-by-model similarity matrix
  are permuted jointly (Hubert 1987; Krackhardt 1988), which keeps every model's dependence structure.
- :func:`pair_regression`: OLS of the outcome on similarity and controls, with dyadic-cluster-robust
  standard errors (Fafchamps & Gubert 2007; Aronow, Samii & Assenova 2015) and a model-label permutation
  p-value for the similarity coefficient (Dekker, Krackhardt & Snijders 2007, double semi-partialling).

Inputs are per-pair values: a dict keyed by ``(model_i, model_j)`` with ``model_i < model_j`` (labels all
``str`` or all ``int``), or aligned lists with ``models_of_pair``, the list of those pairs. All arguments
must cover the same pairs, and the pairs must be every pair of the models (a complete design, as in the
paper's 276 = C(24, 2) pairs), since label permutations need the whole matrix.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from icml_agents.validation import check_choice, check_int, check_seed

__all__ = ["PermutationResult", "RegressionResult", "pair_permutation_test", "pair_regression", "spearman"]

Pair = tuple[Any, Any]
ALTERNATIVES = ("two-sided", "greater", "less")
_CHUNK = 1024  # permutations evaluated together: bounded memory for any n_permutations


# validation -------------------------------------------------------------------------------------------
def _vector(values: Any, name: str) -> np.ndarray:
    if isinstance(values, np.ndarray):
        if values.dtype.kind not in "fiu":
            raise TypeError(f"{name} must hold real numbers, got dtype {values.dtype}")
        arr = values.astype(np.float64)
    elif isinstance(values, (list, tuple)):
        for i, v in enumerate(values):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
                raise TypeError(f"{name}[{i}] must be a real number, got {v!r:.40}")
        arr = np.asarray(values, dtype=np.float64)
    else:
        raise TypeError(f"{name} must be a list or 1-D array of numbers, got {type(values).__name__}")
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite, got NaN or inf")
    return arr


def _label(value: Any, name: str) -> Any:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (str, numbers.Integral)):
        raise TypeError(f"{name}: a model label must be a str or an int, got {value!r:.40}")
    return value if isinstance(value, str) else int(value)


def _pair(key: Any, name: str) -> Pair:
    if not isinstance(key, tuple) or len(key) != 2:
        raise TypeError(f"{name} must be a (model_i, model_j) tuple, got {key!r:.60}")
    a, b = _label(key[0], name), _label(key[1], name)
    if type(a) is not type(b) or not a < b:
        raise ValueError(f"{name} must be a pair (model_i, model_j) with model_i < model_j, got {key!r:.60}")
    return (a, b)


def _pairs(models_of_pair: Any) -> list[Pair]:
    if isinstance(models_of_pair, (str, bytes)) or not isinstance(models_of_pair, (list, tuple)):
        raise TypeError(
            f"models_of_pair must be a list of (model_i, model_j) tuples, got {models_of_pair!r:.60}"
        )
    pairs = [_pair(k, f"models_of_pair[{i}]") for i, k in enumerate(models_of_pair)]
    if len(set(pairs)) != len(pairs):
        raise ValueError("models_of_pair must not repeat a pair")
    return pairs


def _per_pair(
    values: Any, name: str, pairs: list[Pair] | None, pairs_from: str
) -> tuple[list[Pair], np.ndarray]:
    """``values`` in the order of ``pairs`` (``None``: the order of the dict ``values``)."""
    if isinstance(values, Mapping):
        keys = [_pair(k, f"{name} key {k!r:.40}") for k in values]
        vals = _vector([values[k] for k in values], name)
        if pairs is None:
            return keys, vals
        table = dict(zip(keys, vals, strict=True))
        missing, extra = [p for p in pairs if p not in table], [k for k in keys if k not in set(pairs)]
        if missing or extra:
            raise ValueError(
                f"{name} must hold the same pairs as {pairs_from}: missing {missing[:3]}, extra {extra[:3]}"
            )
        return pairs, np.array([table[p] for p in pairs])
    if isinstance(values, (list, tuple, np.ndarray)) and not isinstance(values, str):
        if pairs is None:
            raise TypeError(f"{name} is a list: pass models_of_pair (its pairs) or a dict keyed by pair")
        vals = _vector(values, name)
        if len(vals) != len(pairs):
            raise ValueError(
                f"{name} must hold one value per pair of {pairs_from} ({len(pairs)}), got {len(vals)}"
            )
        return pairs, vals
    raise TypeError(
        f"{name} must be a dict keyed by (model_i, model_j) or a list, got {type(values).__name__}"
    )


def _align(
    named: list[tuple[str, Any]], models_of_pair: Any
) -> tuple[list[Pair], dict[str, np.ndarray], str]:
    pairs = None if models_of_pair is None else _pairs(models_of_pair)
    source = "models_of_pair"
    out = {}
    for name, values in named:
        got, out[name] = _per_pair(values, name, pairs, source)
        if pairs is None:
            pairs, source = got, name
    assert pairs is not None
    return pairs, out, source


def _complete(pairs: list[Pair], source: str) -> tuple[list[Any], np.ndarray, np.ndarray]:
    """The models (sorted) and each pair's two model indices; refuses an incomplete design."""
    if len({type(x) for p in pairs for x in p}) > 1:
        raise TypeError(f"{source}: model labels must be all str or all int")
    models = sorted({x for p in pairs for x in p})
    m = len(models)
    if m < 3:
        raise ValueError(f"{source} must cover at least 3 models (3 pairs), got {m} model(s)")
    if len(pairs) != m * (m - 1) // 2:
        have = set(pairs)
        missing = [(a, b) for i, a in enumerate(models) for b in models[i + 1 :] if (a, b) not in have]
        raise ValueError(
            f"{source} must hold every pair of its {m} models (label permutations need the whole matrix); "
            f"missing {missing[:3]}{' ...' if len(missing) > 3 else ''}"
        )
    index = {x: i for i, x in enumerate(models)}
    return models, np.array([index[a] for a, _ in pairs]), np.array([index[b] for _, b in pairs])


def average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n, tied values sharing the mean of their ranks."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    starts = np.cumsum(counts) - counts
    return (starts + (counts + 1) / 2.0)[inverse.reshape(-1)]


def _check_not_constant(values: np.ndarray, name: str) -> None:
    if np.ptp(values) == 0:
        raise ValueError(f"{name} is constant: a correlation or a slope on it is undefined")


def _p_value(null: np.ndarray, observed: float, alternative: str) -> float:
    tol = 1e-9 * max(1.0, abs(observed))
    if alternative == "two-sided":
        extreme = np.abs(null) >= abs(observed) - tol
    elif alternative == "greater":
        extreme = null >= observed - tol
    else:
        extreme = null <= observed + tol
    return float((1 + extreme.sum()) / (len(null) + 1))


def _permutations(rng: np.random.Generator, n_permutations: int, m: int):
    """Uniform random permutations of m labels, in chunks of at most ``_CHUNK`` rows."""
    done = 0
    while done < n_permutations:
        size = min(_CHUNK, n_permutations - done)
        yield np.argsort(rng.random((size, m)), axis=1)
        done += size


def _matrix(values: np.ndarray, i: np.ndarray, j: np.ndarray, m: int) -> np.ndarray:
    out = np.zeros((m, m))
    out[i, j] = values
    out[j, i] = values
    return out


# Spearman and the QAP test -------------------------------------------------------------------------------
def spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Spearman's rank correlation: the Pearson correlation of the average ranks (ties share the mean of
    their ranks). Refuses fewer than two values and a constant argument (rho is undefined)."""
    a = _vector(x, "x")
    b = _vector(y, "y")
    if len(a) < 2:
        raise ValueError(f"x must hold at least 2 values, got {len(a)}")
    if len(b) != len(a):
        raise ValueError(f"y must hold one value per value of x ({len(a)}), got {len(b)}")
    _check_not_constant(a, "x")
    _check_not_constant(b, "y")
    ra, rb = average_ranks(a), average_ranks(b)
    ca, cb = ra - ra.mean(), rb - rb.mean()
    return float(np.clip(ca @ cb / math.sqrt((ca @ ca) * (cb @ cb)), -1.0, 1.0))


@dataclass(frozen=True)
class PermutationResult:
    """A model-label permutation test: the observed ``statistic``, its add-one ``p_value``
    ((1 + #{null at least as extreme}) / (n_permutations + 1)) and the ``null`` statistics."""

    statistic: float
    p_value: float
    null: np.ndarray
    alternative: str
    n_permutations: int
    n_models: int
    n_pairs: int


def pair_permutation_test(
    pair_values: Mapping[Pair, float] | Sequence[float],
    pair_similarity: Mapping[Pair, float] | Sequence[float],
    *,
    models_of_pair: Sequence[Pair] | None = None,
    n_permutations: int = 999,
    alternative: str = "two-sided",
    seed: int | np.random.Generator = 0,
) -> PermutationResult:
    """QAP test of Spearman's rho between a pair outcome and pair similarity.

    The statistic is rho over the pairs. Each null draw permutes the model labels: with S the model-by-model
    similarity matrix and pi a uniform random permutation of the models, pair (i, j) gets S[pi(i), pi(j)];
    the outcomes stay. This keeps the dependence between pairs that share a model, which makes a plain
    shuffle of the pairs anti-conservative. ``alternative``: ``"two-sided"`` (|rho|), ``"greater"`` (rho > 0,
    e.g. similar pairs cooperate more) or ``"less"``. The draws are vectorized: the permuted similarities are
    a relabelling of the same values, so their ranks are the permuted ranks.
    """
    pairs, values, source = _align(
        [("pair_values", pair_values), ("pair_similarity", pair_similarity)], models_of_pair
    )
    n_permutations = check_int(n_permutations, "n_permutations", minimum=1, maximum=10**6)
    alternative = check_choice(alternative, "alternative", ALTERNATIVES)
    rng = check_seed(seed)
    models, i, j = _complete(pairs, source)
    y, s = values["pair_values"], values["pair_similarity"]
    _check_not_constant(y, "pair_values")
    _check_not_constant(s, "pair_similarity")
    statistic = spearman(y, s)
    ry, rs = average_ranks(y), average_ranks(s)
    cy = ry - ry.mean()
    scale = math.sqrt((cy @ cy) * ((rs - rs.mean()) @ (rs - rs.mean())))
    ranks = _matrix(rs, i, j, len(models))
    null = np.concatenate(
        [
            ((ranks[p[:, i], p[:, j]] - rs.mean()) @ cy) / scale
            for p in _permutations(rng, n_permutations, len(models))
        ]
    )
    return PermutationResult(
        statistic=statistic,
        p_value=_p_value(null, statistic, alternative),
        null=null,
        alternative=alternative,
        n_permutations=n_permutations,
        n_models=len(models),
        n_pairs=len(pairs),
    )


# regression ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RegressionResult:
    """OLS of a pair outcome on similarity and controls.

    ``names`` (``"intercept"``, ``"similarity"``, the controls) index ``coef``, ``se`` (dyadic-cluster
    robust), ``t`` (``coef / se``), ``p_dyadic`` (two-sided, normal reference) and ``se_classical``
    (homoskedastic, for comparison). ``p_permutation`` is the model-label permutation p-value of the
    similarity coefficient."""

    names: tuple[str, ...]
    coef: np.ndarray
    se: np.ndarray
    t: np.ndarray
    p_dyadic: np.ndarray
    se_classical: np.ndarray
    p_permutation: float
    r2: float
    n_pairs: int
    n_models: int
    n_permutations: int
    alternative: str

    def summary(self) -> str:
        """A plain-text table of the coefficients."""
        lines = [f"{'':<16}{'coef':>12}{'se (dyadic)':>14}{'t':>9}{'p (dyadic)':>12}"]
        for k, name in enumerate(self.names):
            lines.append(
                f"{name:<16}{self.coef[k]:>12.4g}{self.se[k]:>14.4g}{self.t[k]:>9.3f}{self.p_dyadic[k]:>12.4f}"
            )
        lines.append(
            f"similarity: model-label permutation p = {self.p_permutation:.4f} ({self.alternative}, "
            f"{self.n_permutations} permutations); n_pairs = {self.n_pairs}, n_models = {self.n_models}, "
            f"R^2 = {self.r2:.3f}"
        )
        return "\n".join(lines)


def _dyadic_meat(x: np.ndarray, e: np.ndarray, i: np.ndarray, j: np.ndarray, m: int) -> np.ndarray:
    """sum over pairs (d, d') sharing a model (d = d' included) of x_d e_d e_d' x_d'^T."""
    g = x * e[:, None]  # (n, k): each pair's score
    per_model = np.zeros((m, x.shape[1]))
    np.add.at(per_model, i, g)
    np.add.at(per_model, j, g)
    # a pair shares both of its models with itself, so the per-model sums count d = d' twice
    return per_model.T @ per_model - g.T @ g


def pair_regression(
    outcome: Mapping[Pair, float] | Sequence[float],
    similarity: Mapping[Pair, float] | Sequence[float],
    controls: Mapping[str, Mapping[Pair, float] | Sequence[float]] | None = None,
    models_of_pair: Sequence[Pair] | None = None,
    *,
    n_permutations: int = 999,
    alternative: str = "two-sided",
    seed: int | np.random.Generator = 0,
) -> RegressionResult:
    """OLS ``outcome ~ 1 + similarity + controls`` over model pairs, with pair-dependence-aware inference.

    ``controls`` maps a name to per-pair values (e.g. ``"perf_gap"``: |perf_i - perf_j|, ``"log_size_sum"``,
    ``"same_family"``: a 0/1 dummy). With X the (n, k) design, e the residuals, B = (X'X)^-1 and m models:

    - dyadic-cluster-robust covariance (Fafchamps & Gubert 2007; Aronow, Samii & Assenova 2015):
      V = c B M B with M = sum over pairs d, d' that share at least one model (d = d' included) of
      x_d e_d e_d' x_d'^T, computed as sum_models s_g s_g^T - sum_d x_d x_d^T e_d^2 where s_g sums x_d e_d
      over the pairs holding model g; c = m/(m - 1) * (n - 1)/(n - k), the small-sample factor of
      one-way clustering with m clusters (Cameron & Miller 2014). This estimate need not be positive
      semi-definite, and with few models or weak dyadic dependence it often is not (most draws of a
      12-model synthetic zoo in our tests); it is then repaired by zeroing its negative eigenvalues
      (Cameron, Gelbach & Miller 2011), computed with the (uncentred) columns scaled to a maximum absolute
      value of 1 so that the repair does not depend on the units, with a warning. With 3 models every pair
      shares a model with every other (one cluster): M is then (X'e)(X'e)^T = 0 for any data, so ``se``,
      ``t`` and ``p_dyadic`` are NaN, with a warning (``se_classical`` and ``p_permutation`` stand).
    - ``p_dyadic``: 2 (1 - Phi(|t|)) with t = coef / se, a normal reference that is asymptotic in the
      number of models. With few models it is anti-conservative: in our simulation with model effects in
      both the outcome and the similarity (null true, alpha = 0.05) it rejected 35% of the time with 12
      models and 17% with 24 (the classical p: 31% and 52%), while ``p_permutation`` stayed at 4-6%.
      Report ``p_permutation`` for the similarity coefficient.
    - ``p_permutation`` for similarity: double semi-partialling (Dekker, Krackhardt & Snijders 2007). The
      similarity residualized on the intercept and controls is put in its model-by-model matrix, model
      labels are permuted (rows and columns jointly), the outcome is regressed again, and the similarity
      coefficient's classical t-statistic is compared with the observed one (add-one p-value). Valid with
      controls that are correlated with similarity.

    The fit centres the columns other than the intercept and scales them to a maximum absolute value of 1
    (the results are translation and scale equivariant and returned in the original units). Refuses a
    constant similarity, a constant or collinear control and a design with no residual degrees of freedom.
    """
    if controls is None:
        controls = {}
    if not isinstance(controls, Mapping):
        raise TypeError(
            f"controls must be None or a dict of name -> per-pair values, got {type(controls).__name__}"
        )
    for name in controls:
        if not isinstance(name, str) or not name or name in ("intercept", "similarity"):
            raise ValueError(
                f"controls keys must be names other than 'intercept' and 'similarity', got {name!r}"
            )
    named = [("outcome", outcome), ("similarity", similarity)]
    named += [(f"controls[{name!r}]", values) for name, values in controls.items()]
    pairs, values, source = _align(named, models_of_pair)
    n_permutations = check_int(n_permutations, "n_permutations", minimum=1, maximum=10**6)
    alternative = check_choice(alternative, "alternative", ALTERNATIVES)
    rng = check_seed(seed)
    models, i, j = _complete(pairs, source)
    m, n = len(models), len(pairs)
    names = ("intercept", "similarity", *controls)
    k = len(names)
    if n - k < 1:
        raise ValueError(f"controls: {k} coefficients need more than {k} pairs, got {n}")
    y = values["outcome"]
    if np.ptp(y) == 0:
        raise ValueError("outcome is constant: there is nothing to explain")
    _check_not_constant(values["similarity"], "similarity")
    raw = np.column_stack([np.ones(n), values["similarity"], *(values[f"controls[{c!r}]"] for c in controls)])
    scale = np.abs(raw).max(axis=0)
    scale[scale == 0] = 1.0
    y_scale = float(np.abs(y).max()) or 1.0
    # the fit uses centred columns, each scaled to max |x| = 1: an offset of a column then moves only the
    # intercept (uncentred, an offset of 1e6 made X'X so ill-conditioned that it moved the slopes)
    centre = raw.mean(axis=0)
    centre[0] = 0.0
    x, ys = raw - centre, y / y_scale
    centred_scale = np.abs(x).max(axis=0)
    centred_scale[centred_scale == 0] = 1.0
    x = x / centred_scale
    if np.linalg.matrix_rank(x) < k:
        raise ValueError(
            "controls: a control is constant or collinear with the others (the design is rank-deficient)"
        )

    bread = np.linalg.inv(x.T @ x)
    beta = bread @ (x.T @ ys)
    e = ys - x @ beta
    factor = m / (m - 1) * (n - 1) / (n - k)
    cov = factor * bread @ _dyadic_meat(x, e, i, j, m) @ bread
    # back to the uncentred columns scaled to max |x| = 1: beta_uncentred = to_uncentred @ beta
    to_uncentred = np.diag(scale / centred_scale)
    to_uncentred[0, 1:] = -centre[1:] / centred_scale[1:]
    beta = to_uncentred @ beta
    bread = to_uncentred @ bread @ to_uncentred.T
    cov = to_uncentred @ cov @ to_uncentred.T
    sse = float(e @ e)
    se_classical = np.sqrt(sse / (n - k) * np.diag(bread))
    coef = beta * y_scale / scale
    if m == 3:
        # each pair shares a model with both others: the meat is (X'e)(X'e)^T, 0 by the normal equations,
        # so the estimate was 0 or rounding noise for any data (se 1.7e-08, p_dyadic 0 for pure noise)
        warnings.warn(
            "with 3 models every pair shares a model with every other pair (one cluster): the dyadic-robust "
            "covariance is 0 for any data, so se, t and p_dyadic are NaN; use p_permutation or se_classical",
            RuntimeWarning,
            stacklevel=2,
        )
        se_out, t, p_dyadic = (np.full(k, np.nan) for _ in range(3))
    else:
        cov = (cov + cov.T) / 2
        eigval, eigvec = np.linalg.eigh(cov)
        if eigval.min() < -1e-12 * max(1.0, float(eigval.max())):
            warnings.warn(
                "the dyadic-robust covariance is not positive semi-definite; its negative eigenvalues were set to 0",
                RuntimeWarning,
                stacklevel=2,
            )
        # rebuilt only to repair: that rounds each entry by ~eps * the largest eigenvalue
        if eigval.min() < 0:
            cov = (eigvec * np.clip(eigval, 0.0, None)) @ eigvec.T
        se = np.sqrt(np.clip(np.diag(cov), 0.0, None))
        se_out = se * y_scale / scale
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(se > 0, beta / np.where(se > 0, se, 1.0), np.sign(beta) * np.inf)
        if not np.isfinite(t).all():
            warnings.warn(
                "the fit is exact or a coefficient has no residual variation: its standard error is 0 and its "
                "t-statistic infinite",
                RuntimeWarning,
                stacklevel=2,
            )
        p_dyadic = np.array([math.erfc(abs(v) / math.sqrt(2.0)) if np.isfinite(v) else 0.0 for v in t])
    sst = float(((ys - ys.mean()) ** 2).sum())
    r2 = 1.0 - sse / sst if sst > 0 else 1.0

    # double semi-partialling: permute the similarity's residual on the controls, by model labels
    q, _ = np.linalg.qr(np.delete(x, 1, axis=1))  # (n, k-1): the intercept and the controls
    resid = x[:, 1] - q @ (q.T @ x[:, 1])
    y_tilde = ys - q @ (q.T @ ys)

    def t_stats(r: np.ndarray) -> np.ndarray:  # r: (P, n) permuted residualized similarities
        r = r - (r @ q) @ q.T
        rr = (r * r).sum(axis=1)
        ry = r @ y_tilde
        ok = rr > 1e-12 * max(1.0, float(resid @ resid))
        b = np.where(ok, ry / np.where(ok, rr, 1.0), 0.0)
        rss = np.maximum(y_tilde @ y_tilde - b * ry, 1e-300)
        return np.where(ok, b / np.sqrt(rss / (n - k) / np.where(ok, rr, 1.0)), 0.0)

    observed = float(t_stats(resid[None, :])[0])
    resid_matrix = _matrix(resid, i, j, m)
    null = np.concatenate(
        [t_stats(resid_matrix[p[:, i], p[:, j]]) for p in _permutations(rng, n_permutations, m)]
    )
    return RegressionResult(
        names=names,
        coef=coef,
        se=se_out,
        t=t,
        p_dyadic=p_dyadic,
        se_classical=se_classical * y_scale / scale,
        p_permutation=_p_value(null, observed, alternative),
        r2=float(r2),
        n_pairs=n,
        n_models=m,
        n_permutations=n_permutations,
        alternative=alternative,
    )
