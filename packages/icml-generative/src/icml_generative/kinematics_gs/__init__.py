"""Kinematics-GS: dynamic 3-D Gaussian splatting from blurry monocular video with a kinematic prior.

- Renderer (:mod:`icml_generative.kinematics_gs.render`): :func:`rasterization`, a differentiable EWA
  splatter with gsplat's argument names that runs on the CPU (dense torch compositing) and on CUDA (the
  tile kernel :func:`icml_kernels.gaussian_rasterize.rasterize_gaussians`); :func:`naive_rasterization`, an
  independent per-pixel reference; camera helpers :func:`look_at` and :func:`intrinsics`.
- Model (:mod:`icml_generative.kinematics_gs.model`): :class:`KinematicsGS`, canonical Gaussians with a
  coarse-to-fine Fourier deformation (a motion field MLP plus per-Gaussian terms), blur as motion-aligned
  deformation ``Σ + (T²/12)·v vᵀ`` (or sub-frame averaging, or none), motion-aligned rotation frames, the
  anisotropy measure and the static/dynamic split by temporal deformation variance; save / load.
- Training (:mod:`icml_generative.kinematics_gs.train`): :func:`train_kinematics_gs` with L1 + D-SSIM, the
  anisotropy regularizer, the coarse-to-fine schedule and the split (:class:`TrainConfig`).

The paper's text was not available: the deformation basis, the opacity compensation of the blurred
Gaussians, the form of the motion frame and of the regularizer, the split rule and the schedules are our
reconstruction from its abstract (docs page ``kinematics-gs.md``).
"""

from icml_generative.kinematics_gs.model import BLUR_MODES, KinematicsGS
from icml_generative.kinematics_gs.render import (
    covariance_from_rotation,
    intrinsics,
    look_at,
    naive_rasterization,
    project_gaussians,
    quat_scale_to_covar,
    quat_to_rotmat,
    rasterization,
    rotmat_to_quat,
)
from icml_generative.kinematics_gs.train import TrainConfig, TrainLog, photometric_loss, train_kinematics_gs

__all__ = [
    "BLUR_MODES",
    "KinematicsGS",
    "TrainConfig",
    "TrainLog",
    "covariance_from_rotation",
    "intrinsics",
    "look_at",
    "naive_rasterization",
    "photometric_loss",
    "project_gaussians",
    "quat_scale_to_covar",
    "quat_to_rotmat",
    "rasterization",
    "rotmat_to_quat",
    "train_kinematics_gs",
]
