"""The video testbed for the cache reproductions: moving-sprite clips, a tiny Wan DiT, an Euler sampler.

Nothing downloads. :func:`moving_sprites` draws seeded clips of coloured squares moving at constant
velocities (wrapping around the frame); the class label is the direction of motion. :func:`tiny_wan` is a
six-block :class:`diffusers.WanTransformer3DModel` that works directly in pixel space (no VAE), conditioned
on a one-hot class "text" token. :func:`train_testbed` fits it by rectified-flow matching in a few minutes
on CPU and :func:`pretrained_testbed` caches the weights (safetensors, via ``save_pretrained``) so that
later runs load them in a second. :func:`sample_flow_euler` is the flow-matching Euler sampler with
optional classifier-free guidance; it wraps each transformer call in a named cache context ("cond",
"uncond") with the step index, sigma and number of steps, exactly as diffusers' ``WanPipeline`` does.

:func:`motion_accuracy` is the testbed's validity check: the fraction of generated clips that move in their
labelled direction (:func:`motion_directions`), against :data:`MOTION_ACCURACY_MIN`. The recipe knobs
``max_sprites``, ``sprite_sides``, ``speeds``, ``patch_frames`` (time patches) and ``ema_decay`` (EMA
weights) were added for the redesign attempts described in ``docs/navicache.md``; none of those reached the
threshold within the CPU budget.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from icml_generative.cache.context import cache_context

DIRECTIONS = ((0, 1), (0, -1), (1, 0), (-1, 0))  # (dy, dx) per class: right, left, down, up
TEXT_DIM = 8  # width of the one-hot class token fed as encoder_hidden_states


@dataclass(frozen=True)
class TestbedConfig:
    """Size of the clips and of the model, and the training recipe (all of it keys the weight cache)."""

    __test__ = False  # not a pytest test class

    frames: int = 8
    size: int = 16
    channels: int = 3
    patch_frames: int = 1
    num_layers: int = 6
    num_heads: int = 2
    head_dim: int = 16
    ffn_dim: int = 64
    max_sprites: int = 2
    sprite_sides: tuple[int, ...] = (3, 4, 5)
    speeds: tuple[int, ...] = (1, 2)
    train_steps: int = 1200
    batch_size: int = 8
    lr: float = 1e-3
    cfg_dropout: float = 0.15
    ema_decay: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.patch_frames < 1 or self.frames % self.patch_frames:
            raise ValueError(
                f"patch_frames must be a positive divisor of frames ({self.frames}), got {self.patch_frames}"
            )
        if not self.speeds or any(v < 1 for v in self.speeds):
            raise ValueError(f"speeds must be a non-empty tuple of positive integers, got {self.speeds!r}")
        if not self.sprite_sides or any(not 1 <= v <= self.size for v in self.sprite_sides):
            raise ValueError(f"sprite_sides must lie in [1, size={self.size}], got {self.sprite_sides!r}")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"ema_decay must be in [0, 1), got {self.ema_decay!r}")

    def key(self) -> str:
        # the fields added after the first recipe enter the key only when they differ from it, so that
        # weights cached for that recipe keep their key
        fields = {k: v for k, v in asdict(self).items() if k not in _LATER_FIELDS or _LATER_FIELDS[k] != v}
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]


_LATER_FIELDS = {
    "patch_frames": 1,
    "max_sprites": 2,
    "sprite_sides": (3, 4, 5),
    "speeds": (1, 2),
    "ema_decay": 0.0,
}


def moving_sprites(
    n: int, cfg: TestbedConfig = TestbedConfig(), seed: int = 0, max_sprites: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` clips ``(n, C, F, H, W)`` in [-1, 1] and their labels ``(n,)`` (direction of motion, 0..3).

    Each clip holds one to ``max_sprites`` (default ``cfg.max_sprites``) coloured squares (sides from
    ``cfg.sprite_sides``) on a dark background, each moving by a speed from ``cfg.speeds`` pixels per frame in
    the labelled direction, wrapping around the frame (a torus, so nothing leaves).
    """
    if n < 1:
        raise ValueError(f"n must be a positive integer, got {n}")
    max_sprites = cfg.max_sprites if max_sprites is None else max_sprites
    if max_sprites < 1:
        raise ValueError(f"max_sprites must be a positive integer, got {max_sprites}")
    g = torch.Generator().manual_seed(seed)
    clips = torch.full((n, cfg.channels, cfg.frames, cfg.size, cfg.size), -0.8)
    labels = torch.randint(0, len(DIRECTIONS), (n,), generator=g)
    ys = torch.arange(cfg.size)
    for i in range(n):
        dy, dx = DIRECTIONS[labels[i]]
        for _ in range(int(torch.randint(1, max_sprites + 1, (1,), generator=g))):
            side = cfg.sprite_sides[int(torch.randint(len(cfg.sprite_sides), (1,), generator=g))]
            y0, x0 = (int(v) for v in torch.randint(0, cfg.size, (2,), generator=g))
            speed = cfg.speeds[int(torch.randint(len(cfg.speeds), (1,), generator=g))]
            colour = torch.rand(cfg.channels, generator=g) * 1.6 - 0.6  # (C,)
            for f in range(cfg.frames):
                rows = (y0 + dy * speed * f + ys[:side]) % cfg.size
                cols = (x0 + dx * speed * f + ys[:side]) % cfg.size
                clips[i, :, f, rows[:, None], cols[None, :]] = colour[:, None, None]
    return clips, labels


