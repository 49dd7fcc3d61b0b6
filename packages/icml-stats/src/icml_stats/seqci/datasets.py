"""Seeded conditional-independence benchmarks with known conditionals.

Each generator returns a :class:`CIData` with ``a (n, 1)``, ``b (n, 1)``, ``c (n, d)``, the true
conditional mean ``a_mean = E[A | C]`` and standard deviation ``a_std`` (for the oracle Model-X mode)
and :meth:`CIData.conditional`, a :class:`~icml_stats.seqci.kernels.GaussianConditional` of ``A | C``.

* :func:`gaussian_ci` (the Gaussian CI benchmark of Shaer et al., used by SKCI):
  ``C ~ N(0, I_d)``, ``A = C.v + N(0, 1)``, ``B = (C.u)^2 + effect * A + N(0, 1)``; ``u, v`` are drawn
  once per ``data_seed``. H0 ``A _||_ B | C`` holds iff ``effect == 0``. Our own choice: ``u, v ~ N(0, I_d / d)``
  (the official code draws ``N(0, I_d)``), so that ``C.u`` and ``C.v`` have variance about 1 for every ``d``
  and the effect size means the same thing in every dimension.
* :func:`confounded_ci` (our own, for the confounding grid): ``C ~ N(0, I_d)``, ``A = C.w + N(0, 1)``,
  ``B = C.w + effect * A + N(0, 1)`` with ``|w| = strength`` in a random direction: under H0 A and B
  are independent given C but correlated through it, ``corr(A, B) = strength^2 / (strength^2 + 1)``.
* :func:`sinusoidal_ci` (the "CI hardness" family of the SKCI code): ``C ~ N(0, I_d)``,
  ``A = cos(C_i) + noise * e_A``, ``B = exp(C_j) + noise * e_B``, with ``(e_A, e_B)`` standard normal with
  correlation ``r = effect * sin(freq * C_k)`` (``effect = 0``: H0). Higher ``freq`` makes the dependence
  oscillate faster in ``C_k`` and harder to detect. The factor ``effect`` is our own addition (the
  official code fixes ``r = sin(freq * C_k)`` under the alternative).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from icml_stats.seqci.kernels import GaussianConditional
from icml_stats.validation import check_int, check_real

MAX_SIZE = 10**8  # entries of c = n x d: 800 MB of float64, more than any benchmark here needs


def check_size(n: int, d: int) -> None:
    """Refuse a sample ``c (n, d)`` too large to allocate before numpy tries (a MemoryError otherwise)."""
    if n * d > MAX_SIZE:
        raise ValueError(f"n * d must be at most {MAX_SIZE:g} (the entries of c), got n = {n}, d = {d}")


@dataclass(frozen=True, eq=False)
class CIData:
    a: np.ndarray
    b: np.ndarray
    c: np.ndarray
    a_mean: np.ndarray
    a_std: float
    mean_fn: Callable[[np.ndarray], np.ndarray]  # c (n, d) -> E[A | C = c] (n, 1)

    def conditional(self) -> GaussianConditional:
        """The true ``A | C`` (Gaussian), for oracle mode."""
        return GaussianConditional(self.mean_fn, self.a_std)

    def __len__(self) -> int:
        return self.a.shape[0]


def gaussian_ci(n: int, d: int = 5, effect: float = 0.0, seed: int = 0, data_seed: int = 0) -> CIData:
    """The Gaussian CI benchmark; ``seed`` draws the samples, ``data_seed`` the directions ``u, v``."""
    n, d, effect = (
        check_int(n, "n", 1, MAX_SIZE),
        check_int(d, "d", 1, MAX_SIZE),
        check_real(effect, "effect"),
    )
    seed, data_seed = check_int(seed, "seed", 0), check_int(data_seed, "data_seed", 0)
    check_size(n, d)
    dirs = np.random.default_rng([data_seed, 7919])
    v = dirs.standard_normal(d) / np.sqrt(d)
    u = dirs.standard_normal(d) / np.sqrt(d)
    rng = np.random.default_rng([seed, data_seed, 104729])
    c = rng.standard_normal((n, d))
    a_mean = (c @ v)[:, None]
    a = a_mean + rng.standard_normal((n, 1))
    b = (c @ u)[:, None] ** 2 + effect * a + rng.standard_normal((n, 1))

    def mean_fn(cc):
        return (np.asarray(cc, dtype=float) @ v)[:, None]

    return CIData(a=a, b=b, c=c, a_mean=a_mean, a_std=1.0, mean_fn=mean_fn)


def confounded_ci(
    n: int, d: int = 5, strength: float = 1.5, effect: float = 0.0, seed: int = 0, data_seed: int = 0
) -> CIData:
    """A and B driven by the same linear function of C: ``seed`` draws the samples, ``data_seed`` the
    direction of ``w`` (``|w| = strength``)."""
    n, d = check_int(n, "n", 1, MAX_SIZE), check_int(d, "d", 1, MAX_SIZE)
    strength, effect = check_real(strength, "strength", "[0, inf)"), check_real(effect, "effect")
    seed, data_seed = check_int(seed, "seed", 0), check_int(data_seed, "data_seed", 0)
    check_size(n, d)
    direction = np.random.default_rng([data_seed, 6151]).standard_normal(d)
    w = strength * direction / np.linalg.norm(direction)
    rng = np.random.default_rng([seed, data_seed, 3571])
    c = rng.standard_normal((n, d))
    a_mean = (c @ w)[:, None]
    a = a_mean + rng.standard_normal((n, 1))
    b = a_mean + effect * a + rng.standard_normal((n, 1))

    def mean_fn(cc):
        return (np.asarray(cc, dtype=float) @ w)[:, None]

    return CIData(a=a, b=b, c=c, a_mean=a_mean, a_std=1.0, mean_fn=mean_fn)


def sinusoidal_ci(
    n: int,
    d: int = 1,
    effect: float = 0.0,
    freq: float = 1.0,
    noise: float = 0.1,
    seed: int = 0,
    index_a: int = 0,
    index_b: int = 0,
    index_r: int = 0,
) -> CIData:
    """The sinusoidal CI-hardness family; ``index_*`` pick the coordinates of ``C`` that drive A, B and r."""
    n, d = check_int(n, "n", 1, MAX_SIZE), check_int(d, "d", 1, MAX_SIZE)
    check_size(n, d)
    seed = check_int(seed, "seed", 0)
    freq = check_real(freq, "freq")
    effect = check_real(effect, "effect", "[-1, 1]")  # it scales a correlation
    index_a, index_b, index_r = (
        check_int(i, name, 0, d - 1)
        for i, name in ((index_a, "index_a"), (index_b, "index_b"), (index_r, "index_r"))
    )
    noise = check_real(noise, "noise", "(0, inf)")
    rng = np.random.default_rng([seed, 15485863])
    c = rng.standard_normal((n, d))
    r = effect * np.sin(freq * c[:, index_r])
    e_a = rng.standard_normal(n)
    e_b = r * e_a + np.sqrt(1 - r**2) * rng.standard_normal(n)
    a_mean = np.cos(c[:, [index_a]])
    a = a_mean + noise * e_a[:, None]
    b = np.exp(c[:, [index_b]]) + noise * e_b[:, None]

    def mean_fn(cc):
        return np.cos(np.asarray(cc, dtype=float)[:, [index_a]])

    return CIData(a=a, b=b, c=c, a_mean=a_mean, a_std=float(noise), mean_fn=mean_fn)
