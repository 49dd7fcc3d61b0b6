"""Whole-stack residual caching on diffusers' hook machinery, shared by NaviCache, EasyCache and TeaCache.

One decision per denoising step: compute the transformer's block stack, or skip it and return
``x + r``, the stack's input plus the residual ``r = out − x`` cached at the last computed step. The
head block's hook decides, the other blocks pass their input through when skipping, the tail block's hook
stores the new residual and feeds the policy its measurement when computing.

Per-context state (diffusers' :class:`~diffusers.hooks.hooks.StateManager`): every cache context ("cond",
"uncond", ...) keeps its own residual and inputs. The first context seen at step 0 of a run leads: it
makes the decision of each step, which the other contexts of that step reuse (the released NaviCache
logic), and only its measurements update the estimator. The first ``alignment_steps`` steps and the last
step are always computed.

The step: the context's ``step_index`` when the pipeline sets it (diffusers' Wan and Cosmos pipelines),
else the number of forwards run in that context since the run began (diffusers' TaylorSeer cache counts
steps the same way; most diffusers pipelines call ``cache_context("cond")`` with no step). A new run
(generation) begins after the pipeline's end-of-call ``reset_stateful_hooks`` (diffusers' convention,
``maybe_free_model_hooks``) and, where the leading context has a ``step_index``, when it is 0 (that alone:
no timestep is read for this). Where it has none, a new run begins when its counter has run the whole
schedule, when the context's ``timestep`` increases again (the scheduler restarted; on a diffusers model
whose pipeline puts no step index nor timestep in the context, e.g. Flux, the ``timestep`` argument of the
model's forward: so a generation that raised part-way does not leave the next one inside its run), and at
the first call whose timestep does not rise after two or more rising ones (an inversion, rising timesteps,
runs each call as a run of its own: nothing is skipped there, and the sampling run after it starts afresh).
A step is one model call: ``num_inference_steps`` is the denoising loop's length in model calls, which
diffusers pipelines expose as ``pipe.num_timesteps`` after a call (2n-1 for n steps of Heun or KDPM2, fewer
than n with an img2img ``strength`` below 1, ``len(step_matrix)`` for SkyReels' diffusion forcing). A
counter that has run it while the timestep fell and does not rise now raises (the generation is longer than
the config says), as does a ``step_index`` not below ``num_inference_steps``.
A context whose input shape changed (e.g. the batch size) computes: a cached residual is only reused on
an input of its own shape.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from diffusers.hooks import HookRegistry, ModelHook
from diffusers.hooks._common import _ALL_TRANSFORMER_BLOCK_IDENTIFIERS
from diffusers.hooks._helpers import TransformerBlockMetadata, TransformerBlockRegistry
from diffusers.hooks.hooks import BaseState, StateManager
from diffusers.models.modeling_utils import ModelMixin

from icml_generative.validation import check_choice, check_module

LEVELS = ("blocks", "model")  # what a stack cache caches: the block stack's residual or the whole model's
HEAD_HOOK = "icml_stack_cache_head"
BLOCK_HOOK = "icml_stack_cache_block"
TIMESTEP_HOOK = "icml_stack_cache_timestep"
# diffusers schedulers that call the model 2n-1 times for n inference steps (len(scheduler.timesteps))
CALLS_PER_STEP_SCHEDULERS = (
    "HeunDiscreteScheduler, FlowMatchHeunDiscreteScheduler, KDPM2DiscreteScheduler, "
    "KDPM2AncestralDiscreteScheduler or DPMSolverSDEScheduler"
)
NO_CONTEXT_MESSAGE = (
    "{method}: no cache context is set. Wrap every transformer call in a named context, e.g. "
    "`with transformer.cache_context('cond'):` on a diffusers model, or "
    "`with icml_generative.cache.cache_context(model, 'cond'):` for any module. Many diffusers pipelines set "
    "one; others (e.g. DiTPipeline, PixArtAlphaPipeline) do not: call the model in a loop of your own there."
)


@dataclass
class StepRecord:
    """One step of the leading context: whether it was computed, and the predicted and measured change.

    ``predicted``: the policy's estimate of ``mean|out_t − out_c| / mean|out_c|`` (``c``: the last computed
    step) made before deciding; NaN on forced steps. ``measured``: the true value, known on computed steps.
    ``ratio``: the estimator's ratio used for the decision (NaN where none).
    """

    step: int
    computed: bool
    forced: bool
    predicted: float = math.nan
    measured: float = math.nan
    ratio: float = math.nan


@dataclass
class CacheStats:
    """Statistics of the latest run (reset at step 0 of each run)."""

    num_inference_steps: int | None = None
    records: list[StepRecord] = field(default_factory=list)
    full_forwards: dict[str, int] = field(default_factory=dict)  # per context
    calibration: list[tuple[float, float]] = field(default_factory=list)  # (input change, output change)

    @property
    def steps_computed(self) -> int:
        return sum(r.computed for r in self.records)

    @property
    def steps_skipped(self) -> int:
        return sum(not r.computed for r in self.records)

    @property
    def computed_steps(self) -> list[int]:
        return [r.step for r in self.records if r.computed]

    def as_dict(self) -> dict:
        return {
            "num_inference_steps": self.num_inference_steps,
            "steps_computed": self.steps_computed,
            "steps_skipped": self.steps_skipped,
            "full_forwards": dict(self.full_forwards),
            "records": [vars(r).copy() for r in self.records],
        }


class ContextState(BaseState):
    """One cache context's inputs, outputs and residual at the last computed step and the previous one."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.run = -1
        self.calls = 0
        self.step = -1
        self.skip = False
        self.head_input: torch.Tensor | None = None  # the block stack's input at this step
        self.x_prev: torch.Tensor | None = None  # the stack's input at the previous step
        self.x_last: torch.Tensor | None = None  # the stack's input at the last computed step
        self.out_last: torch.Tensor | None = None  # the stack's output at the last computed step
        self.residual: torch.Tensor | None = None  # out_last - x_last
        self.last_compute_step = -1


