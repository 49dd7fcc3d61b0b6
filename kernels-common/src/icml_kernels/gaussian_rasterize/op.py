"""The public Gaussian rasterization entry point, its dispatch and its ``torch.library`` registration."""

from __future__ import annotations

import torch

from icml_kernels._dispatch import select_impl
from icml_kernels.fwht.reference import warn_if_overflowed
from icml_kernels.gaussian_rasterize.reference import (
    KERNEL_DTYPES,
    KERNEL_MAX_C,
    check_rasterize,
    check_rasterize_tensors,
    check_rasterize_values,
    rasterize_reference,
)


def _kernel_reason(colors: torch.Tensor) -> str | None:
    if colors.dtype not in KERNEL_DTYPES:
        return f"the kernel does not take {colors.dtype}"
    if colors.shape[1] > KERNEL_MAX_C:
        return f"the kernel takes up to {KERNEL_MAX_C} color channels C, got {colors.shape[1]}"
    return None


@torch.library.custom_op("icml_kernels::gaussian_rasterize", mutates_args=(), device_types=("cpu", "cuda"))
def gaussian_rasterize_op(
    means2d: torch.Tensor,
    conics: torch.Tensor,
    colors: torch.Tensor,
    opacities: torch.Tensor,
    width: int,
    height: int,
    background: torch.Tensor,
    tile_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.ops.icml_kernels.gaussian_rasterize(means2d, conics, colors, opacities, width, height,
    background, tile_size)``: ``(image, alpha)``; forward only (no autograd); ``background`` required."""
    check_rasterize(means2d, conics, colors, opacities, width, height, background, tile_size)
    if select_impl("gaussian_rasterize", means2d.device, kernel_reason=_kernel_reason(colors)) == "triton":
        from icml_kernels.gaussian_rasterize.triton_gaussian_rasterize import gaussian_rasterize_triton

        return gaussian_rasterize_triton(
            means2d, conics, colors, opacities, width, height, background, tile_size
        )
    return rasterize_reference(means2d, conics, colors, opacities, width, height, background)


@gaussian_rasterize_op.register_fake
def _gaussian_rasterize_fake(means2d, conics, colors, opacities, width, height, background, tile_size):
    _, c = check_rasterize_tensors(means2d, conics, colors, opacities, background)
    return means2d.new_empty(height, width, c), means2d.new_empty(height, width)


def rasterize_gaussians(
    means2d: torch.Tensor,
    conics: torch.Tensor,
    colors: torch.Tensor,
    opacities: torch.Tensor,
    width: int,
    height: int,
    background: torch.Tensor | None = None,
    *,
    tile_size: int = 16,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Alpha-composite projected 2-D Gaussians, front to back, into a ``height x width`` image (the
    rasterization of 3-D Gaussian splatting, the rules of gsplat's and the 3DGS rasterizer's forward pass).

    Args:
        means2d (torch.Tensor): ``(N, 2)`` means in pixel coordinates ``(x, y)``, x to the right, y down;
            pixel ``(row i, column j)`` has its centre at ``(j + 0.5, i + 0.5)``. Float16, bfloat16,
            float32 (the kernel computes in float32) or float64 (runs the reference).
        conics (torch.Tensor): ``(N, 3)`` ``(a, b, c)``, the inverse 2-D covariance ``[[a, b], [b, c]]``
            (positive definite).
        colors (torch.Tensor): ``(N, C)`` colors or features; the kernel takes ``1 <= C <= 4`` (more
            channels run the reference).
        opacities (torch.Tensor): ``(N,)`` in ``[0, 1]``.
        width, height (int): the image size, 1..8192 each.
        background (torch.Tensor, optional): ``(C,)`` color behind the Gaussians; zeros when None.
        tile_size (int): 8, 16 or 32: the kernel's square tile of pixels (one program each); the result
            does not depend on it.

    The Gaussians must come **already in compositing order, front to back** (sorted by depth by the
    caller). At each pixel, with ``d = pixel centre - mean``, ``power = -0.5 * (a*dx**2 + c*dy**2) -
    b*dx*dy`` and ``alpha = min(0.99, opacity * exp(power))``; a Gaussian is skipped there (adds nothing,
    leaves the transmittance ``T`` alone) when ``power > 0`` or ``alpha < 1/255``. ``T`` starts at 1;
    before adding a Gaussian, ``next_T = T * (1 - alpha)``: if ``next_T <= 1e-4`` the pixel is finished
    (that Gaussian and all later ones are not added), else ``color += colors[n] * alpha * T`` and
    ``T = next_T``.

    Returns:
        ``(image, alpha)``: ``image = color + T * background``, ``(height, width, C)``, and
        ``alpha = 1 - T``, ``(height, width)``, in the inputs' dtype. The Triton kernel on CUDA, the torch
        reference elsewhere (``ICML_KERNELS_IMPL=torch|triton`` forces one). Differentiable in every
        tensor argument through the reference: the kernel is forward only, so when autograd is on and one
        of them requires grad the reference runs instead, whatever ``ICML_KERNELS_IMPL`` says.

    Raises ValueError/TypeError naming the argument for a wrong type, dtype, shape or device, a size out of
    range, NaN or infinite entries, opacities outside ``[0, 1]`` or a conic that is not positive definite;
    warns (RuntimeWarning) when the image overflows. These checks read the data (a host sync on a GPU);
    ``torch.ops.icml_kernels.gaussian_rasterize`` (:func:`gaussian_rasterize_op`) checks types, shapes,
    dtypes and sizes only.
    """
    check_rasterize(means2d, conics, colors, opacities, width, height, background, tile_size)
    check_rasterize_values(means2d, conics, colors, opacities, background)
    if background is None:
        background = colors.new_zeros(colors.shape[1])
    tensors = (means2d, conics, colors, opacities, background)
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        image, alpha = rasterize_reference(means2d, conics, colors, opacities, width, height, background)
    else:
        image, alpha = gaussian_rasterize_op(
            means2d, conics, colors, opacities, width, height, background, tile_size
        )
    return warn_if_overflowed(image, "rasterize_gaussians"), alpha
