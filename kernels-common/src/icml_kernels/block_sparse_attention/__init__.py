"""Block-sparse attention: each query block attends to the keys of its listed key blocks (a Triton
flash-attention forward pass, a pure-torch reference, and the same block index for ``flex_attention``)."""

from icml_kernels.block_sparse_attention.flex import block_mask_from_index, block_sparse_attention_flex
from icml_kernels.block_sparse_attention.op import block_sparse_attention, block_sparse_attention_op
from icml_kernels.block_sparse_attention.reference import block_sparse_attention_reference, dense_block_index

__all__ = [
    "block_mask_from_index",
    "block_sparse_attention",
    "block_sparse_attention_flex",
    "block_sparse_attention_op",
    "block_sparse_attention_reference",
    "dense_block_index",
]
