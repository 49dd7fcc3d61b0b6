"""Quantized linear modules: :class:`ProteusLinear` (every trellis code) and :class:`RTNLinear`.

``ProteusLinear`` holds the packed trellis words of the rotated weight ``(out, in/T, K*T/32)`` (int32,
row tiles, the layout of :func:`icml_kernels.trellis.trellis_gemv`), the code's per-layer affine pair
``alpha, beta`` (Proteus' Gaussianizer), the input and output sign/scale vectors ``su (in)`` and
``sv (out)``, the ``hyb``/``lut`` table if the code has one, and the bias. Its forward computes
``y = sv * R_out^T decode(packed) R_in (su * x) + bias`` (see :mod:`.incoherence`); the product goes
through the part-1 ops. Every argument (the code, ``L``/``K``/``V``/``T`` through the kernels'
:class:`~icml_kernels.trellis.TrellisFormat`, the mulbal triple, the table shape) is checked when the
module is built, so a forward pass runs the registered ops without checking again.

On CUDA: the fused ``trellis_gemv`` kernel for a single row, otherwise the Triton ``trellis_decode`` and a
matmul between the rotations, the decoded weight dropped after each call (GPU memory stays at the packed
size). The kernels decode the raw code values (``alpha = 1``, ``beta = 0``) and the affine pair is applied
to the product as tensor ops, ``alpha * (x @ raw^T) + beta * sum(x)``, so a call never reads ``alpha`` or
``beta`` back to the host (no device synchronization). On the CPU: one matmul with the dequantized weight
in the original basis (the torch reference decoder, unrotated once), cached in memory (not saved) until
the packed words, the affine pair or ``su``/``sv`` change (in place, or replaced: the cache is keyed on
the tensors' identity, storage and version counter, not on their values). (Until 2026-11-30 the CPU
rotated every input and output around a cached rotated weight, and CUDA cached that weight too: the same
product up to float rounding, slower on the CPU, see ``docs/proteus-models.md``, generation speed.)
While any of ``alpha``, ``beta``, ``su``, ``sv`` requires grad (distillation) the product is the
differentiable ``alpha * (x @ raw^T) + beta * sum(x)`` of the cached raw code values, between the
rotations, on either device. The packed words never change after quantization.

Under ``torch.compile`` (``fullgraph=True`` included) no cache is read or written: the cache keys read
storage addresses and version counters, which dynamo cannot guard on (it raised ``Unsupported: Data
pointer comparison``). The compiled forward decodes the weight inside the graph on every call (as torchao
and HQQ dequantize inside theirs) through the registered ops, on the rotated path the CUDA forward takes:
the eager product up to float rounding. :class:`RTNLinear` likewise unpacks its codes inside the graph.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from icml_compress.quantize.incoherence import rotate, unrotate
from icml_compress.validation import check_bool, check_int
from icml_kernels.trellis import TrellisFormat, trellis_decode_op, trellis_gemv_op

NO_MULBAL = (1, 0, 8)  # the ops' (a, b, m) for the codes that take none


def compiling() -> bool:
    """True while ``torch.compile`` (dynamo) traces the caller: the decoded-weight caches are bypassed."""
    return torch.compiler.is_compiling()


def tensors_key(*tensors: torch.Tensor) -> tuple:
    """What identifies the contents of ``tensors`` without reading them (no device synchronization): each
    one's identity, storage address, version counter (bumped by every in-place change), device and dtype."""
    return tuple((id(t), t.data_ptr(), t._version, t.device, t.dtype) for t in tensors)


