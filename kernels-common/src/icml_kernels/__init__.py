"""icml-kernels: Triton kernels, their pure-torch references and one dispatcher for the icml packages.

Every op runs its Triton kernel on CUDA and its reference on CPU; ``ICML_KERNELS_IMPL=torch|triton``
forces one, and an explicit request that cannot be met raises :class:`KernelUnavailableError`.
"""

from importlib.metadata import version as _version

from icml_kernels._dispatch import KernelUnavailableError, select_impl
from icml_kernels.block_sparse_attention import (
    block_mask_from_index,
    block_sparse_attention,
    block_sparse_attention_flex,
    block_sparse_attention_reference,
    dense_block_index,
)
from icml_kernels.echo_combine import echo_combine, echo_combine_reference
from icml_kernels.fwht import fwht, fwht_reference, hadamard_matrix
from icml_kernels.gaussian_rasterize import gaussian_rasterize_reference, rasterize_gaussians
from icml_kernels.trellis import trellis_decode, trellis_gemv

__version__ = _version("icml-kernels")
__all__ = [
    "KernelUnavailableError",
    "block_mask_from_index",
    "block_sparse_attention",
    "block_sparse_attention_flex",
    "block_sparse_attention_reference",
    "dense_block_index",
    "echo_combine",
    "echo_combine_reference",
    "fwht",
    "fwht_reference",
    "gaussian_rasterize_reference",
    "hadamard_matrix",
    "rasterize_gaussians",
    "select_impl",
    "trellis_decode",
    "trellis_gemv",
]
