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

from icml_generative.validation import check_int, check_number
from icml_kernels.gaussian_rasterize import rasterize_gaussians

MAX_SIDE = 8192  # width and height cap (the kernel's cap)


# ------------------------------------------------------------------------------------------- geometry
def quat_to_rotmat(quats: torch.Tensor) -> torch.Tensor:
    """Rotation matrices ``(..., 3, 3)`` of quaternions ``(..., 4)`` in ``(w, x, y, z)`` order (normalised
    here; gsplat's convention)."""
    q = quats / quats.norm(dim=-1, keepdim=True)
    w, x, y, z = q.unbind(-1)
    rows = [
        1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
    ]  # fmt: skip
    return torch.stack(rows, -1).reshape(*q.shape[:-1], 3, 3)


def rotmat_to_quat(rotations: torch.Tensor) -> torch.Tensor:
    """Unit quaternions ``(..., 4)`` ``(w, x, y, z)`` with ``w >= 0`` of rotation matrices ``(..., 3, 3)``
    (the inverse of :func:`quat_to_rotmat`; Shepperd's method: the largest of the four candidates)."""
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
    """``R diag(s²) Rᵀ`` for rotations ``(N, 3, 3)`` and scales ``(N, 3)``."""
    m = rotations * scales[..., None, :]
    return m @ m.transpose(-1, -2)


def quat_scale_to_covar(quats: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """3-D covariances ``(N, 3, 3)`` of Gaussians with quaternions ``(N, 4)`` and scales ``(N, 3)``."""
    return covariance_from_rotation(quat_to_rotmat(quats), scales)


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
        if bool((quats.norm(dim=-1) <= 1e-12).any()):
            raise ValueError("quats must be nonzero (a quaternion of norm 0 has no rotation)")
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


def _check_cameras(viewmats: Any, Ks: Any, means: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    for name, value, tail in (("viewmats", viewmats, (4, 4)), ("Ks", Ks, (3, 3))):
        if not isinstance(value, torch.Tensor) or value.ndim != 3 or tuple(value.shape[1:]) != tail:
            raise ValueError(f"{name} must be a tensor (C, {tail[0]}, {tail[1]}), got {_shape(value)}")
        if not bool(torch.isfinite(value).all()):
            raise ValueError(f"{name} must be finite")
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
    camera depths ``(N,)`` of Gaussians seen by one camera (``viewmat (4, 4)`` world to camera, ``K (3, 3)``).
    No checks: :func:`rasterization` validates."""
    R, t = viewmat[:3, :3], viewmat[:3, 3]
    cam = means @ R.T + t
    x, y, z = cam.unbind(-1)
    fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
    zs = z.clamp_min(1e-6)
    means2d = torch.stack([fx * x / zs + cx, fy * y / zs + cy], -1)
    # x/z and y/z clamped to the image's extent plus 30 % of its half-width (1.3 × tan(fov/2) for a centred
    # principal point), in the Jacobian only
    tx = torch.minimum(torch.maximum(x / zs, -(cx + 0.15 * width) / fx), (1.15 * width - cx) / fx)
    ty = torch.minimum(torch.maximum(y / zs, -(cy + 0.15 * height) / fy), (1.15 * height - cy) / fy)
    zero = torch.zeros_like(z)
    J = torch.stack(
        [torch.stack([fx / zs, zero, -fx * tx / zs], -1), torch.stack([zero, fy / zs, -fy * ty / zs], -1)], -2
    )  # (N, 2, 3)
    cov_cam = R @ covars @ R.T
    cov2d = J @ cov_cam @ J.transpose(-1, -2)
    cov2d = cov2d + eps2d * torch.eye(2, dtype=means.dtype, device=means.device)
    return means2d, cov2d, z


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
    viewmats, Ks = _check_cameras(viewmats, Ks, means)
    d = colors.shape[1]
    n_cams = viewmats.shape[0]
    if backgrounds is not None:
        if not isinstance(backgrounds, torch.Tensor) or backgrounds.shape not in ((d,), (n_cams, d)):
            raise ValueError(
                f"backgrounds must be a tensor ({d},) or ({n_cams}, {d}), got {_shape(backgrounds)}"
            )
        backgrounds = backgrounds.to(means).expand(n_cams, d)
    if covars is None:
        assert quats is not None and scales is not None
        covars = quat_scale_to_covar(quats, scales)
    images, alphas = [], []
    meta: dict[str, Any] = {"means2d": [], "depths": [], "conics": [], "order": []}
    for c in range(n_cams):
        means2d, cov2d, depth = project_gaussians(means, covars, viewmats[c], Ks[c], width, height, eps2d)
        keep = depth > near_plane
        if n and eps2d == 0:  # a degenerate (flat) Gaussian seen edge-on has a singular image covariance
            det = cov2d[:, 0, 0] * cov2d[:, 1, 1] - cov2d[:, 0, 1] ** 2
            keep = keep & (det > 0)
        order = torch.argsort(torch.where(keep, depth, torch.inf), stable=True)[: int(keep.sum())]
        conics = conics_of(cov2d[order])
        bg = None if backgrounds is None else backgrounds[c]
        image, alpha = rasterize_gaussians(
            means2d[order], conics, colors[order], opacities[order], width, height, bg
        )
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
    mu = means.detach().double().numpy()
    cov = covars.detach().double().numpy()
    op = opacities.detach().double().numpy()
    col = colors.detach().double().numpy()
    vm = viewmat.detach().double().numpy()
    k = K.detach().double().numpy()
    bg = np.zeros(col.shape[1]) if background is None else background.detach().double().numpy()
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
    eye_t = torch.as_tensor(eye, dtype=torch.float64)
    forward = torch.as_tensor(target, dtype=torch.float64) - eye_t
    if float(forward.norm()) == 0:
        raise ValueError("eye and target must differ")
    forward = forward / forward.norm()
    down = -torch.as_tensor(up, dtype=torch.float64)
    right = torch.linalg.cross(down, forward)
    if float(right.norm()) < 1e-9:
        raise ValueError("up must not be parallel to the viewing direction target - eye")
    right = right / right.norm()
    down = torch.linalg.cross(forward, right)
    R = torch.stack([right, down, forward])
    out = torch.eye(4, dtype=torch.float64)
    out[:3, :3] = R
    out[:3, 3] = -R @ eye_t
    return out


def intrinsics(width: int, height: int, fov_degrees: float = 50.0) -> torch.Tensor:
    """A pinhole ``K (3, 3)`` with the horizontal field of view ``fov_degrees`` and the principal point at
    the image centre."""
    width = check_int(width, "width", 1, MAX_SIDE)
    height = check_int(height, "height", 1, MAX_SIDE)
    fov = check_number(fov_degrees, "fov_degrees", above=0, below=180)
    f = 0.5 * width / math.tan(math.radians(fov) / 2)
    return torch.tensor([[f, 0.0, width / 2], [0.0, f, height / 2], [0.0, 0.0, 1.0]], dtype=torch.float64)