class _SharedState:
    """State shared by all contexts of a run: the leader, the decisions, the policy, the statistics."""

    def __init__(self) -> None:
        self.model_timestep: Any = None  # the timestep argument of the model's current forward (diffusers)
        self.rises = 0  # consecutive leading calls whose timestep rose (2 or more: an inversion ran)
        self.reset()

    def reset(self) -> None:
        self.run = 0
        self.leader: str | None = None
        self.timestep: float | None = None  # the leading context's last timestep, when the context has one
        self.fell = False  # whether the leading context's timestep fell within this run
        self.decisions: dict[int, bool] = {}
        self.sigma = 1.0  # of the leading context's current step (1 - step / n when the context has none)
        self.aligning = False
        self.stats = CacheStats()


def mean_abs(t: torch.Tensor) -> float:
    """``mean |t|`` as a Python float (computed in float32 at least)."""
    return t.float().abs().mean().item()


class StackPolicy:
    """What a caching method decides. Subclasses set ``name`` and implement ``predict``/``measure``."""

    name = "stack cache"
    shared: _SharedState  # set by apply_stack_cache

    def __init__(
        self,
        threshold: float,
        alignment_steps: int | None,
        num_inference_steps: int | None,
        calibrate: bool = False,
    ) -> None:
        self.threshold = threshold
        self.alignment_steps = alignment_steps
        self.num_inference_steps = num_inference_steps
        self.calibrate = calibrate

    def reset(self) -> None:
        """Forget everything learned in the previous run."""

    def start_step(self, ctx: ContextState, x: torch.Tensor, step: int, block, args, kwargs) -> None:
        """Called on every step of the leading context before the decision."""

    def predict(self, ctx: ContextState, x: torch.Tensor, step: int) -> tuple[float, float]:
        """Return ``(accumulated predicted relative output change, ratio used)``; skip if below threshold."""
        raise NotImplementedError

    def on_compute(self) -> None:
        """The step was computed: reset accumulated error."""

    def measure(
        self, ctx: ContextState, x: torch.Tensor, out: torch.Tensor, step: int, aligning: bool, sigma: float
    ) -> None:
        """Feed the measurement of a computed step (called before ``ctx`` is updated)."""


def _signature_index(cls: type[torch.nn.Module], name: str) -> int | None:
    params = list(inspect.signature(cls.forward).parameters)[1:]
    return params.index(name) if name in params else None