def class_tokens(labels: torch.Tensor) -> torch.Tensor:
    """One-hot class tokens ``(n, 1, TEXT_DIM)``; the all-zero token is the unconditional one."""
    return torch.nn.functional.one_hot(labels.long(), TEXT_DIM).float()[:, None, :]


def tiny_wan(cfg: TestbedConfig = TestbedConfig()):
    """A randomly initialised tiny ``WanTransformer3DModel`` for pixel-space clips ``(B, C, F, H, W)``."""
    from diffusers import WanTransformer3DModel

    torch.manual_seed(cfg.seed)
    return WanTransformer3DModel(
        patch_size=(cfg.patch_frames, 2, 2),
        num_attention_heads=cfg.num_heads,
        attention_head_dim=cfg.head_dim,
        in_channels=cfg.channels,
        out_channels=cfg.channels,
        text_dim=TEXT_DIM,
        freq_dim=32,
        ffn_dim=cfg.ffn_dim,
        num_layers=cfg.num_layers,
        cross_attn_norm=True,
        qk_norm="rms_norm_across_heads",
        rope_max_seq_len=32,
    )


def train_testbed(cfg: TestbedConfig = TestbedConfig(), progress: bool = True):
    """Train :func:`tiny_wan` by rectified-flow matching on fresh :func:`moving_sprites` batches.

    ``x_σ = (1 − σ)·x₀ + σ·ε`` with ``σ`` logit-normal, target velocity ``ε − x₀`` (diffusers'
    flow-matching convention, timestep ``1000·σ``); the class token is dropped with probability
    ``cfg_dropout`` so that classifier-free guidance works. Returns the model in eval mode.
    """
    model = tiny_wan(cfg).train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 100) * 0.5 * (1 + math.cos(math.pi * min(s / cfg.train_steps, 1.0)))
    )
    ema = None
    if cfg.ema_decay > 0:
        ema = copy.deepcopy(model).eval().requires_grad_(False)
    g = torch.Generator().manual_seed(cfg.seed + 1)
    steps = range(cfg.train_steps)
    if progress:
        from tqdm.auto import tqdm

        steps = tqdm(steps, desc="training the NaviCache testbed DiT", mininterval=5)
    for step in steps:
        x0, labels = moving_sprites(cfg.batch_size, cfg, seed=cfg.seed * 1_000_003 + step)
        tokens = class_tokens(labels)
        drop = torch.rand(cfg.batch_size, generator=g) < cfg.cfg_dropout
        tokens[drop] = 0.0
        sigma = torch.sigmoid(torch.randn(cfg.batch_size, generator=g))  # (B,) logit-normal
        noise = torch.randn(x0.shape, generator=g)
        s = sigma[:, None, None, None, None]
        x_t = (1 - s) * x0 + s * noise
        pred = model(x_t, timestep=sigma * 1000, encoder_hidden_states=tokens, return_dict=False)[0]
        loss = (pred - (noise - x0)).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if ema is not None:
            # warm-started decay (as in timm's ModelEmaV3): early weights are forgotten quickly
            decay = min(cfg.ema_decay, (1 + step) / (10 + step))
            with torch.no_grad():
                for pe, pm in zip(ema.parameters(), model.parameters(), strict=True):
                    pe.lerp_(pm, 1 - decay)
        if progress and step % 100 == 0:
            steps.set_postfix(loss=f"{loss.item():.4f}")
    return (model if ema is None else ema).eval()


