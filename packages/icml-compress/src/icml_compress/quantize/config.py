"""``QuantConfig``: one dataclass selects the method (RTN, QTIP-style trellis, Proteus) and its knobs."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields

import torch

from icml_compress.proteus.codes import CODE_NAMES
from icml_compress.validation import check_bool, check_instance, check_int, check_one_of, check_positive
from icml_kernels.trellis import TrellisFormat

METHODS = ("rtn", "trellis", "proteus")


@dataclass(frozen=True)
class QuantConfig:
    """How to quantize the Linear layers of a causal LM.

    Attributes:
        method: ``rtn`` (asymmetric min-max per group), ``trellis`` (incoherence + block LDLQ + Viterbi on
            the bitshift trellis with a fixed ``code``) or ``proteus`` (trellis with the ``mulbal`` code,
            the per-layer candidate picked from the vetted pool, then optional compensation/distillation).
        code: trellis code for ``method="trellis"`` (``1mad``, ``3inst``, ``hyb``, ``lut``, ``mulbal``).
        bits: bits per weight (``K`` of the trellis, the RTN grid bits).
        L: trellis state bits. T: trellis tile length (one tile = ``T`` consecutive weights of a row; the
            LDLQ column block is one tile wide, so ``T`` must divide every rotated input dimension).
        group_size: RTN group size.
        scale_override: the rotated weights are scaled to this fraction of the code's RMS (QTIP: 0.9).
        damping: Hessian regularizer, ``damping * mean(diag H)`` added to the diagonal.
        n_candidates: how many members of the mulbal pool Proteus tries per layer (first ones).
        select_rows: rows per layer on which the candidates are compared (a fixed random subsample).
        compensation: closed-form per-channel scales under the Hessian metric (Proteus; also for
            ``method="trellis"``, so that a fixed-code baseline can get the same treatment).
        distill_steps: few-shot KL distillation steps (0 = off); distill_lr: its relative learning rate.
            Both tune only affine statistics (the packed words stay); neither applies to ``rtn``.
        distill_chat: chat transcripts mixed into the distillation set (0 = calibration text only): questions
            about the stdlib ``pydoc_data`` topics answered greedily by the float model in the tokenizer's
            chat template (:func:`~icml_compress.quantize.distill.chat_transcripts`); the distillation
            steps then alternate calibration and chat sequences. Needs a tokenizer with a chat template.
        n_calibration, seq_len: calibration sequences of ``seq_len`` tokens.
        skip: substrings of module names never quantized (``lm_head`` by default; embeddings are not
            ``nn.Linear`` and are never touched).
        max_blocks: quantize only Linear layers inside the first ``max_blocks`` transformer blocks
            (the block index is the first integer in the module name); None = all.
        seed: seeds the random signs, the row subsample and the ``lut``/``hyb`` tables.
        device: where the trellis methods quantize (rotations, Hessian factorization, candidate selection,
            LDLQ, Viterbi): a torch device string (``"cpu"``, ``"cuda"``, ``"cuda:1"``); None (default) =
            the model's device. Calibration runs where the model is; the quantized layers are put there.
            The Viterbi returns the same paths on every device; another device can round the float64
            LDLQ products differently and so turn a near-tie (on the tiny test Llama on an H200 every
            packed word came out equal; SmolLM2 quantized on one CPU thread and on two gave the same).
    """

    method: str = "proteus"
    code: str = "mulbal"
    bits: int = 2
    L: int = 10
    T: int = 64
    group_size: int = 64
    scale_override: float = 0.9
    damping: float = 0.01
    n_candidates: int = 8
    select_rows: int = 32
    compensation: bool = False
    distill_steps: int = 0
    distill_lr: float = 2e-3
    distill_chat: int = 0
    n_calibration: int = 32
    seq_len: int = 256
    skip: tuple[str, ...] = ("lm_head",)
    max_blocks: int | None = None
    seed: int = 0
    device: str | None = None

    def __post_init__(self) -> None:
        check_one_of(self.method, "method", METHODS)
        check_one_of(self.code, "code", CODE_NAMES)
        if self.method == "proteus" and self.code != "mulbal":
            raise ValueError(f"method 'proteus' uses code 'mulbal', got code={self.code!r}")
        check_int(self.bits, "bits", 1, 8 if self.method == "rtn" else 4)
        if self.method == "rtn" and self.bits not in (1, 2, 4, 8):  # what RTNLinear packs into whole bytes
            raise ValueError(f"bits must be 1, 2, 4 or 8 for method 'rtn', got bits={self.bits}")
        if self.method != "rtn":  # L, bits (K), V and T through the packed format (K*T whole words)
            TrellisFormat(self.L, self.bits, self.V, self.T).check_packable()
        for name, minimum in (
            ("L", 1),  # also for rtn, which does not use it (range checked by the trellis methods)
            ("T", 16),
            ("group_size", 1),
            ("n_candidates", 1),
            ("select_rows", 1),
            ("distill_steps", 0),
            ("distill_chat", 0),
            ("n_calibration", 1),
            ("seq_len", 2),
            ("seed", 0),
        ):
            check_int(getattr(self, name), name, minimum)
        if self.max_blocks is not None:
            check_int(self.max_blocks, "max_blocks", 1)
        for name in ("scale_override", "damping", "distill_lr"):
            check_positive(getattr(self, name), name)
        check_bool(self.compensation, "compensation")
        check_instance(self.skip, "skip", tuple, "tuple of str")
        for s in self.skip:
            check_instance(s, "skip", str, "tuple of str")
        if self.method == "rtn" and (self.compensation or self.distill_steps):
            raise ValueError(
                "compensation and distill_steps apply to the trellis methods ('proteus', 'trellis'), "
                f"not method {self.method!r}"
            )
        if self.distill_chat and not self.distill_steps:
            raise ValueError("distill_chat needs distill_steps > 0")
        if self.device is not None:
            check_instance(self.device, "device", str, "str (a torch device) or None")
            try:
                torch.device(self.device)
            except RuntimeError as exc:
                raise ValueError(
                    f"device must name a torch device ('cpu', 'cuda', 'cuda:1'), got {self.device!r}"
                ) from exc

    @property
    def V(self) -> int:
        """Weights per trellis state: 2 for ``hyb``, else 1."""
        return 2 if self.code == "hyb" else 1

    @property
    def label(self) -> str:
        """A short name: ``rtn-2bit-g64``, ``trellis-1mad``, ``proteus+comp+distill``,
        ``trellis-1mad+comp`` ..."""
        if self.method == "rtn":
            return f"rtn-{self.bits}bit-g{self.group_size}"
        base = f"trellis-{self.code}" if self.method == "trellis" else "proteus"
        return base + ("+comp" if self.compensation else "") + ("+distill" if self.distill_steps else "")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["skip"] = list(self.skip)
        for name in ("distill_chat", "device"):  # configs from before these fields keep their digest
            if not d[name]:  # (cache keys)
                del d[name]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> QuantConfig:
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown QuantConfig fields: {sorted(unknown)}")
        d = dict(d)
        if "skip" in d:
            d["skip"] = tuple(d["skip"])
        return cls(**d)

    def digest(self) -> str:
        """A short hash of the config (cache keys)."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:12]
