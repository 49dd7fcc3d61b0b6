"""Kernel arithmetic shared by the CKA functions and :class:`~icml_interp.similarity.StreamingCKA`:
Song et al.'s unbiased HSIC, U-centring, CKA of Gram matrices, and linear HSIC from sums over samples."""

from __future__ import annotations

import math

import numpy as np

from icml_interp.similarity._checks import centred

DEBIASED_MIN = 4  # Song et al.'s estimator divides by n - 3
WHY_DEBIASED = " (the debiased estimator divides by n - 3)"


def song_hsic(k: np.ndarray, l_: np.ndarray) -> float:
    """Song et al.'s unbiased HSIC of two ``(n, n)`` matrices, ``tr(K~ L~)`` as written (for the masked,
    asymmetric matrices of CKNNA it is ``sum(K~ * L~^T)``, platonic-rep's reading)."""
    n = len(k)
    kt, lt = k.copy(), l_.copy()
    np.fill_diagonal(kt, 0.0)
    np.fill_diagonal(lt, 0.0)
    trace = float(np.sum(kt * lt.T))
    ones = float(kt.sum()) * float(lt.sum()) / ((n - 1) * (n - 2))
    cross = float(kt.sum(0) @ lt.sum(1))  # 1^T K~ L~ 1
    return (trace + ones - 2.0 * cross / (n - 2)) / (n * (n - 3))


def u_centre(k: np.ndarray) -> np.ndarray:
    """The U-centred matrix of a symmetric ``k``: zero diagonal, off the diagonal ``k_ij - row_i / (n-2) -
    col_j / (n-2) + total / ((n-1)(n-2))`` (sums of ``k`` with a zero diagonal); then
    ``HSIC_u(K, L) = sum(U(K) * U(L)) / (n (n-3))``."""
    n = len(k)
    kt = k.copy()
    np.fill_diagonal(kt, 0.0)
    rows = kt.sum(1) / (n - 2)
    u = kt - rows[:, None] - rows[None, :] + kt.sum() / ((n - 1) * (n - 2))
    np.fill_diagonal(u, 0.0)
    return u


def cka_of_grams(k: np.ndarray, l_: np.ndarray, debiased: bool, names: tuple[str, str]) -> float:
    """CKA of two symmetric Gram matrices scaled to a largest entry of about 1; ``names`` are the arguments
    named when a representation leaves CKA undefined."""
    if debiased:
        ku, lu = u_centre(k), u_centre(l_)
        refs = (float(np.abs(k).max()), float(np.abs(l_).max()))
    else:
        ku = k - k.mean(0) - k.mean(1)[:, None] + k.mean()
        lu = l_ - l_.mean(0) - l_.mean(1)[:, None] + l_.mean()
        refs = (1.0, 1.0)
    norms = (float(np.linalg.norm(ku)), float(np.linalg.norm(lu)))
    for name, norm, ref in zip(names, norms, refs, strict=True):
        if not norm > 1e-12 * ref * len(k):
            what = "its U-centred Gram matrix is 0" if debiased else "its centred Gram matrix is 0"
            raise ValueError(f"{name} leaves {'debiased ' * debiased}CKA undefined: {what}")
    return float(np.clip(np.sum(ku * lu) / (norms[0] * norms[1]), -1.0, 1.0))


