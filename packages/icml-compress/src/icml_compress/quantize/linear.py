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

Under ``torch.compile`` (``fullgraph=True`` included) the cache keys, which read storage addresses and
version counters, are not traced (dynamo raised ``Unsupported: Data pointer comparison`` on them): off
CUDA the compiled forward is one registered op, ``icml_compress::proteus_cached_linear`` (for
:class:`RTNLinear` ``icml_compress::rtn_cached_linear``), whose kernel runs the eager product with the same
cache, so compiled and eager share one decoded weight and give the same logits. On CUDA, and wherever the
input requires grad (the ops have no backward), the compiled forward decodes the weight inside the graph
on every call (as torchao and HQQ dequantize inside theirs), on the rotated path the CUDA forward takes
(:class:`RTNLinear`: its codes unpacked in the graph).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.weak import WeakIdKeyDictionary

from icml_compress.quantize.incoherence import rotate, unrotate
from icml_compress.validation import check_bool, check_int
from icml_kernels.trellis import TrellisFormat, trellis_decode_op, trellis_gemv_op

NO_MULBAL = (1, 0, 8)  # the ops' (a, b, m) for the codes that take none


def compiling() -> bool:
    """True while ``torch.compile`` (dynamo) traces the caller, which then reads no cache key itself."""
    return torch.compiler.is_compiling()


def tensors_key(*tensors: torch.Tensor) -> tuple:
    """What identifies the contents of ``tensors`` without reading them (no device synchronization): each
    one's identity, storage address, version counter (bumped by every in-place change), device and dtype."""
    return tuple((id(t), t.data_ptr(), t._version, t.device, t.dtype) for t in tensors)


# Each module's decoded weight, keyed (weakly: dropped with the tensor) on its packed words or codes, the
# value holding the other tensors so their ids stay theirs; one cache for the eager forward and the ops.
_DECODED: WeakIdKeyDictionary = WeakIdKeyDictionary()


def cached_weight(tensors: tuple[torch.Tensor, ...], decode) -> torch.Tensor:
    """``decode()``, decoded again only once one of ``tensors`` changed (see :func:`tensors_key`)."""
    key = tensors_key(*tensors)
    entry = _DECODED.get(tensors[0])
    if entry is None or entry[1] != key:
        entry = _DECODED[tensors[0]] = (tensors[1:], key, decode())
    return entry[2]


def proteus_weight(packed, alpha, beta, su, sv, op_args: tuple) -> torch.Tensor:
    """The :class:`ProteusLinear` weight in the original basis, ``(out, in)`` float32, decoded now."""
    raw = trellis_decode_op(packed, *op_args).reshape(sv.shape[0], su.shape[0])
    A = unrotate(raw * alpha + beta)  # rows: R_in^T
    return (unrotate(A.T.contiguous()).T * sv.detach()[:, None] * su.detach()[None, :]).contiguous()


def rtn_weight(codes, scale, offset, bits: int, group_size: int) -> torch.Tensor:
    """The :class:`RTNLinear` weight, ``(out, in)`` float32, unpacked now."""
    per = 8 // bits
    shifts = torch.arange(per, dtype=torch.int32, device=codes.device) * bits
    c = ((codes.to(torch.int32).unsqueeze(-1) >> shifts) & ((1 << bits) - 1)).float()
    c = c.reshape(codes.shape[0], -1, group_size)  # (out, groups, g)
    w = offset.float().unsqueeze(-1) + scale.float().unsqueeze(-1) * c
    return w.reshape(codes.shape[0], -1)


@torch.library.custom_op("icml_compress::proteus_cached_linear", mutates_args=())
def proteus_cached_linear(
    x: torch.Tensor,
    packed: torch.Tensor,
    alpha: torch.Tensor,
    beta: torch.Tensor,
    su: torch.Tensor,
    sv: torch.Tensor,
    table: torch.Tensor | None,
    code: str,
    L: int,
    K: int,
    V: int,
    T: int,
    a: int,
    b: int,
    m: int,
) -> torch.Tensor:
    """``x @ W^T`` (float32 ``x``) with :class:`ProteusLinear`'s cached weight: its eager CPU forward as one
    op, so a compiled graph keeps the cache. A new tensor: never an alias of the cached weight."""
    op_args = (code, L, K, V, T, 1.0, 0.0, a, b, m, table)
    tensors = (packed, alpha, beta, su, sv)
    return x @ cached_weight(tensors, lambda: proteus_weight(*tensors, op_args)).T


@torch.library.custom_op("icml_compress::rtn_cached_linear", mutates_args=())
def rtn_cached_linear(
    x: torch.Tensor,
    codes: torch.Tensor,
    scale: torch.Tensor,
    offset: torch.Tensor,
    bits: int,
    group_size: int,
) -> torch.Tensor:
    """``x @ W^T`` (float32 ``x``) with :class:`RTNLinear`'s cached weight (see :func:`proteus_cached_linear`)."""
    tensors = (codes, scale, offset)
    return x @ cached_weight(tensors, lambda: rtn_weight(*tensors, bits, group_size)).T


def _cached_linear_fake(x: torch.Tensor, weight: torch.Tensor, *args: Any) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], weight.shape[0]))  # the packed words/codes: (out, ...)


proteus_cached_linear.register_fake(_cached_linear_fake)
rtn_cached_linear.register_fake(_cached_linear_fake)


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

    @property
    def _cache(self) -> tuple | None:
        """The decoded weight's cache entry (tensors, key, weight), ``None`` before one was decoded."""
        return _DECODED.get(self.packed)

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
        return proteus_weight(self.packed, self.alpha, self.beta, self.su, self.sv, self._op_args())

    def dequantized_weight(self) -> torch.Tensor:
        """The weight this module applies, ``(out, in)`` float32, in the original basis (cached while the
        packed words, ``alpha``, ``beta``, ``su`` and ``sv`` are unchanged; decoded on every call, without
        the cache, under ``torch.compile``)."""
        if compiling():
            return self._decode_weight()
        return cached_weight((self.packed, self.alpha, self.beta, self.su, self.sv), self._decode_weight)

    def clear_cache(self) -> None:
        _DECODED.pop(self.packed, None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        training = any(p.requires_grad for p in (self.alpha, self.beta, self.su, self.sv))
        traced = compiling()
        if traced and not (training or x.is_cuda or x.requires_grad):  # the CPU path, one op: cached
            a, b, m = self.mulbal or NO_MULBAL
            args = (self.packed, self.alpha, self.beta, self.su, self.sv, self._op_args()[-1])
            y = proteus_cached_linear(x.float(), *args, self.code, self.L, self.K, self.V, self.T, a, b, m)
        elif training or x.is_cuda or traced:  # traced: decoded inside the graph, between the rotations
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
        return rtn_weight(self.codes, self.scale, self.offset, self.bits, self.group_size)

    def dequantized_weight(self) -> torch.Tensor:
        """The weight this module applies, ``(out, in)`` float32 (cached while the codes, scales and offsets
        are unchanged; unpacked on every call, without the cache, under ``torch.compile``)."""
        if compiling():
            return self._decode_weight()
        return cached_weight((self.codes, self.scale, self.offset), self._decode_weight)

    def clear_cache(self) -> None:
        _DECODED.pop(self.codes, None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if compiling() and not (x.is_cuda or x.requires_grad):  # one op: the eager cache (CUDA: decoded)
            args = (self.codes, self.scale, self.offset, self.bits, self.group_size)
            y = rtn_cached_linear(x.float(), *args)
        else:
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
