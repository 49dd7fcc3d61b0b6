"""The JEPA-score: the sum of the log singular values of an encoder's Jacobian, a log-density estimate.

For an encoder ``f: R^N -> R^D`` (each sample flattened), ``score(x) = Σ_{i<=k} log σ_i(J_f(x))``; higher
means more typical (Balestriero et al., "Gaussian Embeddings: How JEPAs Secretly Learn Your Data Density",
arXiv 2510.05949, the scorer of JEPA guidance). Two ways to get the singular values:

``exact``
    the whole Jacobian, row by row (``D`` reverse-mode products per batch), then ``torch.linalg.svdvals``:
    for small inputs and for checks.
``randomized``
    top-``k`` by the randomized range finder of Halko, Martinsson & Tropp (SIAM Review 2011, Alg. 4.4) as
    the JEPA-guidance code does it: ``r = k + oversample`` unit Gaussian directions ``Ω`` (a dedicated
    seeded generator: the global RNG is not touched), ``Y = J Ω`` by Jacobian-vector products,
    ``power_iters`` subspace iterations ``Y <- J (Jᵀ Y)`` with a QR re-orthonormalisation each time,
    ``Q = qr(Y)``, ``B = Qᵀ J`` by ``r`` vector-Jacobian products, ``σ = svdvals(B)[:k]``.

Error control (documented, and checked in the tests):

- ``σ_i(B) <= σ_i(J)`` for every ``i``, because ``B`` is an orthogonal projection of ``J``: the randomized
  score never exceeds the exact top-``k`` score, and equals it (to rounding) when ``r >= min(D, N)``.
- Halko et al. Thm. 10.6 / Cor. 10.10: ``E ‖J − QQᵀJ‖ <= [(1 + sqrt(k/(p−1)) + e·sqrt(k+p)/p ·
  sqrt(min(D,N) − k)) ]^{1/(2q+1)} σ_{k+1}`` for ``p = oversample >= 2``, so each singular value is
  resolved to a relative error that shrinks like ``(σ_{k+1}/σ_k)^{2q+1}``: a spectral gap and a few power
  iterations give 1 %-level accuracy (the test: within 1 % on an encoder with a gap, ``q = 2``).
- Finite-difference products ``J v ≈ (f(x + εv) − f(x)) / ε`` (``jvp="finite_difference"``, the paper's
  choice: one batched forward pass, no graph) have a truncation error ``<= ε ‖∇²f‖ ‖v‖² / 2`` and a rounding
  error of order ``u ‖f(x)‖ / ε`` (``u`` the unit round-off: about ``6e-8`` in float32, so ``ε = 1e-4``
  leaves about ``1e-3`` relative). ``jvp="forward"`` uses ``torch.func.jvp`` (exact, needs an encoder
  that forward-mode autodiff supports).

Half precision (a float16 or bfloat16 encoder): the encoder runs, and the Jacobian products come out, in
its dtype; the QR and SVD run in float32 (torch has no half SVD), the score's logarithms are summed in
float32, and the results are returned in ``x``'s dtype. The default step ``ε`` (``fd_eps=None``) is ``1e-4``
in float32 and wider and ``sqrt(machine epsilon)`` in half precision (``2^-5`` in float16, about ``0.088``
in bfloat16), the order that balances the two errors above; a finite-difference step must be at least the
dtype's machine epsilon. The step only steers the sketch's subspace ``Q``: the singular values are those
of ``Qᵀ J``, from exact vector-Jacobian products.

The encoder must treat the samples of a batch independently (put BatchNorm in eval mode) and be
differentiable in its input. With ``create_graph=True`` the score is differentiable in ``x`` (the sketch
basis ``Q`` is held fixed, as in the paper's guidance), which is what :class:`JEPAGuidance` descends.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import torch

from icml_generative.validation import check_choice, check_int, check_model_input, check_number, check_tensor

Encoder = Callable[[torch.Tensor], torch.Tensor]
METHODS = ("auto", "exact", "randomized")
JVP_METHODS = ("finite_difference", "forward")
MAX_OVERSAMPLE = 4096


def _embed(encoder: Encoder, x: torch.Tensor) -> torch.Tensor:
    """``encoder(x)`` flattened to ``(n, D)``, with the checks every product needs."""
    if isinstance(encoder, torch.nn.Module):
        check_model_input(x, "x", encoder)  # the encoder's dtype, not an error deep inside its first layer
    try:
        out = encoder(x)
    except torch.OutOfMemoryError:
        raise
    except (TypeError, ValueError, RuntimeError) as err:
        kind = TypeError if isinstance(err, TypeError) else ValueError
        raise kind(f"encoder refused x shaped {tuple(x.shape)} ({x.dtype}): {err}") from err
    if not isinstance(out, torch.Tensor) or not out.is_floating_point():
        got = f"dtype {out.dtype}" if isinstance(out, torch.Tensor) else type(out).__name__
        raise TypeError(f"encoder must return a floating-point torch.Tensor, got {got}")
    if out.ndim < 1 or out.shape[0] != x.shape[0]:
        raise ValueError(
            f"encoder must return one embedding per sample ({x.shape[0]}), got shape {tuple(out.shape)}"
        )
    return out.reshape(out.shape[0], -1)


def _embed_differentiable(encoder: Encoder, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x', f(x'))`` with ``x'`` joined to the graph (``x`` itself if it already requires grad)."""
    xg = x if x.requires_grad else x.detach().requires_grad_(True)
    with torch.enable_grad():
        out = _embed(encoder, xg)
    if not out.requires_grad:
        raise TypeError(
            "encoder must be differentiable in its input: its output does not depend on x through autograd "
            "(a detach, torch.no_grad, or a non-torch operation inside the encoder)"
        )
    return xg, out


