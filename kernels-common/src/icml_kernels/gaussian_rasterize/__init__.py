"""Tile-based alpha compositing of projected 2-D Gaussians: the rasterization step of 3-D Gaussian
splatting (forward), with a differentiable torch reference."""

from icml_kernels.gaussian_rasterize.op import gaussian_rasterize_op, rasterize_gaussians
from icml_kernels.gaussian_rasterize.reference import gaussian_rasterize_reference

__all__ = ["gaussian_rasterize_op", "gaussian_rasterize_reference", "rasterize_gaussians"]
