"""The three training stages of the routing policy (our reconstruction: the paper's text was not available).

1. :func:`fit_echo_calibration`: the Echo coefficients of every (layer, head), in closed form
   (:class:`~icml_generative.echo_attention.EchoCalibrator`) from attention inputs captured while the
   dense model runs (:func:`capture_attention_inputs`), and each head's better variant.
2. :func:`train_router`: router logits per (layer, head) over dense / sparse / echo, trained with the
   straight-through Gumbel-softmax on the distillation loss ``‖f_policy(x) − f_dense(x)‖² / Var f_dense``
   of the whole denoiser plus ``penalty · max(0, E[FLOPs] / dense − budget)``; then the routes are the
   argmax and :func:`finalize_routes` fits them to the budget (heads with the smallest margin leave the
   dense route first) and fills it with the sparse density.
3. :func:`finetune_echo`: routes frozen, the Echo coefficients fine-tuned end to end on the same loss.

``batches`` are lists of keyword-argument dicts for the transformer (``hidden_states``, ``timestep``,
``encoder_hidden_states``); the dense teacher's outputs are computed once with the policy in "dense" mode.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import torch

from icml_generative.echo_attention.ops import VARIANTS
from icml_generative.echo_attention.policy import ROUTES, EchoCalibrator, EchoPolicy
from icml_generative.echo_attention.processor import EchoWanAttnProcessor
from icml_generative.validation import check_instance, check_int, check_module, check_number


def capture_attention_inputs(policy: EchoPolicy, run: Callable[[], object]) -> list[list[tuple]]:
    """Run ``run()`` (which calls the transformer the policy is applied to) with dense attention and return
    the ``(q, k, v)`` every layer saw, per layer. The policy keeps none of them, also when ``run()`` raises."""
    check_instance(policy, "policy", EchoPolicy)
    if not callable(run):
        raise TypeError(f"run must be a callable that runs the transformer, got {type(run).__name__}")
    mode = policy.mode
    policy.mode = "capture"
    policy.captured = [[] for _ in range(policy.num_layers)]
    try:
        run()
    finally:
        policy.mode = mode
        captured, policy.captured = policy.captured, [[] for _ in range(policy.num_layers)]
    if not all(captured):
        raise ValueError("run must call the transformer that policy is applied to (apply_echo_attention)")
    return captured


@torch.no_grad()
def fit_echo_calibration(
    policy: EchoPolicy, captured: Sequence[Sequence[tuple]], ridge: float = 1e-6
) -> dict:
    """Stage 1: set every head's Echo coefficients and variant from captured inputs; returns
    ``{"residual": (L, V, H) relative residuals, "variants": (L, H)}``."""
    check_instance(policy, "policy", EchoPolicy)
    if not (
        isinstance(captured, list | tuple)
        and len(captured) == policy.num_layers
        and all(
            isinstance(c, list | tuple) and c and all(isinstance(x, list | tuple) and len(x) == 3 for x in c)
            for c in captured
        )
    ):
        raise ValueError(
            f"captured must hold (q, k, v) inputs for each of the {policy.num_layers} layers of policy "
            "(capture_attention_inputs)"
        )
    fits = []  # every layer solved before the policy is changed
    for inputs in captured:
        cal = EchoCalibrator(policy.layout, policy.num_heads, policy.anchor_stride, ridge=ridge)
        for q, k, v in inputs:
            cal.update(q, k, v)
        fits.append(cal.solve())
    heads = torch.arange(policy.num_heads)
    for layer, fit in enumerate(fits):
        policy.a.data[layer] = fit["a"][fit["best"], heads]
        policy.b.data[layer] = fit["b"][fit["best"], heads]
        policy.variants[layer] = fit["best"]
    return {
        "residual": torch.stack([fit["residual"] for fit in fits]),
        "variants": [[VARIANTS[int(v)] for v in row] for row in policy.variants],
    }


@contextlib.contextmanager
def _frozen(module: torch.nn.Module) -> Iterator[None]:
    """The module's own parameters without gradients for the duration (restored after)."""
    flags = [(p, p.requires_grad) for p in module.parameters()]
    for p, _ in flags:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


