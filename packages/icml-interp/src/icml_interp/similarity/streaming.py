"""Linear CKA over a probe set streamed in minibatches, without the ``n x n`` Gram matrices."""

from __future__ import annotations

import math

import numpy as np

from icml_interp.similarity._checks import as_matrix
from icml_interp.similarity._hsic import DEBIASED_MIN, Moments, u_centre
from icml_interp.validation import check_choice

ESTIMATORS = ("biased", "debiased", "minibatch")
_LARGEST = 1e60  # entries after the first batch's shift and scale: |x|^4 times any n stays finite


class StreamingCKA:
    """Linear CKA of two representations fed batch by batch (the same samples' rows of ``X`` and ``Y``).

    ``estimator``:

    - ``"biased"`` (default): exactly :func:`~icml_interp.similarity.linear_cka` of all the rows seen,
      from the running sums ``n``, ``sum x``, ``sum y``, ``X^T X``, ``Y^T Y``, ``X^T Y`` (memory
      ``O((d_x + d_y)^2)``, independent of ``n``): ``CKA = |C_xy|_F^2 / (|C_xx|_F |C_yy|_F)`` with
      ``C_xy = X^T Y - (sum x)(sum y)^T / n``.
    - ``"debiased"``: exactly ``linear_cka(X, Y, debiased=True)`` of all the rows seen (Song et al.'s
      unbiased HSIC written in sums over samples: also ``X^T r``, ``Y^T t``, ``sum r t``, ... with
      ``r_i = |x_i|^2``, ``t_i = |y_i|^2``).
    - ``"minibatch"``: Nguyen et al. (2021)'s minibatch CKA, ``mean_b HSIC_u(K_b, L_b) /
      sqrt(mean_b HSIC_u(K_b, K_b) mean_b HSIC_u(L_b, L_b))`` over the batches ``b`` (each needs at least 4
      rows); it depends on the batch size and is not the full-data value.

    Before accumulating, every row is shifted by the first batch's column means and divided by its largest
    centred entry (CKA does not change under either), so that data far from the origin keep their digits.

    Many layer pairs: keep one instance per pair, e.g. ``{(i, j): StreamingCKA() for i, j in pairs}``, and
    update each with the batch's layer activations.
    """

    def __init__(self, estimator: str = "biased"):
        self.estimator = check_choice(estimator, "estimator", ESTIMATORS)

    def reset(self) -> StreamingCKA:
        """Forget every batch seen."""
        for name in ("_moments", "_shift", "_widths", "_n", "_batches", "_sums"):
            self.__dict__.pop(name, None)
        return self

    @property
    def n_samples_(self) -> int:
        """The number of rows seen so far."""
        return int(self.__dict__.get("_n", 0))

    def update(self, X_batch, Y_batch) -> StreamingCKA:
        """Add one batch: ``X_batch`` ``(b, d_x)`` and ``Y_batch`` ``(b, d_y)`` (numpy arrays or torch
        tensors; the widths must stay the same from batch to batch). Returns ``self``."""
        x, y = as_matrix(X_batch, "X_batch"), as_matrix(Y_batch, "Y_batch")
        if len(x) != len(y):
            raise ValueError(
                f"X_batch and Y_batch must hold the same samples (rows), got {len(x)} and {len(y)} rows"
            )
        if self.estimator == "minibatch" and len(x) < DEBIASED_MIN:
            raise ValueError(
                f"X_batch and Y_batch must hold at least {DEBIASED_MIN} rows each for the minibatch "
                f"estimator (the unbiased HSIC divides by n - 3), got {len(x)}"
            )
        if "_shift" not in self.__dict__:
            self._shift = tuple(_shift_of(a) for a in (x, y))
            self._widths = (x.shape[1], y.shape[1])
            self._n = 0
            if self.estimator == "minibatch":
                self._sums = np.zeros(3)
                self._batches = 0
            else:
                self._moments = Moments(x.shape[1], y.shape[1], self.estimator == "debiased")
        for name, a, width in (("X_batch", x, self._widths[0]), ("Y_batch", y, self._widths[1])):
            if a.shape[1] != width:
                raise ValueError(f"{name} must have {width} columns (as the first batch), got {a.shape[1]}")
        (mx, sx), (my, sy) = self._shift
        with np.errstate(over="ignore"):
            x, y = (x - mx) / sx, (y - my) / sy
        for name, a in (("X_batch", x), ("Y_batch", y)):
            if not float(np.abs(a).max()) <= _LARGEST:  # NaN-safe; the fourth moments must fit in float64
                raise ValueError(
                    f"{name} is too large relative to the first batch (its sums overflow float64)"
                )
        if self.estimator == "minibatch":
            self._sums += _batch_hsic_u(x, y)
            self._batches += 1
        else:
            self._moments.add(x, y)
        self._n += len(x)
        return self

    def value(self) -> float:
        """The CKA of the batches seen so far (see the class docstring for each estimator)."""
        if self.n_samples_ == 0:
            raise ValueError("StreamingCKA.value: no batch seen yet; call update(X_batch, Y_batch) first")
        if self.estimator == "minibatch":
            hxy, hxx, hyy = self._sums / self._batches
            for name, h in (("X_batch", hxx), ("Y_batch", hyy)):
                if not h > 0:
                    raise ValueError(
                        f"{name} leaves minibatch CKA undefined: its mean unbiased HSIC is {h:.3g}"
                    )
            return float(np.clip(hxy / math.sqrt(hxx * hyy), -1.0, 1.0))
        minimum = DEBIASED_MIN if self.estimator == "debiased" else 2
        if self.n_samples_ < minimum:
            raise ValueError(
                f"StreamingCKA.value: the {self.estimator} estimator needs at least {minimum} rows in all, "
                f"got {self.n_samples_}"
            )
        names = ("X_batch", "Y_batch")
        if self.estimator == "debiased":
            return self._moments.debiased_cka(names)
        return self._moments.biased(names)

    def __repr__(self) -> str:
        return f"StreamingCKA(estimator={self.estimator!r}, n_samples_={self.n_samples_})"


def _shift_of(a: np.ndarray) -> tuple[np.ndarray, float]:
    """The first batch's column means and largest absolute centred entry (1 if it is constant)."""
    mean = a.mean(0)
    top = float(np.abs(a - mean).max())
    return mean, (top if top > 0 else max(float(np.abs(a).max()), 1.0))


def _batch_hsic_u(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``(HSIC_u(K, L), HSIC_u(K, K), HSIC_u(L, L))`` of one batch's linear kernels (Gram or feature form,
    whichever is cheaper; HSIC_u does not change when the batch is centred, which keeps the sums exact)."""
    x, y = x - x.mean(0), y - y.mean(0)
    n, d_x, d_y = len(x), x.shape[1], y.shape[1]
    if n * (d_x + d_y) < d_x * d_x + d_y * d_y + d_x * d_y:
        ku, lu = u_centre(x @ x.T), u_centre(y @ y.T)
        scale = n * (n - 3)
        return np.array([np.sum(ku * lu), np.sum(ku * ku), np.sum(lu * lu)]) / scale
    moments = Moments(d_x, d_y, True)
    moments.add(x, y)
    return np.array(moments.debiased_terms())
