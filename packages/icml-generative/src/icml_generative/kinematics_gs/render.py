"""A differentiable 3-D Gaussian splatting renderer that runs on the CPU (and on CUDA through a Triton kernel).

:func:`rasterization` takes gsplat's argument names (``means``, ``quats``, ``scales``, ``opacities``,
``colors``, ``viewmats``, ``Ks``, ``width``, ``height``, ``near_plane``, ``eps2d``, ``covars``,
``backgrounds``) and returns ``(render_colors (C, H, W, D), render_alphas (C, H, W, 1), meta)`` like
``gsplat.rasterization`` (``rasterize_mode="classic"``, colors given directly, no spherical harmonics).

The steps are those of 3DGS (Kerbl et al. 2023):

1. covariance ``Σ = R diag(s²) Rᵀ`` from a ``(w, x, y, z)`` quaternion and scales (or given as ``covars``);
2. projection through the world-to-camera ``viewmat`` and intrinsics ``K``: ``μ' = K (W μ + t) / z``, the EWA
   (Zwicker et al. 2001) image covariance ``J W Σ Wᵀ Jᵀ + eps2d·I`` with the Jacobian ``J`` of the
   perspective map (its ``x/z``, ``y/z`` clamped to 1.3× the field of view, as 3DGS does, so Gaussians far
   outside the image do not blow up), Gaussians nearer than ``near_plane`` dropped;
3. depth-sorted front-to-back alpha compositing of the image-space Gaussians,
   :func:`icml_kernels.gaussian_rasterize.rasterize_gaussians` (``α = min(0.99, o·exp(power))``, skipped below
   1/255, a pixel finished once its transmittance would fall to 1e-4; pixel centres at ``(j + ½, i + ½)``).

Step 3 is dense (every Gaussian against every pixel) in torch, so autograd differentiates the whole render
on the CPU (memory ``O(N·H·W)``: a few thousand Gaussians at 64×64); on CUDA without gradients it runs the
tile kernel. :func:`naive_rasterization` is an independent per-pixel loop over the same rules, the ground
truth in the tests and the baseline of the ``kinematics-gs-render`` benchmark.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from icml_generative.kinematics_gs._geometry import (
    covariance_from_rotation_unchecked,
    project_gaussians_unchecked,
    quat_to_rotmat_unchecked,
)
from icml_generative.validation import check_int, check_number, check_tensor
from icml_kernels.gaussian_rasterize import rasterize_gaussians

MAX_SIDE = 8192  # width and height cap (the kernel's cap)
ROTATION_TOLERANCE = 1e-2  # rotmat_to_quat: the largest entry of R Rᵀ − I it takes for a rotation


# ----------------------------------------------------------------------------------------- validation
# The public functions below check their arguments and call their unchecked twins in ``_geometry``, which
# rasterization and the model call every step.
def _check_floats(value: Any, name: str, tail: tuple[int, ...], *, ndim: int | None = None) -> torch.Tensor:
    """A finite floating-point tensor ``(..., *tail)`` (with exactly ``ndim`` axes if given)."""
    check_tensor(value, name, floating=True)
    k = len(tail)
    if (
        value.ndim < k
        or tuple(value.shape[value.ndim - k :]) != tail
        or (ndim is not None and value.ndim != ndim)
    ):
        lead = "..., " if ndim is None else "N, " * (ndim - k)
        raise ValueError(f"{name} must be a tensor ({lead}{', '.join(map(str, tail))}), got {_shape(value)}")
    if not bool(torch.isfinite(value).all()):
        raise ValueError(f"{name} must be finite (it holds NaN or inf)")
    return value


def _check_quats(quats: torch.Tensor) -> None:
    """Nonzero quaternions whose norm does not overflow (``quats`` already a finite tensor)."""
    norm = quats.detach().norm(dim=-1)
    if bool((norm <= 1e-12).any()):
        raise ValueError("quats must be nonzero (a quaternion of norm 0 has no rotation)")
    if not bool(torch.isfinite(norm).all()):
        raise ValueError(f"quats must have a finite norm in {quats.dtype} (entries too large)")


def _check_scales(scales: Any, like: torch.Tensor, batch: tuple[int, ...], batch_name: str) -> None:
    """Positive finite scales ``(..., 3)`` on ``like``'s device whose leading axes broadcast with ``batch``
    (those of ``batch_name``)."""
    _check_floats(scales, "scales", (3,))
    if scales.device != like.device:
        raise TypeError(f"scales must be on {batch_name}' device {like.device}, got {scales.device}")
    if bool((scales <= 0).any()):
        raise ValueError("scales must be positive")
    try:
        torch.broadcast_shapes(tuple(scales.shape[:-1]), batch)
    except RuntimeError:
        raise ValueError(
            f"scales must be a tensor (N, 3) for {batch_name} (N, ...), got {_shape(scales)} and N = {batch}"
        ) from None


def _check_overflow(value: torch.Tensor, names: str) -> torch.Tensor:
    """``value`` if finite; a ValueError naming the arguments ``names`` that made it overflow otherwise."""
    if not bool(torch.isfinite(value).all()):
        raise ValueError(f"{names} are too large for {value.dtype}: the result overflows (NaN or inf)")
    return value


def _check_real(value: torch.Tensor, name: str) -> None:
    """A tensor of real numbers (``TypeError`` for complex) with no NaN or inf."""
    if value.is_complex():
        raise TypeError(f"{name} must hold real numbers, got dtype {value.dtype}")
    if not bool(torch.isfinite(value).all()):
        raise ValueError(f"{name} must be finite")


def check_camera(viewmat: Any, K: Any, names: tuple[str, str] = ("viewmat", "K")) -> None:
    """One camera: a real finite world-to-camera ``viewmat (4, 4)`` and intrinsics ``K (3, 3)`` with positive
    focal lengths (``names``: how the messages call them). Errors name the argument."""
    for name, value, shape in ((names[0], viewmat, (4, 4)), (names[1], K, (3, 3))):
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != shape:
            raise ValueError(f"{name} must be a tensor ({shape[0]}, {shape[1]}), got {_shape(value)}")
        _check_real(value, name)
    if not (bool(K[0, 0] > 0) and bool(K[1, 1] > 0)):
        raise ValueError(f"{names[1]} must have positive focal lengths fx = K[0, 0] and fy = K[1, 1]")


def check_background(value: Any, name: str, d: int, cameras: int | None = None) -> None:
    """A real finite background color ``(d,)`` (or ``(cameras, d)`` when ``cameras`` is given)."""
    shapes = [(d,)] if cameras is None else [(d,), (cameras, d)]
    if not isinstance(value, torch.Tensor) or tuple(value.shape) not in shapes:
        wanted = " or ".join(f"({', '.join(map(str, s))}{',' if len(s) == 1 else ''})" for s in shapes)
        raise ValueError(f"{name} must be a tensor {wanted}, got {_shape(value)}")
    _check_real(value, name)


# ------------------------------------------------------------------------------------------- geometry
def quat_to_rotmat(quats: torch.Tensor) -> torch.Tensor:
    """Rotation matrices ``(..., 3, 3)`` of quaternions ``(..., 4)`` in ``(w, x, y, z)`` order (normalised
    here; gsplat's convention)."""
    _check_floats(quats, "quats", (4,))
    _check_quats(quats)
    return quat_to_rotmat_unchecked(quats)


def rotmat_to_quat(rotations: torch.Tensor) -> torch.Tensor:
    """Unit quaternions ``(..., 4)`` ``(w, x, y, z)`` with ``w >= 0`` of rotation matrices ``(..., 3, 3)``
    (the inverse of :func:`quat_to_rotmat`; Shepperd's method: the largest of the four candidates). The
    matrices must be rotations to ``ROTATION_TOLERANCE`` (``R Rᵀ = I``, ``det R > 0``)."""
    _check_floats(rotations, "rotations", (3, 3))
    r = rotations.detach().double()
    if r.numel() and not (
        bool(
            (
                (r @ r.transpose(-1, -2) - torch.eye(3, dtype=r.dtype, device=r.device)).abs()
                <= ROTATION_TOLERANCE
            ).all()
        )
        and bool((torch.linalg.det(r) > 0).all())
    ):
        raise ValueError(
            f"rotations must be rotation matrices (orthonormal to {ROTATION_TOLERANCE}, determinant +1)"
        )
    m = rotations
    trace = m[..., 0, 0] + m[..., 1, 1] + m[..., 2, 2]
    candidates = torch.stack(
        [
            torch.stack(
                [
                    1 + trace,
                    m[..., 2, 1] - m[..., 1, 2],
                    m[..., 0, 2] - m[..., 2, 0],
                    m[..., 1, 0] - m[..., 0, 1],
                ],
                -1,
            ),
            torch.stack(
                [
                    m[..., 2, 1] - m[..., 1, 2],
                    1 + 2 * m[..., 0, 0] - trace,
                    m[..., 0, 1] + m[..., 1, 0],
                    m[..., 0, 2] + m[..., 2, 0],
                ],
                -1,
            ),
            torch.stack(
                [
                    m[..., 0, 2] - m[..., 2, 0],
                    m[..., 0, 1] + m[..., 1, 0],
                    1 + 2 * m[..., 1, 1] - trace,
                    m[..., 1, 2] + m[..., 2, 1],
                ],
                -1,
            ),
            torch.stack(
                [
                    m[..., 1, 0] - m[..., 0, 1],
                    m[..., 0, 2] + m[..., 2, 0],
                    m[..., 1, 2] + m[..., 2, 1],
                    1 + 2 * m[..., 2, 2] - trace,
                ],
                -1,
            ),
        ],
        -2,
    )  # (..., 4, 4): row i is 4·q_i·q, largest when |q_i| is
    best = torch.stack(
        [1 + trace, 1 + 2 * m[..., 0, 0] - trace, 1 + 2 * m[..., 1, 1] - trace, 1 + 2 * m[..., 2, 2] - trace],
        -1,
    ).argmax(-1)
    q = torch.gather(candidates, -2, best[..., None, None].expand(*best.shape, 1, 4))[..., 0, :]
    q = q / q.norm(dim=-1, keepdim=True)
    return torch.where(q[..., :1] < 0, -q, q)


def covariance_from_rotation(rotations: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """``R diag(s²) Rᵀ`` for rotations ``(N, 3, 3)`` and scales ``(N, 3)`` (positive)."""
    _check_floats(rotations, "rotations", (3, 3))
    _check_scales(scales, rotations, tuple(rotations.shape[:-2]), "rotations")
    return _check_overflow(covariance_from_rotation_unchecked(rotations, scales), "rotations and scales")


def quat_scale_to_covar(quats: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """3-D covariances ``(N, 3, 3)`` of Gaussians with quaternions ``(N, 4)`` (nonzero) and scales ``(N, 3)``
    (positive)."""
    _check_floats(quats, "quats", (4,))
    _check_quats(quats)
    _check_scales(scales, quats, tuple(quats.shape[:-1]), "quats")
    return _check_overflow(
        covariance_from_rotation_unchecked(quat_to_rotmat_unchecked(quats), scales), "quats and scales"
    )


def check_gaussians(
    means: torch.Tensor,
    quats: torch.Tensor | None,
    scales: torch.Tensor | None,
    opacities: torch.Tensor,
    colors: torch.Tensor,
    covars: torch.Tensor | None = None,
) -> int:
    """Validate a set of Gaussians; returns their number ``N``. Errors name the argument."""
    if not isinstance(means, torch.Tensor) or means.ndim != 2 or means.shape[1] != 3:
        raise ValueError(f"means must be a tensor (N, 3), got {_shape(means)}")
    if not means.is_floating_point():
        raise TypeError(f"means must be a floating-point tensor, got {means.dtype}")
    n = means.shape[0]
    expected: dict[str, tuple[Any, tuple[int, ...]]] = {
        "opacities": (opacities, (n,)),
        "colors": (colors, (n, -1)),
    }
    if covars is None:
        if quats is None or scales is None:
            raise ValueError("quats and scales are needed when covars is None")
        expected["quats"] = (quats, (n, 4))
        expected["scales"] = (scales, (n, 3))
    else:
        expected["covars"] = (covars, (n, 3, 3))
    for name, (value, shape) in expected.items():
        if not isinstance(value, torch.Tensor) or value.ndim != len(shape):
            raise ValueError(f"{name} must be a tensor {_want(shape)}, got {_shape(value)}")
        if any(s != -1 and s != v for s, v in zip(shape, value.shape, strict=True)):
            raise ValueError(
                f"{name} must be a tensor {_want(shape)} (N={n} from means), got {_shape(value)}"
            )
        if value.dtype != means.dtype or value.device != means.device:
            raise TypeError(
                f"{name} must have means' dtype and device ({means.dtype}, {means.device}), "
                f"got {value.dtype}, {value.device}"
            )
    for name, (value, _) in expected.items():
        if not bool(torch.isfinite(value).all()):
            raise ValueError(f"{name} must be finite (it holds NaN or inf)")
    if not bool(torch.isfinite(means).all()):
        raise ValueError("means must be finite (it holds NaN or inf)")
    if colors.shape[1] < 1:
        raise ValueError(f"colors must have at least one channel, got {_shape(colors)}")
    if bool(((opacities < 0) | (opacities > 1)).any()):
        raise ValueError("opacities must lie in [0, 1]")
    if covars is None:
        assert quats is not None and scales is not None
        _check_quats(quats)
        if bool((scales <= 0).any()):
            raise ValueError("scales must be positive")
    else:
        sym = (covars - covars.transpose(-1, -2)).abs().amax() <= 1e-6 * covars.abs().amax().clamp_min(1e-30)
        if n and (not bool(sym) or bool((torch.linalg.eigvalsh(covars.double())[:, 0] <= 0).any())):
            raise ValueError("covars must be symmetric positive definite")
    return n


def _shape(value: Any) -> str:
    return f"shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__


def _want(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join("N" if i == 0 else ("D" if s == -1 else str(s)) for i, s in enumerate(shape)) + ")"


def check_cameras(viewmats: Any, Ks: Any, means: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate cameras ``viewmats (C, 4, 4)`` and ``Ks (C, 3, 3)`` (finite, positive focal lengths); returns
    them in ``means``' dtype and device."""
    for name, value, tail in (("viewmats", viewmats, (4, 4)), ("Ks", Ks, (3, 3))):
        if not isinstance(value, torch.Tensor) or value.ndim != 3 or tuple(value.shape[1:]) != tail:
            raise ValueError(f"{name} must be a tensor (C, {tail[0]}, {tail[1]}), got {_shape(value)}")
        _check_real(value, name)
    if viewmats.shape[0] != Ks.shape[0]:
        raise ValueError(
            f"viewmats and Ks must have the same number of cameras, got {viewmats.shape[0]}, {Ks.shape[0]}"
        )
    if bool((Ks[:, 0, 0] <= 0).any() | (Ks[:, 1, 1] <= 0).any()):
        raise ValueError("Ks must have positive focal lengths fx = K[0, 0] and fy = K[1, 1]")
    return viewmats.to(means), Ks.to(means)


# ----------------------------------------------------------------------------------------- projection
def project_gaussians(
    means: torch.Tensor,
    covars: torch.Tensor,
    viewmat: torch.Tensor,
    K: torch.Tensor,
    width: int,
    height: int,
    eps2d: float = 0.3,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Image-plane means ``(N, 2)``, EWA covariances ``(N, 2, 2)`` (``eps2d`` added on the diagonal) and
    camera depths ``(N,)`` of Gaussians seen by one camera (``viewmat (4, 4)`` world to camera, ``K (3, 3)``,
    both taken in the dtype of ``means``)."""
    _check_floats(means, "means", (3,), ndim=2)
    _check_floats(covars, "covars", (means.shape[0], 3, 3), ndim=3)
    if covars.dtype != means.dtype or covars.device != means.device:
        raise TypeError(
            f"covars must have means' dtype and device ({means.dtype}, {means.device}), "
            f"got {covars.dtype}, {covars.device}"
        )
    check_camera(viewmat, K)
    width = check_int(width, "width", 1, MAX_SIDE)
    height = check_int(height, "height", 1, MAX_SIDE)
    eps2d = check_number(eps2d, "eps2d", minimum=0)
    out = project_gaussians_unchecked(means, covars, viewmat.to(means), K.to(means), width, height, eps2d)
    for value in out:
        _check_overflow(value, "means, covars, viewmat, K and eps2d")
    return out


def conics_of(cov2d: torch.Tensor) -> torch.Tensor:
    """``(a, b, c)`` of the inverse of 2×2 covariances ``(N, 2, 2)``: ``[[a, b], [b, c]] = Σ⁻¹``."""
    p, q, r = cov2d[:, 0, 0], cov2d[:, 0, 1], cov2d[:, 1, 1]
    det = p * r - q * q
    return torch.stack([r / det, -q / det, p / det], -1)


# ------------------------------------------------------------------------------------------ rendering
def rasterization(
    means: torch.Tensor,
    quats: torch.Tensor | None,
    scales: torch.Tensor | None,
    opacities: torch.Tensor,
    colors: torch.Tensor,
    viewmats: torch.Tensor,
    Ks: torch.Tensor,
    width: int,
    height: int,
    *,
    near_plane: float = 0.01,
    eps2d: float = 0.3,
    covars: torch.Tensor | None = None,
    backgrounds: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """Render Gaussians into ``C`` cameras (gsplat's ``rasterization``, classic mode, colors given).

    ``means (N, 3)``, ``quats (N, 4)`` ``(w, x, y, z)``, ``scales (N, 3)`` (or ``covars (N, 3, 3)`` instead of
    both), ``opacities (N,)`` in ``[0, 1]``, ``colors (N, D)``, ``viewmats (C, 4, 4)`` world-to-camera, ``Ks
    (C, 3, 3)``; ``backgrounds (C, D)`` or ``(D,)``. Returns ``(render_colors (C, H, W, D), render_alphas (C,
    H, W, 1), meta)`` with ``meta["means2d"]``, ``meta["depths"]``, ``meta["conics"]`` (lists, one per
    camera). Differentiable in every tensor argument.
    """
    n = check_gaussians(means, quats, scales, opacities, colors, covars)
    width = check_int(width, "width", 1, MAX_SIDE)
    height = check_int(height, "height", 1, MAX_SIDE)
    near_plane = check_number(near_plane, "near_plane", above=0)
    eps2d = check_number(eps2d, "eps2d", minimum=0)
    viewmats, Ks = check_cameras(viewmats, Ks, means)
    d = colors.shape[1]
    n_cams = viewmats.shape[0]
    if backgrounds is not None:
        check_background(backgrounds, "backgrounds", d, n_cams)
        backgrounds = backgrounds.to(means).expand(n_cams, d)
    if covars is None:
        assert quats is not None and scales is not None
        covars = covariance_from_rotation_unchecked(quat_to_rotmat_unchecked(quats), scales)
    images, alphas = [], []
    meta: dict[str, Any] = {"means2d": [], "depths": [], "conics": [], "order": []}
    for c in range(n_cams):
        means2d, cov2d, depth = project_gaussians_unchecked(
            means, covars, viewmats[c], Ks[c], width, height, eps2d
        )
        keep = depth > near_plane
        if n and eps2d == 0:  # a degenerate (flat) Gaussian seen edge-on has a singular image covariance
            det = cov2d[:, 0, 0] * cov2d[:, 1, 1] - cov2d[:, 0, 1] ** 2
            keep = keep & (det > 0)
        order = torch.argsort(torch.where(keep, depth, torch.inf), stable=True)[: int(keep.sum())]
        conics = conics_of(cov2d[order])
        bg = None if backgrounds is None else backgrounds[c]
        try:
            image, alpha = rasterize_gaussians(
                means2d[order], conics, colors[order], opacities[order], width, height, bg
            )
        except (ValueError, TypeError) as err:  # the arguments are valid: their projection is not
            raise ValueError(
                f"the projection of means, quats and scales (or covars) by viewmats, Ks and eps2d into camera "
                f"{c} is out of range for {means.dtype}: {err}"
            ) from err
        images.append(image)
        alphas.append(alpha[..., None])
        for key, value in (("means2d", means2d), ("depths", depth), ("conics", conics), ("order", order)):
            meta[key].append(value)
    return torch.stack(images), torch.stack(alphas), meta


def naive_rasterization(
    means: torch.Tensor,
    covars: torch.Tensor,
    opacities: torch.Tensor,
    colors: torch.Tensor,
    viewmat: torch.Tensor,
    K: torch.Tensor,
    width: int,
    height: int,
    *,
    near_plane: float = 0.01,
    eps2d: float = 0.3,
    background: torch.Tensor | None = None,
) -> np.ndarray:
    """The same render computed pixel by pixel in Python (float64 NumPy), written from the 3DGS rules
    independently of :func:`rasterization`: slow (``H·W·N`` Python steps), for tests and as the benchmark's
    baseline. One camera; returns the image ``(H, W, D)``."""
    check_gaussians(means, None, None, opacities, colors, covars)
    check_camera(viewmat, K)
    width = check_int(width, "width", 1, MAX_SIDE)
    height = check_int(height, "height", 1, MAX_SIDE)
    near_plane = check_number(near_plane, "near_plane", above=0)
    eps2d = check_number(eps2d, "eps2d", minimum=0)
    if background is not None:
        check_background(background, "background", colors.shape[1])
    mu = means.detach().cpu().double().numpy()
    cov = covars.detach().cpu().double().numpy()
    op = opacities.detach().cpu().double().numpy()
    col = colors.detach().cpu().double().numpy()
    vm = viewmat.detach().cpu().double().numpy()
    k = K.detach().cpu().double().numpy()
    bg = np.zeros(col.shape[1]) if background is None else background.detach().cpu().double().numpy()
    fx, fy, cx, cy = k[0, 0], k[1, 1], k[0, 2], k[1, 2]
    splats = []
    for i in range(mu.shape[0]):
        x, y, z = vm[:3, :3] @ mu[i] + vm[:3, 3]
        if z <= near_plane:
            continue
        u, v = fx * x / z + cx, fy * y / z + cy
        tan_x, tan_y = 0.5 * width / fx, 0.5 * height / fy
        tx = min(max(x / z, -cx / fx - 0.3 * tan_x), (width - cx) / fx + 0.3 * tan_x)
        ty = min(max(y / z, -cy / fy - 0.3 * tan_y), (height - cy) / fy + 0.3 * tan_y)
        jac = np.array([[fx / z, 0.0, -fx * tx / z], [0.0, fy / z, -fy * ty / z]])
        c2 = jac @ vm[:3, :3] @ cov[i] @ vm[:3, :3].T @ jac.T + eps2d * np.eye(2)
        splats.append((z, i, np.array([u, v]), np.linalg.inv(c2)))
    splats.sort(key=lambda s: (s[0], s[1]))
    image = np.zeros((height, width, col.shape[1]))
    for row in range(height):
        for column in range(width):
            p = np.array([column + 0.5, row + 0.5])
            transmittance, value = 1.0, np.zeros(col.shape[1])
            for _, i, m, inv in splats:
                dlt = p - m
                power = -0.5 * float(dlt @ inv @ dlt)
                if power > 0:
                    continue
                alpha = min(0.99, op[i] * math.exp(power))
                if alpha < 1 / 255:
                    continue
                if transmittance * (1 - alpha) <= 1e-4:
                    break
                value += col[i] * alpha * transmittance
                transmittance *= 1 - alpha
            image[row, column] = value + transmittance * bg
    return image


def look_at(eye: Any, target: Any, up: Any = (0.0, -1.0, 0.0)) -> torch.Tensor:
    """A world-to-camera matrix ``(4, 4)`` (OpenCV axes: x right, y down, z forward) for a camera at ``eye``
    looking at ``target``; ``up`` is the world direction drawn upwards in the image (default ``-y``)."""
    eye_t = _point(eye, "eye")
    forward = _point(target, "target") - eye_t
    if float(forward.norm()) == 0:
        raise ValueError("eye and target must differ")
    if not math.isfinite(float(forward.norm())):
        raise ValueError("eye and target are too far apart: the length of target - eye overflows")
    forward = forward / forward.norm()
    down = -_point(up, "up")
    right = torch.linalg.cross(down, forward)
    if not math.isfinite(float(right.norm())):
        raise ValueError("up is too large: its length overflows")
    if float(right.norm()) < 1e-9:
        raise ValueError("up must not be parallel to the viewing direction target - eye")
    right = right / right.norm()
    down = torch.linalg.cross(forward, right)
    R = torch.stack([right, down, forward])
    out = torch.eye(4, dtype=torch.float64)
    out[:3, :3] = R
    out[:3, 3] = -R @ eye_t
    if not bool(torch.isfinite(out).all()):
        raise ValueError("eye is too large: the camera's translation overflows")
    return out


def _point(value: Any, name: str) -> torch.Tensor:
    """``value`` (3 real numbers: a sequence, an array or a tensor) as a float64 tensor ``(3,)``."""
    if isinstance(value, torch.Tensor):
        if value.is_complex():
            raise TypeError(f"{name} must hold real numbers, got dtype {value.dtype}")
    else:
        try:
            kind = np.asarray(value).dtype.kind
        except (TypeError, ValueError):  # ragged or otherwise not numbers
            kind = "O"
        if kind not in "biuf":
            raise TypeError(
                f"{name} must be 3 real numbers (x, y, z), got {type(value).__name__} {value!r:.60}"
            )
    point = torch.as_tensor(value, dtype=torch.float64)
    if tuple(point.shape) != (3,):
        raise ValueError(f"{name} must be 3 numbers (x, y, z), got shape {tuple(point.shape)}")
    if not bool(torch.isfinite(point).all()):
        raise ValueError(f"{name} must be finite, got {point.tolist()}")
    return point


def intrinsics(width: int, height: int, fov_degrees: float = 50.0) -> torch.Tensor:
    """A pinhole ``K (3, 3)`` with the horizontal field of view ``fov_degrees`` and the principal point at
    the image centre."""
    width = check_int(width, "width", 1, MAX_SIDE)
    height = check_int(height, "height", 1, MAX_SIDE)
    fov = check_number(fov_degrees, "fov_degrees", above=0, below=180)
    half = math.tan(math.radians(fov) / 2)
    if not (half > 0 and math.isfinite(0.5 * width / half)):
        raise ValueError(f"fov_degrees is too small for a finite focal length, got {fov_degrees!r}")
    f = 0.5 * width / half
    return torch.tensor([[f, 0.0, width / 2], [0.0, f, height / 2], [0.0, 0.0, 1.0]], dtype=torch.float64)