def _check_training(transformer: object, policy: object, batches: object, method: str) -> None:
    """``policy`` applied to ``transformer`` (:func:`apply_echo_attention`); ``batches`` a non-empty list of
    keyword-argument dicts."""
    check_module(transformer, method, "transformer")
    check_instance(policy, "policy", EchoPolicy)
    blocks = getattr(transformer, "blocks", None)
    blocks = list(blocks) if isinstance(blocks, torch.nn.ModuleList) else []
    processors = [getattr(getattr(b, "attn1", None), "processor", None) for b in blocks]
    if not processors or not all(
        isinstance(p, EchoWanAttnProcessor) and p.policy is policy for p in processors
    ):
        raise ValueError("transformer must run policy: call apply_echo_attention(transformer, policy) first")
    if not (isinstance(batches, list | tuple) and batches and all(isinstance(b, dict) for b in batches)):
        raise ValueError("batches must be a non-empty list of dicts of transformer inputs")


def _diverged(loss: torch.Tensor, params: list[torch.Tensor], saved: list[torch.Tensor], what: str) -> None:
    """Raise (restoring ``params`` from ``saved``) when the loss or a parameter is no longer finite."""
    if bool(torch.isfinite(loss)) and all(bool(torch.isfinite(p).all()) for p in params):
        return
    with torch.no_grad():
        for p, old in zip(params, saved, strict=True):
            p.copy_(old)
    raise ValueError(f"training diverged (NaN or infinite loss or parameters); {what}")


def _teacher(transformer: torch.nn.Module, policy: EchoPolicy, batches: Sequence[dict]) -> list[torch.Tensor]:
    mode = policy.mode
    policy.mode = "dense"
    try:
        with torch.no_grad():
            return [transformer(**b, return_dict=False)[0] for b in batches]
    finally:
        policy.mode = mode