class Moments:
    """Sums over samples that linear HSIC needs, accumulated batch by batch: with rows ``x_i``, ``y_i``,
    ``r_i = |x_i|^2`` and ``t_i = |y_i|^2``: ``n``, ``sum x``, ``sum y``, ``X^T X``, ``Y^T Y``, ``X^T Y``
    and, for the debiased HSIC, ``X^T r``, ``X^T t``, ``Y^T r``, ``Y^T t``, ``sum r``, ``sum t``,
    ``sum r^2``, ``sum t^2``, ``sum r t``. Everything is additive over batches, so streaming is exact."""

    def __init__(self, d_x: int, d_y: int, debiased: bool):
        self.n = 0
        self.debiased = debiased
        self.sx, self.sy = np.zeros(d_x), np.zeros(d_y)
        self.xx, self.yy, self.xy = np.zeros((d_x, d_x)), np.zeros((d_y, d_y)), np.zeros((d_x, d_y))
        self.xr, self.xt, self.yr, self.yt = np.zeros(d_x), np.zeros(d_x), np.zeros(d_y), np.zeros(d_y)
        self.r = self.t = self.rr = self.tt = self.rt = 0.0

    def add(self, x: np.ndarray, y: np.ndarray) -> None:
        self.n += len(x)
        self.sx += x.sum(0)
        self.sy += y.sum(0)
        self.xx += x.T @ x
        self.yy += y.T @ y
        self.xy += x.T @ y
        if self.debiased:
            r, t = np.einsum("ij,ij->i", x, x), np.einsum("ij,ij->i", y, y)
            self.xr += x.T @ r
            self.xt += x.T @ t
            self.yr += y.T @ r
            self.yt += y.T @ t
            self.r += float(r.sum())
            self.t += float(t.sum())
            self.rr += float(r @ r)
            self.tt += float(t @ t)
            self.rt += float(r @ t)

    def biased(self, names: tuple[str, str]) -> float:
        """Biased linear CKA ``|C_xy|_F^2 / (|C_xx|_F |C_yy|_F)`` of the centred cross-covariances."""
        n = self.n
        cxx = self.xx - np.outer(self.sx, self.sx) / n
        cyy = self.yy - np.outer(self.sy, self.sy) / n
        cxy = self.xy - np.outer(self.sx, self.sy) / n
        nx, ny = float(np.linalg.norm(cxx)), float(np.linalg.norm(cyy))
        for name, norm, raw in ((names[0], nx, self.xx), (names[1], ny, self.yy)):
            if not norm > 1e-13 * float(np.linalg.norm(raw)):
                raise ValueError(
                    f"{name} is the same for every sample (zero after centring): CKA is undefined"
                )
        return float(np.clip(float(np.sum(cxy * cxy)) / (nx * ny), 0.0, 1.0))

    def _hsic_u(self, cross, s1, s2, p12, u, v, sum1, sum2) -> float:
        """``HSIC_u`` of ``K = A A^T``, ``L = B B^T`` from ``cross = A^T B``, the column sums ``s1``, ``s2``,
        ``p12 = sum_i |a_i|^2 |b_i|^2``, ``u = B^T |a|^2``, ``v = A^T |b|^2``, ``sum1 = sum |a_i|^2``..."""
        n = self.n
        trace = float(np.sum(cross * cross)) - p12  # tr(K~ L~)
        ones = (float(s1 @ s1) - sum1) * (float(s2 @ s2) - sum2)  # (1^T K~ 1)(1^T L~ 1)
        mixed = float(s1 @ cross @ s2) - float(s2 @ u) - float(s1 @ v) + p12  # 1^T K~ L~ 1
        return (trace + ones / ((n - 1) * (n - 2)) - 2.0 * mixed / (n - 2)) / (n * (n - 3))

    def debiased_terms(self) -> tuple[float, float, float]:
        """``(HSIC_u(K, L), HSIC_u(K, K), HSIC_u(L, L))`` of the linear kernels."""
        hxy = self._hsic_u(self.xy, self.sx, self.sy, self.rt, self.yr, self.xt, self.r, self.t)
        hxx = self._hsic_u(self.xx, self.sx, self.sx, self.rr, self.xr, self.xr, self.r, self.r)
        hyy = self._hsic_u(self.yy, self.sy, self.sy, self.tt, self.yt, self.yt, self.t, self.t)
        return hxy, hxx, hyy

    def debiased_cka(self, names: tuple[str, str]) -> float:
        hxy, hxx, hyy = self.debiased_terms()
        n = self.n
        for name, h, gram, diag in ((names[0], hxx, self.xx, self.rr), (names[1], hyy, self.yy, self.tt)):
            scale = max(float(np.sum(gram * gram)) - diag, 0.0) / (n * (n - 3))  # |K~|_F^2 / (n (n-3))
            if not h > 1e-12 * scale:
                raise ValueError(f"{name} leaves debiased CKA undefined: its U-centred Gram matrix is 0")
        return float(np.clip(hxy / math.sqrt(hxx * hyy), -1.0, 1.0))


def linear_cka_checked(x: np.ndarray, y: np.ndarray, debiased: bool, names: tuple[str, str]) -> float:
    """Linear CKA of two checked float64 representations, in whichever of the Gram form (``n x n``) and the
    feature form (``d x d``) is cheaper; both are exact."""
    n, d_x, d_y = len(x), x.shape[1], y.shape[1]
    x = centred(x, names[0], "debiased CKA" if debiased else "CKA")[0]
    y = centred(y, names[1], "debiased CKA" if debiased else "CKA")[0]
    if n * (d_x + d_y) < d_x * d_x + d_y * d_y + d_x * d_y:  # the n x n Gram matrices are cheaper
        return cka_of_grams(x @ x.T, y @ y.T, debiased, names)
    moments = Moments(d_x, d_y, debiased)
    moments.add(x, y)
    return moments.debiased_cka(names) if debiased else moments.biased(names)