class BlockIO:
    """Where a block takes and returns its hidden states (diffusers' block registry, or the defaults)."""

    def __init__(self, block: torch.nn.Module) -> None:
        try:
            meta = TransformerBlockRegistry.get(block.__class__)
        except ValueError:
            meta = TransformerBlockMetadata(return_hidden_states_index=0)
        self.out_index = meta.return_hidden_states_index or 0
        self.enc_out_index = meta.return_encoder_hidden_states_index
        self.name = meta.hidden_states_argument_name
        self.enc_name = meta.encoder_hidden_states_argument_name
        self.index = _signature_index(block.__class__, self.name)
        self.enc_index = _signature_index(block.__class__, self.enc_name)
        if self.index is None:
            self.index = 0

    def hidden(self, args, kwargs) -> torch.Tensor:
        return kwargs[self.name] if self.name in kwargs else args[self.index]

    def encoder(self, args, kwargs):
        if self.enc_name in kwargs:
            return kwargs[self.enc_name]
        return args[self.enc_index] if self.enc_index is not None and self.enc_index < len(args) else None

    def output_hidden(self, output) -> torch.Tensor:
        return output[self.out_index] if isinstance(output, (tuple, list)) else output

    def passthrough(self, hidden: torch.Tensor, args, kwargs):
        """The block's output when it is skipped: ``hidden`` (and the encoder states unchanged)."""
        if self.enc_out_index is None:
            return hidden
        out: list[torch.Tensor | None] = [None] * (max(self.out_index, self.enc_out_index) + 1)
        out[self.out_index] = hidden
        out[self.enc_out_index] = self.encoder(args, kwargs)
        return tuple(out)


class _ModelIO:
    """The whole model as the cached unit (the released NaviCache code): its ``hidden_states`` input and its
    sample output, returned in the container (tensor, tuple or ``ModelOutput``) of the last computed call."""

    name = "hidden_states"

    def __init__(self) -> None:
        self._wrap: Callable[[torch.Tensor], Any] | None = None

    def hidden(self, args, kwargs) -> torch.Tensor:
        return kwargs[self.name] if self.name in kwargs else args[0]

    def output_hidden(self, output) -> torch.Tensor:
        if isinstance(output, torch.Tensor):
            self._wrap = lambda t: t
            return output
        if isinstance(output, tuple):
            rest = output[1:]
            self._wrap = lambda t: (t, *rest)
            return output[0]
        if hasattr(output, "sample"):
            cls = type(output)
            self._wrap = lambda t: cls(sample=t)
            return output.sample
        raise TypeError(f"cannot cache a model output of type {type(output).__name__}")

    def passthrough(self, hidden: torch.Tensor, args, kwargs):
        assert self._wrap is not None, "a skipped step follows a computed one, whose output set the wrapper"
        return self._wrap(hidden)


class _ModelTimestepHook(ModelHook):
    """On a diffusers model: keeps each forward's ``timestep`` argument for the head, which reads it where the
    cache context has neither step index nor timestep (Flux and most 0.42 pipelines). A larger timestep than
    the last one then starts a new run, as a context's timestep does: without it, a generation that raised
    part-way (no end-of-call reset) left its step counter to the next generation, which began mid-run and
    could skip its first steps with the aborted generation's residual."""

    def __init__(self, shared: _SharedState) -> None:
        super().__init__()
        self.shared = shared
        self.index: int | None = None

    def initialize_hook(self, module):
        self.index = _signature_index(module.__class__, "timestep")
        return module

    @torch.compiler.disable
    def pre_forward(self, module, *args, **kwargs):
        if "timestep" in kwargs:
            value = kwargs["timestep"]
        else:
            value = args[self.index] if self.index is not None and self.index < len(args) else None
        real = (isinstance(value, numbers.Real) and not isinstance(value, bool)) or (
            isinstance(value, torch.Tensor) and not value.is_complex()
        )
        self.shared.model_timestep = value if real else None
        return args, kwargs