def _check_x(x: object) -> torch.Tensor:
    x = check_tensor(x, "x", floating=True, finite=True)
    if x.ndim < 2 or x.shape[0] == 0 or x[0].numel() == 0:
        raise ValueError(f"x must be a non-empty batch shaped (n, ...), got {tuple(x.shape)}")
    return x


def _check_step(value: object, name: str, dtype: torch.dtype) -> float:
    """A finite-difference step in ``[machine epsilon of dtype, 1]`` (the directions have unit norm);
    ``None``: ``1e-4`` in float32 and wider, ``sqrt(machine epsilon)`` in half precision."""
    eps = torch.finfo(dtype).eps
    if value is None:
        return 1e-4 if eps <= torch.finfo(torch.float32).eps else math.sqrt(eps)
    return check_number(value, name, eps, 1.0)


def _check_step_unused(value: object, name: str) -> None:
    """A step that this call does not use (``method="exact"`` or ``jvp="forward"``): ``None`` or in ``(0, 1]``,
    whatever the dtype."""
    if value is not None:
        check_number(value, name, maximum=1.0, above=0.0)


def _wide(dtype: torch.dtype) -> torch.dtype:
    """float32 for the half dtypes (torch has no half SVD), else ``dtype``."""
    return torch.promote_types(dtype, torch.float32)


def encoder_jvp(
    encoder: Encoder,
    x: torch.Tensor,
    tangent: torch.Tensor,
    method: str = "finite_difference",
    eps: float | None = None,
) -> torch.Tensor:
    """The Jacobian-vector products ``J_f(x_i) v_i`` for a batch: ``(n, D)`` in ``x``'s dtype, without a graph.

    ``method="finite_difference"``: ``(f(x + ε v) − f(x)) / ε`` (two forward passes; see the module
    docstring for its error; ``eps=None``: ``1e-4``, or ``sqrt(machine epsilon)`` in half precision);
    ``"forward"``: ``torch.func.jvp`` (exact).
    """
    x = _check_x(x)
    check_tensor(tangent, "tangent", floating=True, finite=True)
    if tangent.shape != x.shape:
        raise ValueError(f"tangent must be shaped like x {tuple(x.shape)}, got {tuple(tangent.shape)}")
    check_choice(method, "method", JVP_METHODS)
    _embed_differentiable(encoder, x[:1].detach())  # a detaching encoder would answer zeros silently
    if method == "finite_difference":
        step = _check_step(eps, "eps", x.dtype)
    else:
        _check_step_unused(eps, "eps")
        step = 0.0
    return _jvp(encoder, x.detach(), tangent.to(x.dtype), method, step)