def pretrained_testbed(
    cfg: TestbedConfig = TestbedConfig(), cache_dir: str | os.PathLike | None = None, progress: bool = True
):
    """The trained testbed model, loaded from ``cache_dir`` if an earlier run saved it, else trained now.

    Returns ``(model, info)`` with ``info = {"path", "trained_now", "train_seconds"}``. With ``cache_dir``
    None nothing is saved. The save is atomic (a temporary folder renamed into place), so a half-written
    cache is never read.
    """
    from diffusers import WanTransformer3DModel

    target = None if cache_dir is None else Path(cache_dir).expanduser() / f"navicache-testbed-{cfg.key()}"
    if target is not None and (target / "config.json").is_file():
        model = WanTransformer3DModel.from_pretrained(target).eval()
        return model, {"path": str(target), "trained_now": False, "train_seconds": 0.0}
    start = time.perf_counter()
    model = train_testbed(cfg, progress=progress)
    seconds = time.perf_counter() - start
    if target is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-navicache-"))
        try:
            model.save_pretrained(tmp)
            os.replace(tmp, target)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if not (target / "config.json").is_file():
                raise
    return model, {
        "path": None if target is None else str(target),
        "trained_now": True,
        "train_seconds": seconds,
    }


def flow_sigmas(num_steps: int, shift: float = 3.0) -> torch.Tensor:
    """``num_steps + 1`` decreasing sigmas from 1 to 0 with the SD3/Wan time shift ``sσ / (1 + (s − 1)σ)``."""
    if num_steps < 1:
        raise ValueError(f"num_steps must be a positive integer, got {num_steps}")
    if shift <= 0:
        raise ValueError(f"shift must be positive, got {shift}")
    s = torch.linspace(1.0, 0.0, num_steps + 1, dtype=torch.float64)
    return shift * s / (1 + (shift - 1) * s)