class StackCacheHook(ModelHook):
    """The hook on each block of the stack; the head decides, the tail stores, the others pass through."""

    _is_stateful = True

    def __init__(
        self,
        policy: StackPolicy,
        state_manager: StateManager,
        shared: _SharedState,
        is_head: bool,
        is_tail: bool,
        io: BlockIO | _ModelIO | None = None,
    ) -> None:
        super().__init__()
        self.policy = policy
        self.state_manager = state_manager
        self.shared = shared
        self.is_head = is_head
        self.is_tail = is_tail
        self.io = io
        self._runs = 0

    def initialize_hook(self, module):
        if self.io is None:
            self.io = BlockIO(module)
        return module

    def reset_state(self, module):
        # diffusers pipelines reset stateful hooks after each call: keep the last run's statistics
        if self.is_head:
            stats = self.shared.stats
            self.state_manager.reset()
            self.shared.reset()
            self.shared.rises = 0
            self.shared.stats = stats
            self.policy.reset()
        return module

    # -- bookkeeping (plain Python on floats: excluded from torch.compile graphs) -----------------------
    def _context(self):
        context = self.state_manager._context
        if context is None:
            raise RuntimeError(NO_CONTEXT_MESSAGE.format(method=self.policy.name))
        return context

    @torch.compiler.disable
    def _begin_step(self, module, x: torch.Tensor, args, kwargs) -> bool:
        """Run by the head: find the step, make or reuse the decision; return True to skip."""
        context = self._context()
        ctx: ContextState = self.state_manager.get_state()
        shared, policy = self.shared, self.policy
        n = context.num_inference_steps or policy.num_inference_steps
        if n is None:
            raise ValueError(
                f"{policy.name}: the number of inference steps is unknown; pass num_inference_steps "
                "in the config (the pipeline's number of steps) or in the cache context (diffusers' Wan and "
                "Cosmos pipelines put it there; Flux and most other pipelines do not)"
            )
        align = policy.alignment_steps if policy.alignment_steps is not None else math.ceil(0.2 * n)
        if align >= n:
            raise ValueError(
                f"{policy.name}: alignment_steps ({align}) must be smaller than the number of "
                f"inference steps ({n})"
            )
        leading = shared.leader is None or shared.leader == context.name
        timestep = _as_float(context.timestep)
        if timestep is None and leading and context.step_index is None:
            timestep = _as_float(shared.model_timestep)  # a diffusers model's timestep argument, if any
        rose = timestep is not None and shared.timestep is not None and timestep > shared.timestep
        if leading and self._new_run(context, ctx, n, timestep):  # forget the previous run
            self._runs += 1
            shared.reset()
            shared.run = self._runs
            shared.leader = context.name
            shared.stats.num_inference_steps = n
            policy.reset()
        if leading and timestep is not None:
            shared.fell = shared.fell or (shared.timestep is not None and timestep < shared.timestep)
            shared.timestep = timestep
            shared.rises = shared.rises + 1 if rose else 0
        if ctx.run != shared.run:
            ctx.reset()
            ctx.run = shared.run
        # the step: the pipeline's, else the forwards counted in this context since the run began
        step = context.step_index if context.step_index is not None else ctx.calls
        ctx.calls += 1
        ctx.step = step
        if ctx.residual is not None and ctx.residual.shape != x.shape:
            # the input's shape changed (batch size, resolution): never reuse the residual of another shape
            ctx.x_prev = ctx.x_last = ctx.out_last = ctx.residual = None
            ctx.last_compute_step = -1
        if leading:
            if step >= n:
                raise ValueError(
                    f"{policy.name}: context {context.name!r} ran step_index {step}, but num_inference_steps is "
                    f"{n}; expected step_index < num_inference_steps, the number of model calls per generation "
                    f"(the denoising loop's length, pipe.num_timesteps after a call: 2n-1 for n steps with "
                    f"{CALLS_PER_STEP_SCHEDULERS})"
                )
            shared.sigma = context.sigma if context.sigma is not None else 1.0 - step / n
            shared.aligning = step < align
            if step in shared.decisions:
                raise RuntimeError(
                    f"{policy.name}: context {context.name!r} ran step {step} twice; reset the cache "
                    "(HookRegistry.reset_stateful_hooks) before a new run"
                )
            policy.start_step(ctx, x, step, module, args, kwargs)
            forced = step < align or step >= n - 1 or ctx.residual is None or policy.calibrate
            record = StepRecord(step=step, computed=True, forced=forced)
            skip = False
            if not forced:
                record.predicted, record.ratio = policy.predict(ctx, x, step)
                skip = record.predicted < policy.threshold
            if not skip:
                policy.on_compute()
            record.computed = not skip
            shared.decisions[step] = skip
            shared.stats.records.append(record)
        else:
            if step not in shared.decisions:
                raise RuntimeError(
                    f"{policy.name}: context {context.name!r} ran step {step} before the leading context "
                    f"{shared.leader!r} did; each step must call the leading context first, then the others "
                    "(e.g. 'cond' then 'uncond')"
                )
            skip = shared.decisions[step] and ctx.residual is not None
        ctx.x_prev = x
        ctx.skip = skip
        ctx.head_input = x
        if not skip:
            shared.stats.full_forwards[context.name] = shared.stats.full_forwards.get(context.name, 0) + 1
        return skip

    def _new_run(self, context, ctx: ContextState, n: int, timestep: float | None) -> bool:
        """Whether the leading context's call starts a new run (generation)."""
        shared = self.shared
        if shared.leader is None:  # the first call, or the first after reset_stateful_hooks
            return True
        if context.step_index is not None:
            return context.step_index == 0
        if timestep is not None and shared.timestep is not None and timestep > shared.timestep:
            return True  # the schedule's timesteps decrease within a run: a larger one restarts it
        if timestep is not None and shared.rises >= 2:
            # the calls before rose one after another (an inversion, e.g. DDIM inversion: each call a run of
            # its own): the first that does not rise begins a sampling run. It used to continue the
            # inversion's last one-call run: a DDIM regeneration, whose first timestep is the inversion's
            # last, began at step 1 with the inversion's output as the last computed one
            return True
        if not (ctx.run == shared.run and ctx.calls >= n):
            return False
        if timestep is not None and shared.timestep is not None and shared.fell:
            # the whole schedule ran, yet the timestep fell during the run and does not rise now: the same
            # generation goes on past num_inference_steps calls (a second-order scheduler such as Heun calls
            # the model 2n-1 times for n steps). Restarting here split it into two runs: the second's
            # alignment steps were recomputed, its last call (the generation's last) could be skipped, and
            # the statistics showed only the second run
            raise ValueError(
                f"{self.policy.name}: context {context.name!r} called the model more than num_inference_steps "
                f"({n}) times in one generation (call {ctx.calls + 1} at timestep {timestep:g}, not above the "
                f"previous {shared.timestep:g}); expected num_inference_steps to be the number of model calls "
                "per generation, the denoising loop's length, which a diffusers pipeline exposes as "
                "pipe.num_timesteps after a call (not len(pipe.scheduler.timesteps) in general): 2n-1 for n "
                f"steps with {CALLS_PER_STEP_SCHEDULERS}; len(step_matrix), more than n, for SkyReels' "
                "diffusion forcing with ar_step > 0 (a long video runs one loop per window: see the docs)"
            )
        return True  # the whole schedule ran

    @torch.compiler.disable
    def _end_step(self, out: torch.Tensor) -> None:
        """Run by the tail after a computed step: measure, store the residual."""
        context = self._context()
        ctx: ContextState = self.state_manager.get_state()
        x = ctx.head_input
        assert x is not None, "the head stored the stack's input at the start of the step"
        if out.shape != x.shape:
            raise ValueError(
                f"{self.policy.name} caches the block stack's residual and needs its output shape "
                f"{tuple(out.shape)} to equal its input shape {tuple(x.shape)}"
            )
        if context.name == self.shared.leader:
            record = self.shared.stats.records[-1]
            if ctx.out_last is not None:
                record.measured = mean_abs(out - ctx.out_last) / (mean_abs(ctx.out_last) + 1e-12)
                self.policy.measure(ctx, x, out, ctx.step, self.shared.aligning, self.shared.sigma)
        ctx.residual = out - x
        ctx.out_last = out
        ctx.x_last = x
        ctx.last_compute_step = ctx.step

    # -- the forward -------------------------------------------------------------------------------------
    def new_forward(self, module: torch.nn.Module, *args, **kwargs):
        io = self.io
        assert io is not None, "initialize_hook sets it when the hook is registered"
        hidden = io.hidden(args, kwargs)
        if self.is_head:
            if self._begin_step(module, hidden, args, kwargs):
                return io.passthrough(hidden + self.state_manager.get_state().residual, args, kwargs)
        elif self.state_manager.get_state().skip:
            return io.passthrough(hidden, args, kwargs)
        output = self.fn_ref.original_forward(*args, **kwargs)
        if self.is_tail:
            self._end_step(io.output_hidden(output))
        return output


