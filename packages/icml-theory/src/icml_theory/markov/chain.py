"""Mixture-of-lags Markov chains: the high-order task whose Bayes-optimal predictor is known in closed form.

The next token depends on the tokens ``lags[i]`` steps back, each through its own transition table, mixed
with ``weights``. ``kind="linear"`` mixes the probabilities (a mixture transition distribution, Raftery
1985): with probability ``weights[i]`` the token follows ``transitions[i]`` from ``x_{t - lags[i]}``,

    P(x_t = y | past) = sum_i weights[i] * transitions[i][x_{t - lags[i]}, y].

``kind="geometric"`` (the default) mixes their logarithms, a normalized weighted product,

    P(x_t = y | past) ∝ prod_i transitions[i][x_{t - lags[i]}, y] ** weights[i],

which a softmax-output transformer whose heads each copy one lag represents exactly.

The conditional depends on the past only through the tokens at the lags, so the Bayes-optimal predictor is
this formula and its expected log loss is the chain's entropy rate. With a small vocabulary the stationary
distribution of the window of the last ``order = max(lags)`` tokens is found exactly by power iteration on
the ``n_states ** order`` windows; from it :meth:`MixtureOfLagsChain.partial_loss` gives the Bayes loss of
predictors that see only some of the lags (the misspecified model classes the trained transformer passes
through).

The exact task of the paper (Yüksel, Alvarez Lucendo, Flammarion, arXiv 2602.19143) was not available to
us; this mixture form is our reconstruction of "a high-order Markov chain whose positions have different
statistical importance".
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from scipy import stats

from icml_theory.validation import as_array, check_choice, check_int, check_real, check_seed

ENUMERATION_LIMIT = 2**24  # n_states ** (order + 1) entries at most for the exact (enumerated) quantities


def _check_lags(lags) -> tuple[int, ...]:
    try:
        values = tuple(lags)
    except TypeError:
        raise TypeError(f"lags must be a sequence of integers >= 1, got {lags!r}") from None
    if not values:
        raise ValueError("lags must hold at least one lag (an integer >= 1), got an empty sequence")
    out = tuple(check_int(v, "lags", minimum=1) for v in values)
    if len(set(out)) != len(out):
        raise ValueError(f"lags must be distinct, got {out}")
    return out


def _check_weights(weights, n: int) -> np.ndarray:
    w = as_array(weights, "weights", "(0, 1]", "mixture weights").ravel()
    if w.size != n:
        raise ValueError(f"weights must hold one weight per lag ({n}), got {w.size}")
    if abs(w.sum() - 1.0) > 1e-9:
        raise ValueError(f"weights must sum to 1, got {w.tolist()} (sum {w.sum():.12g})")
    return w / w.sum()


@dataclass(frozen=True)
class ChiSquareResult:
    """Pearson's test of the empirical transition counts against the chain's conditional probabilities."""

    statistic: float
    dof: int
    p_value: float
    cells: int  # (window, next token) cells with an expected count >= min_expected


class MixtureOfLagsChain:
    """A mixture-of-lags Markov chain over ``n_states`` tokens (``kind``: ``"geometric"`` or ``"linear"``,
    see the module docstring).

    ``transitions`` (shape ``(len(lags), n_states, n_states)``, rows summing to 1) are drawn from a symmetric
    Dirichlet(``concentration``) with ``seed`` when not given. ``weights`` must be positive and sum to 1.
    """

    def __init__(
        self,
        n_states: int,
        lags=(1, 3, 6),
        weights=(0.6, 0.3, 0.1),
        transitions=None,
        concentration: float = 1.0,
        seed: int = 0,
        kind: str = "geometric",
    ):
        self.kind = check_choice(kind, "kind", ("geometric", "linear"))
        self.n_states = check_int(n_states, "n_states", minimum=2)
        self.lags = _check_lags(lags)
        self.weights = _check_weights(weights, len(self.lags))
        self.order = max(self.lags)
        if transitions is None:
            alpha = check_real(concentration, "concentration", "(0, inf)")
            rng = np.random.default_rng(check_seed(seed))
            shape = (len(self.lags), self.n_states)
            transitions = rng.dirichlet(np.full(self.n_states, alpha), size=shape)
        t = as_array(transitions, "transitions", "[0, 1]", "probabilities")
        expected = (len(self.lags), self.n_states, self.n_states)
        if t.shape != expected:
            raise ValueError(f"transitions must have shape {expected} (lag, from, to), got {t.shape}")
        if not np.allclose(t.sum(-1), 1.0, atol=1e-9):
            raise ValueError("transitions must hold probability rows: each transitions[i, a, :] sums to 1")
        if self.kind == "geometric" and not np.all(t > 0):
            raise ValueError("transitions must be positive for kind='geometric' (it mixes their logarithms)")
        self.transitions = t / t.sum(-1, keepdims=True)
        self._stationary: np.ndarray | None = None

    # ------------------------------------------------------------------ prediction
    def _windows(self, windows, name: str = "windows") -> np.ndarray:
        w = np.asarray(windows)
        if w.ndim < 1 or w.shape[-1] != self.order or not np.issubdtype(w.dtype, np.integer):
            raise ValueError(
                f"{name} must be an integer array whose last axis holds the last order = {self.order} tokens "
                f"(oldest first), got shape {w.shape} and dtype {w.dtype}"
            )
        if w.size and (w.min() < 0 or w.max() >= self.n_states):
            raise ValueError(f"{name} must hold tokens in [0, {self.n_states}), got {w.min()}..{w.max()}")
        return w

    def _sequences(self, sequences) -> np.ndarray:
        """``sequences`` as a 2-d integer array longer than ``order`` with tokens in ``[0, n_states)``."""
        x = np.asarray(sequences)
        if x.ndim != 2 or x.shape[1] <= self.order or not np.issubdtype(x.dtype, np.integer):
            raise ValueError(
                f"sequences must be a 2-d integer array longer than order = {self.order}, got shape {x.shape} "
                f"and dtype {x.dtype}"
            )
        if x.min() < 0 or x.max() >= self.n_states:
            raise ValueError(f"sequences must hold tokens in [0, {self.n_states}), got {x.min()}..{x.max()}")
        return x

    def _mix(self, rows: list[np.ndarray]) -> np.ndarray:
        """The next-token distribution from each lag's transition row (broadcast together)."""
        if self.kind == "linear":
            return sum(weight * row for weight, row in zip(self.weights, rows, strict=True))
        with np.errstate(divide="ignore"):
            log = sum(weight * np.log(row) for weight, row in zip(self.weights, rows, strict=True))
        log = log - log.max(axis=-1, keepdims=True)
        p = np.exp(log)
        return p / p.sum(-1, keepdims=True)

    def next_distribution(self, windows) -> np.ndarray:
        """The Bayes-optimal next-token distribution ``(..., n_states)`` after each window ``(..., order)``."""
        w = self._windows(windows)
        return self._mix(
            [table[w[..., self.order - lag]] for lag, table in zip(self.lags, self.transitions, strict=True)]
        )

    def bayes_log_loss(self, sequences) -> np.ndarray:
        """The Bayes-optimal predictor's log loss (nats) of every token at position >= ``order``:
        shape ``(n_sequences, length - order)``."""
        x = self._sequences(sequences)
        windows = np.lib.stride_tricks.sliding_window_view(x[:, :-1], self.order, axis=1)
        probs = self.next_distribution(windows)
        picked = np.take_along_axis(probs, x[:, self.order :, None], axis=-1)[..., 0]
        return -np.log(picked)

    def partial_log_loss(self, sequences, lags_subset) -> np.ndarray:
        """The log loss of :meth:`partial_predictor` on each token at position >= ``order`` of ``sequences``:
        shape ``(n_sequences, length - order)``; the same positions as :meth:`bayes_log_loss`."""
        x = self._sequences(sequences)
        table = self.partial_predictor(lags_subset)
        subset = sorted(tuple(lags_subset), reverse=True)
        index = (*tuple(x[:, self.order - lag : x.shape[1] - lag] for lag in subset), x[:, self.order :])
        return -np.log(table[index])

    # ------------------------------------------------------------------ sampling
    def sample(self, n_sequences: int, length: int, seed: int | np.random.Generator = 0, burn_in: int = 64):
        """``n_sequences`` sequences of ``length`` tokens (int64), each after ``burn_in`` discarded steps
        from uniform initial tokens (the chains mix fast: the default leaves them stationary to float
        precision for Dirichlet transitions; raise it for nearly deterministic ones)."""
        n = check_int(n_sequences, "n_sequences", minimum=1)
        length = check_int(length, "length", minimum=1)
        burn_in = check_int(burn_in, "burn_in", minimum=0)
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(check_seed(seed))
        total = self.order + burn_in + length
        x = np.empty((n, total), dtype=np.int64)
        x[:, : self.order] = rng.integers(0, self.n_states, size=(n, self.order))
        for t in range(self.order, total):
            cdf = np.cumsum(self.next_distribution(x[:, t - self.order : t]), axis=-1)
            x[:, t] = np.minimum((rng.random(n)[:, None] > cdf).sum(-1), self.n_states - 1)
        return x[:, total - length :]

    # ------------------------------------------------------------------ exact quantities (enumeration)
    def _check_enumerable(self) -> None:
        size = self.n_states ** (self.order + 1)
        if size > ENUMERATION_LIMIT:
            raise ValueError(
                f"exact enumeration needs n_states ** (order + 1) = {size} entries, above {ENUMERATION_LIMIT}: "
                "use a smaller vocabulary or order, or Monte-Carlo estimates (bayes_log_loss on samples)"
            )

    def _conditional(self) -> np.ndarray:
        """P(next | window) as an array of shape ``(n_states,) * order + (n_states,)``."""
        k, m = self.n_states, self.order
        rows = []
        for lag, table in zip(self.lags, self.transitions, strict=True):
            shape = [1] * (m + 1)
            shape[m - lag], shape[m] = k, k
            rows.append(table.reshape(shape))
        return np.broadcast_to(self._mix(rows), (k,) * (m + 1))

    def stationary(self, tol: float = 1e-13, max_iter: int = 100_000) -> np.ndarray:
        """The stationary distribution of the window of the last ``order`` tokens, shape
        ``(n_states,) * order`` (axis 0 the oldest), by power iteration (exact to ``tol`` in total variation).
        """
        if self._stationary is not None:
            return self._stationary
        self._check_enumerable()
        cond = self._conditional()
        p = np.full((self.n_states,) * self.order, float(self.n_states) ** -self.order)
        for _ in range(max_iter):
            new = (p[..., None] * cond).sum(axis=0)
            change = np.abs(new - p).sum()
            p = new / new.sum()
            if change < tol:
                break
        else:
            raise RuntimeError(
                f"the power iteration did not converge in {max_iter} steps (change {change:.2e}); the chain "
                "may be periodic or reducible (transitions with zeros)"
            )
        self._stationary = p
        return p

    def _joint(self, lags_subset) -> tuple[np.ndarray, tuple[int, ...]]:
        subset = _check_lags(lags_subset) if len(tuple(lags_subset)) else ()
        unknown = [lag for lag in subset if lag > self.order]
        if unknown:
            raise ValueError(f"lags_subset holds lags beyond the chain's order {self.order}: {unknown}")
        joint = self.stationary()[..., None] * self._conditional()
        keep = sorted(self.order - lag for lag in subset)
        drop = tuple(a for a in range(self.order) if a not in keep)
        return joint.sum(axis=drop), tuple(sorted(subset, reverse=True))

    def partial_joint(self, lags_subset) -> np.ndarray:
        """The stationary joint distribution of the tokens at ``lags_subset`` and the next token: shape
        ``(n_states,) * len(lags_subset) + (n_states,)``, axes ordered oldest lag first."""
        return self._joint(lags_subset)[0]

    def partial_predictor(self, lags_subset) -> np.ndarray:
        """The Bayes-optimal next-token distribution given only the tokens at ``lags_subset``: shape
        ``(n_states,) * len(lags_subset) + (n_states,)``, axes ordered oldest lag first."""
        joint, _ = self._joint(lags_subset)
        total = joint.sum(-1, keepdims=True)
        return np.divide(joint, total, out=np.full_like(joint, 1.0 / self.n_states), where=total > 0)

    def partial_loss(self, lags_subset) -> float:
        """The expected log loss (nats) of :meth:`partial_predictor`: ``H(x_t | x_{t - l}, l in subset)``
        under the stationary distribution. The empty subset gives the marginal entropy."""
        joint, _ = self._joint(lags_subset)
        cond = joint / np.maximum(joint.sum(-1, keepdims=True), 1e-300)
        mask = joint > 0
        return float(-(joint[mask] * np.log(cond[mask])).sum())

    def entropy_rate(self) -> float:
        """The entropy rate (nats per token): the Bayes-optimal predictor's expected log loss."""
        cond = self._conditional()
        p = self.stationary()
        with np.errstate(divide="ignore", invalid="ignore"):
            h = -np.where(cond > 0, cond * np.log(cond), 0.0).sum(-1)
        return float((p * h).sum())

    def stage_losses(self) -> dict[tuple[int, ...], float]:
        """The Bayes losses of the nested predictors that add the lags in decreasing weight order:
        ``{(): H(x), (l1,): ..., (l1, l2): ..., all lags: entropy rate}``."""
        order = [self.lags[i] for i in np.argsort(-self.weights, kind="stable")]
        return {tuple(order[:k]): self.partial_loss(order[:k]) for k in range(len(order) + 1)}

    # ------------------------------------------------------------------ checks
    def transition_chisquare(self, sequences, min_expected: float = 5.0) -> ChiSquareResult:
        """Pearson's chi-square test of the empirical (window at the lags, next token) counts of
        ``sequences`` against the chain's probabilities. Cells with an expected count below
        ``min_expected`` are pooled per window into one cell."""
        x = self._sequences(sequences)
        k = self.n_states
        lag_tokens = [x[:, self.order - lag : x.shape[1] - lag] for lag in self.lags]
        window_id = np.zeros(lag_tokens[0].shape, dtype=np.int64)
        for tokens in lag_tokens:
            window_id = window_id * k + tokens
        nxt = x[:, self.order :]
        counts = np.bincount((window_id * k + nxt).ravel(), minlength=k ** (len(self.lags) + 1))
        counts = counts.reshape(-1, k).astype(float)
        combos = np.array(list(itertools.product(range(k), repeat=len(self.lags))))
        probs = self._mix([table[combos[:, i]] for i, table in enumerate(self.transitions)])
        expected = counts.sum(1, keepdims=True) * probs
        statistic, dof, cells = 0.0, 0, 0
        for obs, exp in zip(counts, expected, strict=True):
            big = exp >= min_expected
            pooled_obs, pooled_exp = obs[~big].sum(), exp[~big].sum()
            o = np.append(obs[big], pooled_obs) if pooled_exp > 0 else obs[big]
            e = np.append(exp[big], pooled_exp) if pooled_exp > 0 else exp[big]
            if e.size < 2 or e.sum() < min_expected:
                continue
            statistic += float(((o - e) ** 2 / e).sum())
            dof += e.size - 1
            cells += int(big.sum())
        if dof == 0:
            raise ValueError("sequences are too short for the test: no window has enough expected counts")
        return ChiSquareResult(statistic, dof, float(stats.chi2.sf(statistic, dof)), cells)
