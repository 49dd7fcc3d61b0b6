"""The recursive reasoner: one small network applied in nested cycles to a latent state ``z_L`` and an answer
state ``z_H`` (the Tiny Recursive Model, TRM), with the inputs Deep Improvement Supervision (DIS) adds: a
timestep embedding and, for the classifier-free-guidance variant, a reference/conditional mode embedding.

One *supervision step* runs ``h_cycles`` cycles; a cycle updates ``z_L <- net(z_L, z_H + x)`` ``l_cycles`` times,
then ``z_H <- net(z_H, z_L)``. The first ``h_cycles - 1`` cycles run without gradients, only the last one is
differentiated (TRM's "1-step gradient"), and the carry ``(z_H, z_L)`` leaves the step detached. A step
therefore costs ``h_cycles * (l_cycles + 1)`` network evaluations; :func:`count_evaluations` counts them with a
forward hook on :attr:`RecursiveModel.net`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from icml_theory.validation import check_choice, check_int, check_real, check_seed

METHODS = ("trm", "dis", "dis-cfg")
MIXERS = ("mlp", "attention")
LOSSES = ("stablemax", "softmax")


@dataclass(frozen=True)
class RecursiveConfig:
    """Sizes and the recursion schedule of a :class:`RecursiveModel`.

    ``method``: ``"trm"`` (deep supervision toward the solution at every step, halting head),
    ``"dis"`` (each step supervised toward the next frame of a corruption path, input = the previous
    prediction plus a timestep embedding, fixed steps) or ``"dis-cfg"`` (DIS with a reference and a
    conditional pass per step, combined by classifier-free guidance with weight ``guidance``).
    ``mixer``: ``"mlp"`` mixes positions with an MLP over the sequence (TRM's ``mlp_t``, for fixed-size grids)
    or ``"attention"`` (non-causal self-attention with learned positions).
    """

    vocab_size: int
    seq_len: int
    hidden: int = 64
    layers: int = 2
    mixer: str = "mlp"
    heads: int = 4
    expansion: int = 4
    h_cycles: int = 3
    l_cycles: int = 6
    supervision_steps: int = 16
    method: str = "trm"
    halt_exploration: float = 0.1
    loss: str = "stablemax"
    guidance: float = 2.0

    def __post_init__(self) -> None:
        check_int(self.vocab_size, "vocab_size", 2)
        check_int(self.seq_len, "seq_len", 1)
        check_int(self.hidden, "hidden", 1)
        check_int(self.layers, "layers", 1)
        check_choice(self.mixer, "mixer", MIXERS)
        check_int(self.heads, "heads", 1)
        if self.mixer == "attention" and self.hidden % self.heads:
            raise ValueError(
                f"hidden must be divisible by heads for mixer='attention', got {self.hidden} and {self.heads}"
            )
        check_int(self.expansion, "expansion", 1)
        check_int(self.h_cycles, "h_cycles", 1)
        check_int(self.l_cycles, "l_cycles", 1)
        check_int(self.supervision_steps, "supervision_steps", 1)
        check_choice(self.method, "method", METHODS)
        check_real(self.halt_exploration, "halt_exploration", "[0, 1]")
        check_choice(self.loss, "loss", LOSSES)
        check_real(self.guidance, "guidance", "[0, inf)")

    @property
    def evaluations_per_step(self) -> int:
        """Network evaluations of one supervision step per example (the CFG variant runs two passes)."""
        passes = 2 if self.method == "dis-cfg" else 1
        return passes * self.h_cycles * (self.l_cycles + 1)

    @property
    def evaluations(self) -> int:
        """Network evaluations per example of a full inference run (all supervision steps)."""
        return self.supervision_steps * self.evaluations_per_step


def trm_config(vocab_size: int, seq_len: int, **overrides) -> RecursiveConfig:
    """TRM's official schedule: ``h_cycles=3``, ``l_cycles=6``, 16 supervision steps, 2 layers, halting
    exploration 0.1, stablemax loss: 16 * 3 * 7 = 336 network evaluations per example."""
    return RecursiveConfig(vocab_size=vocab_size, seq_len=seq_len, **overrides)


def dis_config(vocab_size: int, seq_len: int, *, cfg: bool = False, **overrides) -> RecursiveConfig:
    """DIS's official schedule: ``h_cycles=1``, ``l_cycles=2``, 6 supervision steps, 1 layer: 6 * 1 * 3 = 18
    network evaluations per example (36 with ``cfg=True``, whose steps run a reference and a conditional pass)."""
    settings = {
        "h_cycles": 1,
        "l_cycles": 2,
        "supervision_steps": 6,
        "layers": 1,
        "method": "dis-cfg" if cfg else "dis",
        "halt_exploration": 0.0,
        "loss": "softmax",
    }
    return RecursiveConfig(vocab_size=vocab_size, seq_len=seq_len, **{**settings, **overrides})


def _rms_norm(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)


class _SwiGLU(nn.Module):
    def __init__(self, width: int, inner: int) -> None:
        super().__init__()
        self.up = nn.Linear(width, 2 * inner, bias=False)
        self.down = nn.Linear(inner, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.up(x).chunk(2, -1)
        return self.down(F.silu(gate) * up)


class _Block(nn.Module):
    """Post-norm block: sequence mixing (an MLP over positions, or self-attention), then a SwiGLU MLP."""

    def __init__(self, cfg: RecursiveConfig) -> None:
        super().__init__()
        self.mixer = cfg.mixer
        self.heads = cfg.heads
        if cfg.mixer == "mlp":
            self.mix = _SwiGLU(cfg.seq_len, cfg.expansion * cfg.seq_len)
        else:
            self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden, bias=False)
            self.out = nn.Linear(cfg.hidden, cfg.hidden, bias=False)
        self.mlp = _SwiGLU(cfg.hidden, cfg.expansion * cfg.hidden)

    def _attend(self, h: torch.Tensor) -> torch.Tensor:
        b, n, d = h.shape
        q, k, v = self.qkv(h).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        return self.out(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        mixed = self.mix(h.transpose(1, 2)).transpose(1, 2) if self.mixer == "mlp" else self._attend(h)
        h = _rms_norm(h + mixed)
        return _rms_norm(h + self.mlp(h))


class ReasoningNet(nn.Module):
    """The one network TRM applies at every recursion: ``net(h, injection) = blocks(h + injection)``."""

    def __init__(self, cfg: RecursiveConfig) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(_Block(cfg) for _ in range(cfg.layers))

    def forward(self, h: torch.Tensor, injection: torch.Tensor) -> torch.Tensor:
        h = h + injection
        for block in self.blocks:
            h = block(h)
        return h


Carry = tuple[torch.Tensor, torch.Tensor]


class RecursiveModel(nn.Module):
    """TRM / DIS network: token embedding, the shared :class:`ReasoningNet`, an output head on ``z_H`` and a
    halting head (the Q head: one logit per example read from the mean of ``z_H``; TRM reads it at a puzzle
    embedding position, which fixed-size grids do not need).

    ``seed`` fixes the initialization (and the initial carry), so equal configs and seeds give equal models.
    """

    h_init: torch.Tensor
    l_init: torch.Tensor

    def __init__(self, config: RecursiveConfig, seed: int = 0) -> None:
        super().__init__()
        if not isinstance(config, RecursiveConfig):
            raise TypeError(f"config must be a RecursiveConfig, got {type(config).__name__}")
        self.config = config
        gen = torch.Generator().manual_seed(check_seed(seed))
        with torch.random.fork_rng(devices=[]):
            # the CPU generator only (torch.manual_seed would also reseed every CUDA device's, which the fork
            # does not restore); the modules are built on the CPU
            torch.default_generator.manual_seed(int(torch.randint(0, 2**62, (1,), generator=gen)))
            d = config.hidden
            self.embed = nn.Embedding(config.vocab_size, d)
            nn.init.trunc_normal_(self.embed.weight, std=1.0 / math.sqrt(d))
            self.position = (
                nn.Parameter(torch.randn(config.seq_len, d) / math.sqrt(d))
                if config.mixer == "attention"
                else None
            )
            dis = config.method != "trm"
            self.timestep = nn.Embedding(config.supervision_steps, d) if dis else None
            self.mode = nn.Embedding(2, d) if config.method == "dis-cfg" else None
            for table in (self.timestep, self.mode):
                if table is not None:
                    nn.init.trunc_normal_(table.weight, std=1.0 / math.sqrt(d))
            self.net = ReasoningNet(config)
            self.head = nn.Linear(d, config.vocab_size, bias=False)
            self.q_head = nn.Linear(d, 1)
            nn.init.zeros_(self.q_head.weight)
            nn.init.constant_(self.q_head.bias, -5.0)  # TRM: start far from halting
            self.register_buffer("h_init", nn.init.trunc_normal_(torch.empty(d), std=1.0))
            self.register_buffer("l_init", nn.init.trunc_normal_(torch.empty(d), std=1.0))

    # ------------------------------------------------------------------ the recursion
    def initial_carry(self, batch: int) -> Carry:
        """``(z_H, z_L)`` at the start of the first supervision step: TRM's fixed random initial vectors (buffers, not learned)."""
        shape = (batch, self.config.seq_len, self.config.hidden)
        return self.h_init.expand(shape).clone(), self.l_init.expand(shape).clone()

    def input_embedding(
        self, tokens: torch.Tensor, step: int | None = None, mode: int | None = None
    ) -> torch.Tensor:
        """Embed ``tokens`` (batch, seq_len), adding the timestep (DIS) and the mode (CFG: 0 reference,
        1 conditional) embeddings."""
        x = self.embed(tokens) * math.sqrt(self.config.hidden)
        if self.position is not None:
            x = x + self.position
        if self.timestep is not None:
            if step is None:
                raise ValueError(f"step is required for method={self.config.method!r}")
            x = x + self.timestep.weight[step]
        if self.mode is not None:
            if mode is None:
                raise ValueError("mode is required for method='dis-cfg' (0 reference, 1 conditional)")
            x = x + self.mode.weight[mode]
        return x

    def _cycle(self, x: torch.Tensor, z_h: torch.Tensor, z_l: torch.Tensor) -> Carry:
        for _ in range(self.config.l_cycles):
            z_l = self.net(z_l, z_h + x)
        return self.net(z_h, z_l), z_l

    def recurse(self, x: torch.Tensor, carry: Carry) -> Carry:
        """One supervision step's recursion: ``h_cycles - 1`` cycles without gradients, the last with them."""
        z_h, z_l = carry
        with torch.no_grad():
            for _ in range(self.config.h_cycles - 1):
                z_h, z_l = self._cycle(x, z_h, z_l)
        return self._cycle(x, z_h, z_l)

    def forward(
        self, tokens: torch.Tensor, carry: Carry, step: int | None = None, mode: int | None = None
    ) -> tuple[Carry, torch.Tensor, torch.Tensor]:
        """One supervision step: the detached new carry, the logits (batch, seq_len, vocab) and the halting
        logit (batch,)."""
        z_h, z_l = self.recurse(self.input_embedding(tokens, step, mode), carry)
        logits = self.head(z_h)
        q = self.q_head(z_h.mean(1)).squeeze(-1)
        return (z_h.detach(), z_l.detach()), logits, q

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | os.PathLike) -> None:
        """Write the config, the weights and their dtype to ``path`` atomically (a failed save leaves the old
        file); the parameters must share one dtype."""
        dtypes = {p.dtype for p in self.parameters()}
        if len(dtypes) > 1:  # load restores one dtype for the whole model
            raise ValueError(f"the model's parameters must share one dtype, got {sorted(map(str, dtypes))}")
        dtype = str(self.head.weight.dtype).removeprefix("torch.")
        path = Path(path)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        try:
            torch.save(
                {"config": dataclasses.asdict(self.config), "state": self.state_dict(), "dtype": dtype}, tmp
            )
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: str | os.PathLike, map_location: str | torch.device = "cpu") -> RecursiveModel:
        """A model written by :meth:`save`, with its config and weights, in the dtype it was saved in (a
        bfloat16 model loads as bfloat16; files written before the dtype was recorded load as float32)."""
        blob = torch.load(Path(path), map_location=map_location, weights_only=True)
        if not isinstance(blob, dict) or set(blob) - {"dtype"} != {"config", "state"}:
            raise ValueError(f"path must be a file written by RecursiveModel.save, got {str(path)!r}")
        dtype = getattr(torch, str(blob.get("dtype", "float32")), None)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise ValueError(f"path must be a file written by RecursiveModel.save, got {str(path)!r}")
        model = cls(RecursiveConfig(**blob["config"])).to(dtype)
        model.load_state_dict(blob["state"])
        return model


class EvaluationCounter:
    """Network evaluations per example, counted by a forward hook on ``model.net`` (see :func:`count_evaluations`)."""

    def __init__(self) -> None:
        self.total = 0  # sum over network calls of the batch size of the call

    def per_example(self, examples: int) -> float:
        return self.total / check_int(examples, "examples", 1)


@contextmanager
def count_evaluations(model: RecursiveModel) -> Iterator[EvaluationCounter]:
    """Count the network evaluations ``model`` runs inside the block, summed over examples::

    with count_evaluations(model) as counter:
        predict(model, puzzles)
    counter.per_example(len(puzzles))  # 336 for TRM's schedule, 18 for DIS's
    """
    if not isinstance(model, RecursiveModel):
        raise TypeError(f"model must be a RecursiveModel, got {type(model).__name__}")
    counter = EvaluationCounter()

    def hook(_module, args, _output) -> None:
        counter.total += int(args[0].shape[0])

    handle = model.net.register_forward_hook(hook)
    try:
        yield counter
    finally:
        handle.remove()