@torch.no_grad()
def sample_flow_euler(
    model,
    noise: torch.Tensor,
    cond: torch.Tensor,
    uncond: torch.Tensor | None = None,
    guidance_scale: float = 1.0,
    num_steps: int = 30,
    shift: float = 3.0,
    step_callback=None,
) -> torch.Tensor:
    """Integrate the flow-matching ODE from ``noise`` (σ = 1) to a clip (σ = 0) with Euler steps.

    ``cond``/``uncond`` are ``encoder_hidden_states``; with ``uncond`` given and ``guidance_scale != 1``
    each step makes two transformer passes, in the cache contexts "cond" then "uncond", and combines them as
    ``v_u + w·(v_c − v_u)``. ``step_callback(i, x, v)`` is called after each step's velocity is known.
    """
    if noise.ndim != 5:
        raise ValueError(f"noise must be (B, C, F, H, W), got shape {tuple(noise.shape)}")
    sigmas = flow_sigmas(num_steps, shift)
    use_cfg = uncond is not None and guidance_scale != 1.0
    x = noise.clone()
    for i in range(num_steps):
        sigma = float(sigmas[i])
        t = torch.full((x.shape[0],), sigma * 1000.0)
        fields = {"step_index": i, "sigma": sigma, "num_inference_steps": num_steps}
        with cache_context(model, "cond", **fields):
            v = model(x, timestep=t, encoder_hidden_states=cond, return_dict=False)[0]
        if use_cfg:
            with cache_context(model, "uncond", **fields):
                v_u = model(x, timestep=t, encoder_hidden_states=uncond, return_dict=False)[0]
            v = v_u + guidance_scale * (v - v_u)
        if step_callback is not None:
            step_callback(i, x, v)
        x = x + (float(sigmas[i + 1]) - sigma) * v
    return x


# The testbed check, fixed before the redesigned testbed was trained: the generated clips must move in the
# direction of their class label in at least this fraction of clips (chance: 1 / len(DIRECTIONS) = 0.25).
MOTION_ACCURACY_MIN = 0.75


def motion_directions(clips: torch.Tensor, speeds: tuple[int, ...] = (1, 2)) -> torch.Tensor:
    """The dominant direction of motion of each clip ``(n, C, F, H, W)``, as class indices ``(n,)``.

    For each direction of :data:`DIRECTIONS` and each speed, the circular cross-correlation between every
    frame (per-frame mean removed) shifted by ``speed`` pixels in that direction and the next frame, summed
    over channels, frames and pixels; the direction with the largest correlation (over speeds) wins.
    """
    if not isinstance(clips, torch.Tensor) or clips.ndim != 5 or clips.shape[2] < 2:
        shape = tuple(clips.shape) if isinstance(clips, torch.Tensor) else type(clips).__name__
        raise ValueError(f"clips must be a tensor (n, C, F >= 2, H, W), got {shape}")
    if not speeds or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in speeds):
        raise ValueError(f"speeds must be a non-empty tuple of positive integers, got {speeds!r}")
    x = clips.double() - clips.double().mean(dim=(3, 4), keepdim=True)
    scores = []
    for dy, dx in DIRECTIONS:
        per_speed = [
            (torch.roll(x[:, :, :-1], (dy * v, dx * v), (3, 4)) * x[:, :, 1:]).sum(dim=(1, 2, 3, 4))
            for v in speeds
        ]
        scores.append(torch.stack(per_speed).amax(0))  # (n,)
    return torch.stack(scores, 1).argmax(1)


@torch.no_grad()
def motion_accuracy(
    model,
    cfg: TestbedConfig,
    n: int = 32,
    num_steps: int = 30,
    guidance_scale: float = 4.0,
    shift: float = 3.0,
    seed: int = 0,
) -> dict:
    """Does the model make clips that move as their label says? Samples ``n`` clips (labels cycling over
    the directions) and compares :func:`motion_directions` with the labels.

    Returns ``{"accuracy", "chance", "data_accuracy", "n"}``; ``data_accuracy`` is the same measure on
    ``n`` training clips (the measure's own ceiling, 1.0 when it reads the data correctly).
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % len(DIRECTIONS)
    noise = torch.randn(n, cfg.channels, cfg.frames, cfg.size, cfg.size, generator=g)
    cond = class_tokens(labels)
    clips = sample_flow_euler(model, noise, cond, torch.zeros_like(cond), guidance_scale, num_steps, shift)
    data, data_labels = moving_sprites(n, cfg, seed=seed + 7_777)
    return {
        "accuracy": (motion_directions(clips, cfg.speeds) == labels).double().mean().item(),
        "chance": 1 / len(DIRECTIONS),
        "data_accuracy": (motion_directions(data, cfg.speeds) == data_labels).double().mean().item(),
        "n": n,
    }