def _as_float(value) -> float | None:
    """A context's ``timestep`` (number or tensor, possibly one per batch element) as a float."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        return float(value.detach().reshape(-1)[0].item()) if value.numel() else None
    return float(value)


def find_transformer_blocks(
    module: torch.nn.Module, method: str, name: str = "module"
) -> list[tuple[str, torch.nn.Module]]:
    """The blocks of ``module``'s block lists (children named like diffusers' block lists), in order;
    ``name``: how the caller's argument is called in messages."""
    check_module(module, method, name)
    blocks: list[tuple[str, torch.nn.Module]] = []
    for child_name, child in module.named_children():
        if child_name in _ALL_TRANSFORMER_BLOCK_IDENTIFIERS and isinstance(child, torch.nn.ModuleList):
            blocks.extend((f"{child_name}.{i}", block) for i, block in enumerate(child))
    if not blocks:
        raise ValueError(
            f"{method}: {name} ({type(module).__name__}) has no transformer blocks: expected a torch.nn.ModuleList "
            f"child named one of {sorted(set(_ALL_TRANSFORMER_BLOCK_IDENTIFIERS))}"
        )
    return blocks


@contextmanager
def _beneath_accelerate(module: torch.nn.Module) -> Iterator[None]:
    """Register or remove hooks of ``module``'s own registry beneath an accelerate hook on it, if any.

    ``pipe.enable_model_cpu_offload()`` puts an accelerate hook on the transformer (``module.forward`` its
    wrapper, ``module._old_forward`` what it wraps) and, at the end of every generation
    (``maybe_free_model_hooks``), removes it with ``remove_hook_from_module``, which sets
    ``module.forward = module._old_forward``, and adds it again. A diffusers hook registered on the module
    after the accelerate hook wraps accelerate's wrapper and was dropped by that removal: the model-level
    cache ran once and then no more, and ``disable_cache()`` set ``module.forward`` past accelerate's hook.
    Here the registry works on ``_old_forward`` instead, so our hooks sit beneath accelerate's, where its
    removal keeps them and its hook stays outermost."""
    outer = vars(module).get("forward")
    if outer is None or not hasattr(module, "_hf_hook") or "_old_forward" not in vars(module):
        yield
        return
    setattr(module, "forward", vars(module)["_old_forward"])  # noqa: B010 (mypy: a method is not assignable)
    try:
        yield
    finally:
        setattr(module, "_old_forward", vars(module)["forward"])  # noqa: B010
        setattr(module, "forward", outer)  # noqa: B010


