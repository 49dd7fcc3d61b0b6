"""Sufficiency from the zero-flow criterion: a held-out certificate and amortized Markov-blanket learning.

Standardize ``X`` and take the source ``eps ~ N(0, I)``; pair it with ``X`` (``M = (eps + X) / 2``,
``D = X - eps``) and condition on ``c``. The risk ``R(c) = min_v E ||v(M, c) - D||^2`` of the ``t = 1/2``
flow-matching regression obeys ``R(f(Y)) - R(Y) = E ||v*_Y - v*_f(Y)||^2 >= 0`` for any encoder ``f``
(``f(Y)`` is a function of ``Y``), with equality exactly when ``p(x | y) = p(x | f(y))``: ``f(Y)`` is
sufficient for ``X`` (the conditional form of the zero-flow criterion; the Gaussian source makes the
midpoint field determine the conditional law). :func:`sufficiency_certificate` estimates that gap on
held-out rows; :class:`ZeroFlowMarkovBlanket` learns, for every node ``i`` of a graph at once, gates
``g_ij`` on the other nodes that keep the flow-matching loss of ``X_i`` given the gated nodes low under an
L1 penalty on the gates: the nodes it keeps open score the Markov blanket.

The paper's code has no training loss; the loss above follows the paper's abstract and criterion, and
these parts are our design: the gates pass ``g w + (1 - g) xi`` with fresh noise ``xi ~ N(0, 1)`` (so a
closed gate carries no information and the network cannot undo a small gate by a large weight, which a
plain product ``g w`` allows), the amortization over nodes by a one-hot node code at the field's input
(as the authors' toy encoder gates by a one-hot mask), the optimizer and the defaults. The blanket learner
needs torch (``pip install icml-stats[deep]``).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from icml_stats.validation import (
    as_matched_samples,
    as_rng,
    check_int,
    check_real,
    check_seed,
    validate_features,
)
from icml_stats.zeroflow.velocity import MAX_HIDDEN, check_magnitude, seeded_velocity

__all__ = ["SufficiencyCertificate", "ZeroFlowMarkovBlanket", "sufficiency_certificate"]

MAX_NOISE = 10_000
MAX_STEPS = 10_000_000
MAX_BATCH = 1_000_000
FLOAT32_RANGE = 1e38  # lr, sparsity and gate_init enter float32 tensors (max ~3.4e38)


@dataclasses.dataclass(frozen=True)
class SufficiencyCertificate:
    """Held-out ``R(f(Y)) - R(Y)`` (``certificate``, ~0 when ``f(Y)`` is sufficient for ``X``, > 0 when it
    loses information about ``X``), its ``standard_error`` over held-out rows, the two held-out risks
    ``risk_encoded`` and ``risk_full``, and ``n_test``."""

    certificate: float
    standard_error: float
    risk_encoded: float
    risk_full: float
    n_test: int

    @property
    def z(self) -> float:
        """``certificate / standard_error`` (inf when the error is 0 and the certificate is not)."""
        if self.standard_error == 0:
            return 0.0 if self.certificate == 0 else float(np.sign(self.certificate) * np.inf)
        return self.certificate / self.standard_error


def _encode(encoder, y: np.ndarray) -> np.ndarray:
    if callable(encoder):
        f = encoder(y)
        try:
            out = np.asarray(f, dtype=float)
        except (TypeError, ValueError):
            out = None
        if out is not None and out.ndim == 1:
            out = out[:, None]  # one value per row: one column
        if out is None or out.ndim != 2 or len(out) != len(y) or not np.isfinite(out).all():
            raise ValueError(
                f"encoder(y) must return finite values, one row per row of y ({len(y)}), got shape {np.shape(f)}"
            )
        check_magnitude("encoder(y)", out)
        return out
    cols = np.asarray(encoder)
    if cols.dtype == bool:
        if cols.shape != (y.shape[1],):
            raise ValueError(
                f"encoder as a mask must have one bool per column of y ({y.shape[1]}), got {cols.shape}"
            )
        cols = np.flatnonzero(cols)
    if cols.ndim != 1 or (
        cols.size and (cols.dtype.kind not in "iu" or cols.min() < 0 or cols.max() >= y.shape[1])
    ):
        raise ValueError(
            f"encoder must be a callable y -> f(y), a bool mask or column indices in [0, {y.shape[1]}), got {encoder!r}"
        )
    return y[:, cols.astype(int)]  # an empty selection ([] is float) selects no column


def sufficiency_certificate(
    x,
    y,
    encoder,
    *,
    velocity="linear",
    n_noise: int = 4,
    test_size: float = 0.5,
    random_state=None,
) -> SufficiencyCertificate:
    """Held-out certificate that ``f(Y)`` is sufficient for ``X`` (see the module doc).

    ``x`` ``(n, d_x)`` and ``y`` ``(n, d_y)`` are matched rows; ``encoder`` is a callable ``y -> f(y)``, a
    bool mask or indices of ``y``'s columns (an empty selection tests independence of ``X`` and ``Y``).
    ``X`` is standardized by the training rows' moments; every row is paired with ``n_noise`` (at most
    10,000) source draws.
    Two velocities (``velocity``: a model name, a scikit-learn regressor or a ``MidpointVelocity``;
    ``"linear"`` is exact when ``X`` and ``Y`` are jointly Gaussian) are fitted on ``(M, f(y))`` and
    ``(M, y)``; the certificate is the mean held-out difference of their squared errors, its standard
    error taken over rows."""
    x, y = as_matched_samples(x=x, y=y)
    check_magnitude("x", x)
    check_magnitude("y", y)
    n_noise = check_int(n_noise, "n_noise", 1, MAX_NOISE)
    test_size = check_real(test_size, "test_size", "(0, 1)")
    rng = as_rng(random_state)
    n_test = round(test_size * len(x))
    if n_test < 2 or len(x) - n_test < 2:
        raise ValueError(
            f"the split needs at least 2 rows on each side: {len(x)} rows of x and y with test_size={test_size} give "
            f"{len(x) - n_test} to fit and {n_test} to test"
        )
    f = _encode(encoder, y)
    order = rng.permutation(len(x))
    train, test = order[n_test:], order[:n_test]
    mean, std = x[train].mean(0), x[train].std(0)
    z = (x - mean) / np.where(std > 0, std, 1.0)
    eps = rng.standard_normal((n_noise, *z.shape))
    m, d = (eps + z) / 2.0, z - eps  # (n_noise, n, d_x)

    def stack(rows, cond):
        return np.concatenate([m[:, rows].reshape(-1, z.shape[1]), np.tile(cond[rows], (n_noise, 1))], 1)

    losses = []
    for cond in (f, y):
        model = seeded_velocity(velocity, rng).fit(stack(train, cond), d[:, train].reshape(-1, z.shape[1]))
        err = model.predict(stack(test, cond)) - d[:, test].reshape(-1, z.shape[1])
        losses.append((err**2).sum(1).reshape(n_noise, n_test).mean(0))  # per held-out row
    diff = losses[0] - losses[1]
    return SufficiencyCertificate(
        float(diff.mean()),
        float(diff.std(ddof=1) / np.sqrt(n_test)),
        float(losses[0].mean()),
        float(losses[1].mean()),
        n_test,
    )


class ZeroFlowMarkovBlanket(BaseEstimator):
    """Amortized Markov-blanket learning with the zero-flow sufficiency loss (see the module doc).

    One field ``v(M, c_i, e_i)`` for all nodes: ``e_i`` the one-hot code of node ``i``, ``c_i`` the other
    nodes through their gates ``g_ij = sigmoid(L_ij)`` (node ``i`` itself masked to 0). Each step draws
    ``batch_size`` rows and trains every node on them: the loss is the mean over nodes of
    ``||v - D||^2 + sparsity * sum_j g_ij``.

    Parameters: ``hidden`` (width of the field's two SiLU layers), ``steps``, ``batch_size``, ``lr``
    (Adam), ``sparsity`` (the L1 weight on the gates), ``gate_init`` (starting logit of every gate: 2 is
    open), ``random_state`` (an int for reproducible fits: torch's generator is seeded from it).

    Fitted attributes: ``gates_`` ``(p, p)`` (``gates_[i, j]``: how much node ``i``'s field uses node
    ``j``; zero diagonal), ``blanket_scores_`` (the gates symmetrized, ``(g + g^T) / 2``), ``loss_curve_``
    (flow-matching loss per step), ``mean_``, ``scale_`` (the standardization), ``n_features_in_``.
    """

    def __init__(
        self,
        hidden: int = 128,
        steps: int = 2000,
        batch_size: int = 128,
        lr: float = 3e-3,
        sparsity: float = 0.02,
        gate_init: float = 2.0,
        random_state=None,
    ):
        self.hidden = hidden
        self.steps = steps
        self.batch_size = batch_size
        self.lr = lr
        self.sparsity = sparsity
        self.gate_init = gate_init
        self.random_state = random_state

    def fit(self, X, y=None):
        """Learn the gates from ``X`` ``(n, p)``, ``p >= 2`` nodes (``y`` is ignored)."""
        try:
            import torch
        except ImportError as err:  # pragma: no cover - the deep extra is installed in tests
            raise ImportError("ZeroFlowMarkovBlanket needs torch: pip install 'icml-stats[deep]'") from err
        hidden = check_int(self.hidden, "hidden", 1, MAX_HIDDEN)
        steps = check_int(self.steps, "steps", 1, MAX_STEPS)
        batch = check_int(self.batch_size, "batch_size", 1, MAX_BATCH)
        lr = check_real(self.lr, "lr", f"(0, {FLOAT32_RANGE:g}]")
        sparsity = check_real(self.sparsity, "sparsity", f"[0, {FLOAT32_RANGE:g}]")
        gate_init = check_real(self.gate_init, "gate_init", f"[-{FLOAT32_RANGE:g}, {FLOAT32_RANGE:g}]")
        seed = check_seed(self.random_state)
        x = validate_features(self, X, reset=True, ensure_min_samples=2, ensure_min_features=2)
        p = x.shape[1]
        with np.errstate(over="ignore", invalid="ignore"):
            self.mean_ = x.mean(0)
            std = x.std(0)
        if not (np.isfinite(self.mean_).all() and np.isfinite(std).all()):
            raise ValueError("X is too large in magnitude (its mean or spread overflows)")
        self.scale_ = np.where(std > 0, std, 1.0)
        data = torch.as_tensor((x - self.mean_) / self.scale_, dtype=torch.float32)
        gen = torch.Generator()
        if seed is None:
            gen.seed()
        else:
            gen.manual_seed(
                int(seed.randint(2**31)) if isinstance(seed, np.random.RandomState) else int(seed)
            )
        with torch.random.fork_rng(devices=[]):
            # the CPU generator only: torch.manual_seed would also reseed every CUDA device's generator,
            # which fork_rng(devices=[]) does not restore
            torch.default_generator.manual_seed(int(torch.randint(2**31, (1,), generator=gen)))
            field = torch.nn.Sequential(
                torch.nn.Linear(1 + 2 * p, hidden),
                torch.nn.SiLU(),
                torch.nn.Linear(hidden, hidden),
                torch.nn.SiLU(),
                torch.nn.Linear(hidden, 1),
            )
        logits = torch.nn.Parameter(torch.full((p, p), gate_init))
        off = 1.0 - torch.eye(p)  # node i never sees itself
        eye = torch.eye(p)
        opt = torch.optim.Adam([*field.parameters(), logits], lr=lr)
        curve = np.empty(steps)
        for step in range(steps):
            rows = data[torch.randint(len(data), (batch,), generator=gen)]  # (B, p)
            gates = torch.sigmoid(logits) * off  # (p, p): row i gates node i's inputs
            xi = torch.randn(batch, p, p, generator=gen)  # (B, p nodes, p inputs)
            cond = gates * rows[:, None, :] + (1.0 - gates) * xi * off  # (B, p, p)
            eps = torch.randn(batch, p, generator=gen)
            target = rows  # X_i for node i: (B, p)
            mid, diff = (eps + target) / 2.0, target - eps
            inputs = torch.cat([mid[..., None], cond, eye.expand(batch, p, p)], -1)  # (B, p, 1 + 2p)
            fit = ((field(inputs).squeeze(-1) - diff) ** 2).mean()
            loss = fit + sparsity * gates.sum(1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            curve[step] = fit.item()
        learnt = (torch.sigmoid(logits) * off).detach().numpy().astype(float)
        if not (np.isfinite(curve).all() and np.isfinite(learnt).all()):
            raise ValueError(
                f"ZeroFlowMarkovBlanket: the training became non-finite; lower lr (got {lr:g}) "
                f"or sparsity (got {sparsity:g})"
            )
        self.gates_ = learnt
        self.blanket_scores_ = (learnt + learnt.T) / 2.0
        self.loss_curve_ = curve
        return self

    def blanket(self, node: int, threshold: float = 0.5) -> np.ndarray:
        """The other nodes whose symmetrized score with ``node`` is at least ``threshold`` (sorted indices)."""
        check_is_fitted(self, "blanket_scores_")
        p = self.blanket_scores_.shape[0]
        node = check_int(node, "node", 0, p - 1)
        threshold = check_real(threshold, "threshold", "[0, 1]")
        keep = self.blanket_scores_[node] >= threshold
        keep[node] = False  # a node is not in its own blanket
        return np.flatnonzero(keep)