def _distill(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return (out - target).pow(2).mean() / target.var().clamp(min=1e-12)


def _route_costs(policy: EchoPolicy) -> torch.Tensor:
    """``(3,)`` FLOPs of one head per route as a fraction of a dense head."""
    per = torch.tensor([policy.route_flops(r) for r in ROUTES])
    return per / per[0]


def train_router(
    transformer: torch.nn.Module,
    policy: EchoPolicy,
    batches: Sequence[dict],
    budget: float,
    *,
    steps: int = 100,
    lr: float = 0.05,
    penalty: float = 10.0,
    tau: float = 1.0,
    seed: int = 0,
) -> list[dict]:
    """Stage 2 (module docstring). The sparse route is costed at the policy's current density. Returns the
    log (one dict per step: loss, distillation, expected FLOP fraction)."""
    check_number(budget, "budget", above=0, maximum=1)
    check_int(steps, "steps", 1, 1_000_000)
    check_number(lr, "lr", above=0, maximum=1e3)  # Adam steps by about lr: far larger overflow
    check_number(penalty, "penalty", 0)
    check_number(tau, "tau", 1e-3)  # (logits + gumbel) / tau must not overflow
    check_int(seed, "seed", 0, 2**64 - 1)
    _check_training(transformer, policy, batches, "train_router")
    targets = _teacher(transformer, policy, batches)
    costs = _route_costs(policy).to(policy.router_logits.device)
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam([policy.router_logits], lr=lr)
    log = []
    saved = [policy.router_logits.detach().clone()]
    mode = policy.mode
    policy.mode = "mix"
    frozen = contextlib.ExitStack()
    frozen.enter_context(_frozen(transformer))
    try:
        for step in range(steps):
            i = step % len(batches)
            logits = policy.router_logits
            uniform = torch.rand(logits.shape, generator=g).clamp(1e-10, 1 - 1e-10)  # drawn on the CPU
            gumbel = -torch.log(-torch.log(uniform)).to(logits.device)
            soft = ((logits + gumbel) / tau).softmax(-1)
            hard = torch.nn.functional.one_hot(soft.argmax(-1), len(ROUTES)).to(soft.dtype)
            policy.mix_weights = hard - soft.detach() + soft
            out = transformer(**batches[i], return_dict=False)[0]
            distill = _distill(out, targets[i])
            expected = (logits.softmax(-1) * costs).sum(-1).mean()
            loss = distill + penalty * torch.relu(expected - budget)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            _diverged(
                loss,
                [policy.router_logits],
                saved,
                f"lower lr={lr:g} or penalty={penalty:g}, or raise tau={tau:g}",
            )
            log.append({"loss": loss.item(), "distill": distill.item(), "expected_flops": expected.item()})
    finally:
        frozen.close()
        policy.mode = mode
        policy.mix_weights = None
    return log


@torch.no_grad()
def finalize_routes(policy: EchoPolicy, budget: float) -> dict:
    """The argmax routes of the router, made to fit ``budget``: while they do not fit at the smallest sparse
    density, the dense head with the smallest logit margin takes its best cheaper route; then the sparse
    density fills the budget. Returns ``{"fraction", "density", "moved"}``. Raises when no routes fit (every
    head off the dense route), leaving the policy's routes and density as they were."""
    check_instance(policy, "policy", EchoPolicy)
    check_number(budget, "budget", above=0, maximum=1)
    logits = policy.router_logits.detach()
    routes, density = policy.routes.clone(), policy.density
    try:
        policy.set_routes(logits.argmax(-1))
        moved = 0
        while True:
            try:
                fraction = policy.fit_density(budget)
                break
            except ValueError:
                dense = policy.routes == 0
                if not bool(dense.any()):
                    raise
                cheaper = logits[..., 1:].max(-1)
                margin = (logits[..., 0] - cheaper.values).masked_fill(~dense, float("inf"))
                flat = int(margin.flatten().argmin())
                layer, head = divmod(flat, policy.num_heads)
                policy.routes[layer, head] = 1 + int(cheaper.indices[layer, head])
                moved += 1
    except BaseException:
        policy.routes.copy_(routes)  # a failed call leaves the policy as it was
        policy.density = density
        raise
    return {"fraction": fraction, "density": policy.density, "moved": moved}


def finetune_echo(
    transformer: torch.nn.Module,
    policy: EchoPolicy,
    batches: Sequence[dict],
    *,
    steps: int = 50,
    lr: float = 1e-3,
) -> list[float]:
    """Stage 3: routes frozen, fine-tune the Echo coefficients ``a, b`` end to end; returns the losses (none
    when no head is routed to echo)."""
    check_int(steps, "steps", 1, 1_000_000)
    check_number(lr, "lr", above=0, maximum=1e3)  # Adam steps by about lr: far larger overflow
    _check_training(transformer, policy, batches, "finetune_echo")
    if not bool((policy.routes == ROUTES.index("echo")).any()):
        return []  # no head is routed to echo: nothing to fine-tune
    targets = _teacher(transformer, policy, batches)
    opt = torch.optim.Adam([policy.a, policy.b], lr=lr)
    saved = [policy.a.detach().clone(), policy.b.detach().clone()]
    mode = policy.mode
    policy.mode = "route"
    frozen = contextlib.ExitStack()
    frozen.enter_context(_frozen(transformer))
    losses = []
    try:
        for step in range(steps):
            i = step % len(batches)
            loss = _distill(transformer(**batches[i], return_dict=False)[0], targets[i])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            _diverged(loss, [policy.a, policy.b], saved, f"lower lr={lr:g}")
            losses.append(loss.item())
    finally:
        frozen.close()
        policy.mode = mode
    return losses