def _has_cache(module: torch.nn.Module) -> bool:
    registry = getattr(module, "_diffusers_hook", None)
    return registry is not None and (HEAD_HOOK in registry.hooks or BLOCK_HOOK in registry.hooks)


def _other_caches(module: torch.nn.Module) -> list[str]:
    """The caches already on ``module``: its diffusers ``enable_cache`` config, and every stateful
    diffusers hook (the caches: First-Block Cache, MagCache, FasterCache, ...) on it or its submodules."""
    found = []
    config = getattr(module, "_cache_config", None)
    if config is not None:
        found.append(f"{type(config).__name__} (enable_cache)")
    for sub_name, sub in module.named_modules():
        registry = getattr(sub, "_diffusers_hook", None)
        if registry is None:
            continue
        for hook_name, hook in registry.hooks.items():
            if hook_name in (HEAD_HOOK, BLOCK_HOOK) or not getattr(hook, "_is_stateful", False):
                continue
            where = f" on {sub_name}" if sub_name else ""
            found.append(f"hook {hook_name!r} ({type(hook).__name__}){where}")
            if len(found) >= 4:
                return found
    return found


class _DisableCache:
    """``module.disable_cache()`` while one of our caches is applied: removes it (diffusers' own method
    does not know our configs). Set on the instance by :func:`apply_stack_cache`, deleted on removal."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module

    def __call__(self) -> None:
        remove_stack_cache(self.module, "disable_cache")


def apply_stack_cache(
    module: torch.nn.Module, policy: StackPolicy, level: str = "blocks", config: Any = None
) -> None:
    """Register the hooks: on every block (``level="blocks"``) or on the module itself (``"model"``).

    Refuses a module that already has a cache (ours or a diffusers one: two caches would both skip). On a
    diffusers model (``CacheMixin``) ``config`` becomes its ``_cache_config``, so that ``enable_cache``
    refuses to stack another cache on it and ``disable_cache()`` removes this one.
    """
    check_choice(level, "level", LEVELS)
    check_module(module, policy.name)
    blocks = find_transformer_blocks(module, policy.name) if level == "blocks" else []
    if any(_has_cache(m) for m in module.modules()):
        raise ValueError(
            f"{policy.name}: a stack cache is already applied to module ({type(module).__name__}); remove it first"
        )
    others = _other_caches(module)
    if others:
        raise ValueError(
            f"{policy.name}: module ({type(module).__name__}) already has a cache: {', '.join(others)}; two caches "
            "on one model would both skip. Remove it first (disable_cache() for enable_cache)."
        )
    registry = HookRegistry.check_if_exists_or_initialize(module)  # lets cache_context reach the block hooks
    state_manager, shared = StateManager(ContextState), _SharedState()
    policy.shared = shared
    with _beneath_accelerate(module):  # kept by enable_model_cpu_offload's end-of-call hook removal
        if level == "model":
            registry.register_hook(
                StackCacheHook(policy, state_manager, shared, True, True, _ModelIO()), HEAD_HOOK
            )
        if isinstance(module, ModelMixin):  # registered last: runs before the model-level head decides
            registry.register_hook(_ModelTimestepHook(shared), TIMESTEP_HOOK)
    last = len(blocks) - 1
    for i, (_, block) in enumerate(blocks):
        hook = StackCacheHook(policy, state_manager, shared, is_head=i == 0, is_tail=i == last)
        HookRegistry.check_if_exists_or_initialize(block).register_hook(
            hook, HEAD_HOOK if i == 0 else BLOCK_HOOK
        )
    registry.invalidate_child_registries_cache()
    if hasattr(module, "enable_cache") and hasattr(module, "_cache_config"):  # a diffusers CacheMixin
        setattr(module, "_cache_config", policy if config is None else config)  # noqa: B010
        # diffusers' disable_cache only knows its own configs: this instance's removes ours
        setattr(module, "disable_cache", _DisableCache(module))  # noqa: B010


def remove_stack_cache(module: torch.nn.Module, method: str) -> None:
    check_module(module, method)
    if isinstance(vars(module).get("disable_cache"), _DisableCache):  # set by apply_stack_cache
        delattr(module, "disable_cache")
        setattr(module, "_cache_config", None)  # noqa: B010
    for sub in module.modules():
        registry = getattr(sub, "_diffusers_hook", None)
        if registry is not None:
            with _beneath_accelerate(sub) if sub is module else nullcontext():
                registry.remove_hook(HEAD_HOOK, recurse=False)
                registry.remove_hook(BLOCK_HOOK, recurse=False)
                registry.remove_hook(TIMESTEP_HOOK, recurse=False)
    registry = getattr(module, "_diffusers_hook", None)
    if registry is not None:
        registry.invalidate_child_registries_cache()


def head_hook(module: torch.nn.Module, method: str) -> StackCacheHook:
    """The deciding hook of the cache applied to ``module`` (on the module itself or on its first block)."""
    check_module(module, method)
    for sub in module.modules():
        registry = getattr(sub, "_diffusers_hook", None)
        hook = None if registry is None else registry.get_hook(HEAD_HOOK)
        if hook is not None:
            return hook
    raise ValueError(
        f"{method}: no NaviCache, EasyCache or TeaCache is applied to this module ({type(module).__name__})"
    )