def _jvp(encoder: Encoder, x: torch.Tensor, v: torch.Tensor, method: str, eps: float) -> torch.Tensor:
    with torch.no_grad():
        if method == "finite_difference":
            return (_embed(encoder, x + eps * v) - _embed(encoder, x)) / eps
    try:
        out = torch.func.jvp(lambda t: _embed(encoder, t), (x,), (v,))[1]
    except (RuntimeError, NotImplementedError) as err:
        raise TypeError(
            f"encoder does not support forward-mode autodiff (torch.func.jvp): {err}; "
            "use jvp='finite_difference'"
        ) from err
    return out.detach()


def _vjps(out: torch.Tensor, x: torch.Tensor, cotangents: torch.Tensor, create_graph: bool) -> torch.Tensor:
    """``Jᵀ u_j`` for each column ``u_j`` of ``cotangents (n, D, r)``: ``(n, N, r)``, in one batched
    backward pass (``is_grads_batched``) where the encoder's operations support it, else column by column."""
    grads = cotangents.to(out.dtype).permute(2, 0, 1)  # (r, n, D)
    try:
        (g,) = torch.autograd.grad(
            out, x, grad_outputs=grads, retain_graph=True, create_graph=create_graph, is_grads_batched=True
        )
    except RuntimeError:  # an operation without a batching rule: one backward pass per column
        g = torch.stack(
            [
                torch.autograd.grad(out, x, grad_outputs=u, retain_graph=True, create_graph=create_graph)[0]
                for u in grads
            ]
        )
    return g.reshape(grads.shape[0], x.shape[0], -1).permute(1, 2, 0)


def _orth(y: torch.Tensor) -> torch.Tensor:
    """An orthonormal basis of the columns of each ``y[i]`` (QR in float32 or wider)."""
    dtype = torch.promote_types(y.dtype, torch.float32)
    return torch.linalg.qr(y.to(dtype)).Q


def jepa_singular_values(
    encoder: Encoder,
    x: torch.Tensor,
    k: int | None = None,
    *,
    method: str = "auto",
    power_iters: int = 2,
    oversample: int = 2,
    jvp: str = "finite_difference",
    fd_eps: float | None = None,
    seed: int | torch.Generator = 0,
    create_graph: bool = False,
) -> torch.Tensor:
    """The top-``k`` singular values of each sample's encoder Jacobian: ``(n, k)``, descending, in ``x``'s
    dtype (computed in float32 for a half-precision encoder).

    ``k=None`` takes all ``min(D, N)`` of them, exactly. ``method="auto"`` is ``"exact"`` when ``k`` is None
    and ``"randomized"`` otherwise (see the module docstring for both and their error control). ``fd_eps``
    is the finite-difference step of the randomized sketch's products (``jvp="finite_difference"``;
    ``None``: ``1e-4``, or ``sqrt(machine epsilon)`` in half precision). ``seed`` (an int or a
    ``torch.Generator``) draws the sketch directions. ``create_graph=True`` keeps the values
    differentiable in ``x``.
    """
    x = _check_x(x)
    return _singular_values(
        encoder, x, k, method, power_iters, oversample, jvp, fd_eps, seed, create_graph
    ).to(x.dtype)