class ProteusLinear(nn.Module):
    """A trellis-quantized ``nn.Linear`` (codes ``mulbal``, ``1mad``, ``3inst``, ``hyb``, ``lut``).

    Raises ValueError/TypeError naming the argument for a code name, ``L``, ``K``, ``V``, ``T`` or
    ``mulbal``/``table_shape`` the code does not take, and for ``T`` not dividing ``in_features``.
    """

    packed: torch.Tensor
    table: torch.Tensor | None

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        code: str,
        L: int,
        K: int,
        V: int,
        T: int,
        mulbal: tuple[int, int, int] | None = None,
        table_shape: tuple[int, ...] | None = None,
        bias: bool = False,
        candidate: int | None = None,
    ) -> None:
        super().__init__()
        check_int(in_features, "in_features", 1)
        check_int(out_features, "out_features", 1)
        self.format = TrellisFormat(L, K, V, T)
        words = self.format.words_per_tile  # K*T whole words
        self.mulbal = self.format.check_code(
            code, mulbal=mulbal, table_shape=table_shape, table_name="table_shape"
        )
        if in_features % T:
            raise ValueError(f"T={T} must divide in_features={in_features}")
        check_bool(bias, "bias")
        if candidate is not None:
            check_int(candidate, "candidate", 0)
        self.in_features, self.out_features = in_features, out_features
        self.code, self.L, self.K, self.V, self.T = code, L, K, V, T
        self.candidate = candidate
        self.register_buffer("packed", torch.zeros(out_features, in_features // T, words, dtype=torch.int32))
        self.register_buffer("table", None if table_shape is None else torch.zeros(tuple(table_shape)))
        self.alpha = nn.Parameter(torch.ones(()), requires_grad=False)
        self.beta = nn.Parameter(torch.zeros(()), requires_grad=False)
        self.su = nn.Parameter(torch.ones(in_features), requires_grad=False)
        self.sv = nn.Parameter(torch.ones(out_features), requires_grad=False)
        self.bias = nn.Parameter(torch.zeros(out_features), requires_grad=False) if bias else None
        self._cache: tuple | None = None

    def meta(self) -> dict:
        """What :func:`ProteusLinear.from_meta` needs to rebuild an empty module (JSON)."""
        return {
            "kind": "trellis",
            "in_features": self.in_features,
            "out_features": self.out_features,
            "code": self.code,
            "L": self.L,
            "K": self.K,
            "V": self.V,
            "T": self.T,
            "mulbal": None if self.mulbal is None else list(self.mulbal),
            "table_shape": None if self.table is None else list(self.table.shape),
            "bias": self.bias is not None,
            "candidate": self.candidate,
        }

    @classmethod
    def from_meta(cls, meta: dict) -> ProteusLinear:
        m = dict(meta)
        m.pop("kind")
        ts = m.pop("table_shape")
        return cls(
            m.pop("in_features"), m.pop("out_features"), table_shape=None if ts is None else tuple(ts), **m
        )

    def _op_args(self) -> tuple[Any, ...]:
        """The registered ops' arguments after the tensor(s), for the raw code values (``alpha = 1``,
        ``beta = 0``); all checked at construction."""
        a, b, m = self.mulbal or NO_MULBAL
        table = None if self.table is None else self.table.float()
        return (self.code, self.L, self.K, self.V, self.T, 1.0, 0.0, a, b, m, table)

    def raw_weight(self) -> torch.Tensor:
        """Decoded code values before the affine pair, ``(out, in)`` float32."""
        return trellis_decode_op(self.packed, *self._op_args()).reshape(self.out_features, self.in_features)

    def rotated_weight(self) -> torch.Tensor:
        """``alpha * raw + beta`` in the rotated basis, ``(out, in)`` float32."""
        return self.raw_weight() * self.alpha + self.beta

    def _decode_weight(self) -> torch.Tensor:
        """The weight in the original basis, decoded now (no cache)."""
        A = unrotate(self.rotated_weight())  # rows: R_in^T
        W = unrotate(A.T.contiguous()).T * self.sv.detach()[:, None] * self.su.detach()[None, :]
        return W.contiguous()

    def dequantized_weight(self) -> torch.Tensor:
        """The weight this module applies, ``(out, in)`` float32, in the original basis (cached while the
        packed words, ``alpha``, ``beta``, ``su`` and ``sv`` are unchanged; decoded on every call, without
        the cache, under ``torch.compile``)."""
        if compiling():
            return self._decode_weight()
        tensors = (self.packed, self.alpha, self.beta, self.su, self.sv)
        key = tensors_key(*tensors)
        if self._cache is None or self._cache[1] != key:
            self._cache = (tensors, key, self._decode_weight())  # holds the tensors: their ids stay theirs
        return self._cache[2]

    def clear_cache(self) -> None:
        self._cache = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        training = any(p.requires_grad for p in (self.alpha, self.beta, self.su, self.sv))
        traced = compiling()  # decode inside the graph, between the rotations: no cache
        if training or x.is_cuda or traced:
            xs = rotate(x.float() * self.su)  # (..., in): R_in (su * x)
            if training and not traced:
                raw = getattr(self, "_raw", None)  # a plain attribute: .to() does not move it
                if raw is None or raw.device != self.packed.device:
                    raw = self._raw = self.raw_weight()
                z = xs @ raw.T  # no (out, in) temporary
            elif xs.numel() == self.in_features and not training:  # distillation traced: the product below
                z = trellis_gemv_op(xs, self.packed, *self._op_args())
            else:  # decoded per call: GPU memory stays at the packed size
                z = xs @ self.raw_weight().T
            z = self.alpha * z + self.beta * xs.sum(-1, keepdim=True)  # tensor ops: no host sync
            y = unrotate(z) * self.sv
        else:
            y = x.float() @ self.dequantized_weight().T
        if self.bias is not None:
            y = y + self.bias
        return y.to(x.dtype)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, code={self.code}, "
            f"L={self.L}, K={self.K}, V={self.V}, T={self.T}, candidate={self.candidate}"
        )


class RTNLinear(nn.Module):
    """Round-to-nearest per-group ``nn.Linear``: ``bits``-bit codes packed into uint8, float16 scale and
    offset per group of ``group_size`` inputs (the RTN baseline of :mod:`icml_compress.baselines`)."""

    codes: torch.Tensor
    scale: torch.Tensor
    offset: torch.Tensor

    def __init__(
        self, in_features: int, out_features: int, *, bits: int, group_size: int, bias: bool = False
    ) -> None:
        super().__init__()
        check_int(in_features, "in_features", 1)
        check_int(out_features, "out_features", 1)
        check_int(group_size, "group_size", 1)
        check_int(bits, "bits", 1, 8)
        check_bool(bias, "bias")
        if bits not in (1, 2, 4, 8):
            raise ValueError(f"RTNLinear packs 1, 2, 4 or 8 bits per weight, got bits={bits}")
        if in_features % group_size:
            raise ValueError(f"group_size={group_size} must divide in_features={in_features}")
        self.in_features, self.out_features, self.bits, self.group_size = (
            in_features,
            out_features,
            bits,
            group_size,
        )
        per = 8 // bits
        if in_features % per:
            raise ValueError(f"in_features must be a multiple of {per} to pack {bits}-bit codes")
        self.register_buffer("codes", torch.zeros(out_features, in_features // per, dtype=torch.uint8))
        self.register_buffer(
            "scale", torch.zeros(out_features, in_features // group_size, dtype=torch.float16)
        )
        self.register_buffer(
            "offset", torch.zeros(out_features, in_features // group_size, dtype=torch.float16)
        )
        self.bias = nn.Parameter(torch.zeros(out_features), requires_grad=False) if bias else None
        self._cache: tuple | None = None

    def meta(self) -> dict:
        return {
            "kind": "rtn",
            "in_features": self.in_features,
            "out_features": self.out_features,
            "bits": self.bits,
            "group_size": self.group_size,
            "bias": self.bias is not None,
        }

    @classmethod
    def from_meta(cls, meta: dict) -> RTNLinear:
        m = dict(meta)
        m.pop("kind")
        return cls(m.pop("in_features"), m.pop("out_features"), **m)

    def set_codes(self, codes: torch.Tensor) -> None:
        """Pack integer codes ``(out, in)`` in ``0 .. 2^bits - 1`` (first code in the low bits)."""
        per = 8 // self.bits
        c = codes.to(torch.int32).reshape(self.out_features, -1, per)
        shifts = torch.arange(per, dtype=torch.int32, device=c.device) * self.bits
        self.codes.copy_((c << shifts).sum(-1).to(torch.uint8))

    def _decode_weight(self) -> torch.Tensor:
        """The weight unpacked now (no cache)."""
        per = 8 // self.bits
        shifts = torch.arange(per, dtype=torch.int32, device=self.codes.device) * self.bits
        c = ((self.codes.to(torch.int32).unsqueeze(-1) >> shifts) & ((1 << self.bits) - 1)).float()
        c = c.reshape(self.out_features, -1, self.group_size)  # (out, groups, g)
        w = self.offset.float().unsqueeze(-1) + self.scale.float().unsqueeze(-1) * c
        return w.reshape(self.out_features, self.in_features)

    def dequantized_weight(self) -> torch.Tensor:
        """The weight this module applies, ``(out, in)`` float32 (cached while the codes, scales and offsets
        are unchanged; unpacked on every call, without the cache, under ``torch.compile``)."""
        if compiling():
            return self._decode_weight()
        tensors = (self.codes, self.scale, self.offset)
        key = tensors_key(*tensors)
        if self._cache is None or self._cache[1] != key:
            self._cache = (tensors, key, self._decode_weight())
        return self._cache[2]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.float() @ self.dequantized_weight().T
        if self.bias is not None:
            y = y + self.bias
        return y.to(x.dtype)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bits={self.bits}, "
            f"group_size={self.group_size}"
        )


def module_bytes(module: nn.Module) -> int:
    """Bytes a forward pass reads from ``module``'s own stored tensors (packed words, every side vector,
    tables, bias): computed from the actual buffers and parameters, not from a formula."""
    return sum(
        t.numel() * t.element_size()
        for t in (*module.parameters(recurse=False), *module.buffers(recurse=False))
        if t is not None
    )
