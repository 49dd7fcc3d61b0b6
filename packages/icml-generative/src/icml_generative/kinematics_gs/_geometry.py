"""The geometry of :mod:`icml_generative.kinematics_gs.render` without argument checks: the public functions
there validate and call these; :func:`~icml_generative.kinematics_gs.render.rasterization` and the model
call them every training step."""

from __future__ import annotations

import torch


def quat_to_rotmat_unchecked(quats: torch.Tensor) -> torch.Tensor:
    q = quats / quats.norm(dim=-1, keepdim=True)
    w, x, y, z = q.unbind(-1)
    rows = [
        1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
    ]  # fmt: skip
    return torch.stack(rows, -1).reshape(*q.shape[:-1], 3, 3)


def covariance_from_rotation_unchecked(rotations: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    m = rotations * scales[..., None, :]
    return m @ m.transpose(-1, -2)


def project_gaussians_unchecked(
    means: torch.Tensor,
    covars: torch.Tensor,
    viewmat: torch.Tensor,
    K: torch.Tensor,
    width: int,
    height: int,
    eps2d: float = 0.3,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
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