def _singular_values(
    encoder: Encoder,
    x: torch.Tensor,
    k: int | None,
    method: str,
    power_iters: int,
    oversample: int,
    jvp: str,
    fd_eps: float | None,
    seed: int | torch.Generator,
    create_graph: bool,
) -> torch.Tensor:
    """:func:`jepa_singular_values` in float32 or wider (``x`` checked)."""
    check_choice(method, "method", METHODS)
    check_choice(jvp, "jvp", JVP_METHODS)
    check_int(power_iters, "power_iters", 0, 64)
    check_int(oversample, "oversample", 0, MAX_OVERSAMPLE)
    if not isinstance(create_graph, bool):
        raise TypeError(f"create_graph must be a bool, got {type(create_graph).__name__}")
    if isinstance(seed, torch.Generator):
        gen = seed
    else:
        gen = torch.Generator(device=x.device).manual_seed(check_int(seed, "seed", 0, 2**63 - 1))
    xg, out = _embed_differentiable(encoder, x)
    n, d = out.shape
    big_n = x[0].numel()
    rank = min(d, big_n)
    if k is not None:
        check_int(k, "k", 1, rank, why=f" (the Jacobian is {d} x {big_n}: embedding x input size)")
    if method == "auto":
        method = "exact" if k is None else "randomized"
    if method == "randomized" and jvp == "finite_difference":
        step = _check_step(fd_eps, "fd_eps", x.dtype)
    else:  # no finite differences: the step need not resolve x's dtype
        _check_step_unused(fd_eps, "fd_eps")
        step = 0.0
    top = rank if k is None else int(k)
    if method == "exact":
        eye = torch.eye(d, dtype=out.dtype, device=out.device).expand(n, d, d)
        jac_t = _vjps(out, xg, eye, create_graph)  # (n, N, D): Jᵀ
        sv = torch.linalg.svdvals(jac_t.to(_wide(jac_t.dtype)))
    else:
        r = min(top + oversample, rank)  # more columns than the Jacobian's rank add nothing
        omega = torch.randn(n, big_n, r, generator=gen, device=x.device, dtype=torch.float32).to(x.dtype)
        omega = omega / omega.norm(dim=1, keepdim=True)
        xd = x.detach()

        def apply_j(v: torch.Tensor) -> torch.Tensor:  # (n, N, r) -> (n, D, r)
            cols = v.shape[-1]
            tangents = v.permute(0, 2, 1).reshape(n * cols, *x.shape[1:]).to(x.dtype)  # sample-major
            if jvp == "finite_difference":  # x and its r shifts in one forward pass (one rounding)
                shifted = xd.repeat_interleave(cols, dim=0) + step * tangents
                with torch.no_grad():
                    both = _embed(encoder, torch.cat([xd, shifted]))
                y = (both[n:].reshape(n, cols, d) - both[:n, None]) / step
            else:
                y = _jvp(encoder, xd.repeat_interleave(cols, dim=0), tangents, jvp, step).reshape(n, cols, d)
            return y.permute(0, 2, 1)

        q = _orth(apply_j(omega))
        for _ in range(power_iters):
            z = _orth(_vjps(out, xg, q, create_graph=False).detach())
            q = _orth(apply_j(z))
        b_t = _vjps(out, xg, q.detach(), create_graph)  # (n, N, r): Bᵀ = Jᵀ Q
        sv = torch.linalg.svdvals(b_t.to(_wide(b_t.dtype)))
    return sv[:, :top]


def jepa_score(
    encoder: Encoder,
    x: torch.Tensor,
    k: int | None = None,
    *,
    method: str = "auto",
    power_iters: int = 2,
    oversample: int = 2,
    jvp: str = "finite_difference",
    fd_eps: float | None = None,
    floor: float = 1e-8,
    seed: int | torch.Generator = 0,
    create_graph: bool = False,
) -> torch.Tensor:
    """``Σ_{i<=k} log max(σ_i, floor)`` per sample: ``(n,)``; higher is more typical under the encoder.

    ``k=None``: all singular values, exactly (the JEPA-score of the evaluation code); an integer ``k``:
    the top ``k`` by the randomized sketch (the guidance's estimate), or exactly with ``method="exact"``.
    Arguments as :func:`jepa_singular_values`. Singular values below ``floor`` (rank-deficient
    Jacobians) are clipped to it, with a warning. In ``x``'s dtype; a half-precision encoder's score is
    computed in float32 (the singular values, their floor and the sum of logarithms) and rounded once.
    """
    floor = check_number(floor, "floor", above=0)
    x = _check_x(x)
    sv = _singular_values(encoder, x, k, method, power_iters, oversample, jvp, fd_eps, seed, create_graph)
    if bool((sv.detach() < floor).any()):
        warnings.warn(
            f"jepa_score: singular values below floor={floor:g} were clipped to it (a rank-deficient Jacobian)",
            RuntimeWarning,
            stacklevel=2,
        )
    score = torch.log(sv.clamp_min(floor)).sum(dim=1)
    if not math.isfinite(float(score.detach().sum())):
        warnings.warn("jepa_score: the score is not finite", RuntimeWarning, stacklevel=2)
    return score.to(x.dtype)
