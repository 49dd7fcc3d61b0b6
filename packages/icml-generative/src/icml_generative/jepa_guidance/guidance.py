"""Guidance by gradient descent on a function of the Tweedie estimate ``x̂0(z_t)``, inside any sampler.

:class:`TweedieGuidance` is the step every guidance here shares (JEPA guidance's ``compute_jepa_gradient``
and ``reverse_process``, paraphrased in docs/jepa-guidance.md): at an active step, with gradients on,

1. ``x̂0 = x0_fn(z_t)`` (the sampler's denoiser and Tweedie formula; :func:`tweedie_x0`), optionally
   ``preprocess``-ed (a VAE decode, a resize) into the space the objective measures;
2. ``g = ∇_{z_t} Σ_n objective(x̂0)_n`` (through the preprocessing and the denoiser);
3. ``g <- g / max|g|`` per sample if ``normalize``;
4. ``z_t <- z_t − η·g`` (``schedule="constant"``) or ``z_t − η·σ²_t·g`` (``"variance"``, ``σ²_t`` the
   DDPM posterior variance the sampler passes), then the sampler's ordinary step.

A step is active when ``step % interval == 0`` and the remaining fraction of the trajectory
``1 − step/num_steps <= start_fraction`` (0.8: the noisiest 20 % of the steps are left alone).
``eta = 0`` returns ``z_t`` itself, so the sampler runs bit for bit as without guidance.

- :class:`JEPAGuidance`: objective = the randomized top-``k`` JEPA-score of ``x̂0`` (lower density under
  the JEPA: a world-centric minority sample). Park & Um, "JEPA guidance", ICML 2026.
- :class:`MinorityGuidance`: the generator-centric baseline: objective = −minority score of ``x̂0``,
  the Tweedie reconstruction error of the generator itself (:func:`minority_score`; Um, Lee & Ye,
  "Don't Play Favorites: Minority Guidance for Diffusion Models", ICLR 2024, and its classifier-free,
  self-guided form, Um & Ye, ICLR 2025). Squared L2 stands in for their LPIPS.

In diffusers pipelines that take ``callback_on_step_end`` use :meth:`TweedieGuidance.diffusers_callback`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

from icml_generative.jepa_guidance.score import JVP_METHODS, MAX_OVERSAMPLE, Encoder, jepa_score
from icml_generative.validation import (
    check_choice,
    check_int,
    check_number,
    check_real_tensor,
    check_tensor,
)

Objective = Callable[[torch.Tensor], torch.Tensor]  # x̂0 (n, ...) -> (n,): the value guidance lowers
X0Fn = Callable[[torch.Tensor], torch.Tensor]  # z_t -> x̂0, differentiable
SCHEDULES = ("constant", "variance")
PREDICTION_TYPES = ("epsilon", "v_prediction", "sample", "flow")
MAX_DRAWS = 1024


def _check_callable(value: Any, name: str, signature: str) -> None:
    if not callable(value):
        raise TypeError(f"{name} must be callable as {signature}, got {type(value).__name__}")


def tweedie_x0(
    sample: torch.Tensor,
    model_output: torch.Tensor,
    *,
    alpha_bar: float | torch.Tensor | None = None,
    sigma: float | torch.Tensor | None = None,
    prediction_type: str = "epsilon",
) -> torch.Tensor:
    """The denoised estimate ``x̂0 = E[x0 | z_t]`` from a model's output, differentiable in both.

    Variance-preserving (``alpha_bar`` = ``ᾱ_t``): ``epsilon``: ``(z − sqrt(1−ᾱ) ε̂) / sqrt(ᾱ)``;
    ``v_prediction``: ``sqrt(ᾱ) z − sqrt(1−ᾱ) v̂``; ``sample``: the output itself. With ``sigma``
    instead: variance-exploding ``epsilon`` (``z = x0 + σ ε``): ``z − σ ε̂``; ``flow`` (rectified flow,
    ``z = (1−σ) x0 + σ ε``, the model predicts ``v = ε − x0``): ``z − σ v̂``. In ``sample``'s dtype; the
    coefficients (``sqrt(ᾱ)``, ``sqrt(1−ᾱ)``, ``σ``) are computed in float32 or wider (in bfloat16,
    ``1 − ᾱ`` would be 0 for ``ᾱ`` above ``1 − 2^-9``, dropping the model's output).
    """
    check_tensor(sample, "sample", floating=True, finite=True)
    check_tensor(model_output, "model_output", floating=True, finite=True)
    if model_output.shape != sample.shape:
        raise ValueError(
            f"model_output must be shaped like sample {tuple(sample.shape)}, got {tuple(model_output.shape)}"
        )
    check_choice(prediction_type, "prediction_type", PREDICTION_TYPES)
    if prediction_type == "sample":
        return model_output
    if (alpha_bar is None) == (sigma is None):
        raise ValueError("pass exactly one of alpha_bar (variance-preserving) and sigma (VE or flow)")
    if alpha_bar is not None:
        if prediction_type == "flow":
            raise ValueError("prediction_type='flow' needs sigma, not alpha_bar")
        a = _level(alpha_bar, "alpha_bar", sample, maximum=1.0, above=0.0)
        if prediction_type == "epsilon":
            return (sample - (1 - a).sqrt() * model_output) / a.sqrt()
        return a.sqrt() * sample - (1 - a).sqrt() * model_output
    if prediction_type == "v_prediction":
        raise ValueError("prediction_type='v_prediction' needs alpha_bar, not sigma")
    s = _level(sigma, "sigma", sample, minimum=0.0)
    return sample - s * model_output


def _level(value: Any, name: str, like: torch.Tensor, **bounds: float) -> torch.Tensor:
    """A checked scalar as a 0-d tensor on ``like``'s device, in float32 or ``like``'s dtype if wider (0-d:
    an operation with ``like`` still runs in ``like``'s dtype)."""
    if isinstance(value, torch.Tensor):
        check_real_tensor(value, name)
        if value.numel() != 1:
            raise ValueError(f"{name} must be a single number, got shape {tuple(value.shape)}")
        value = float(value)
    dtype = torch.promote_types(like.dtype, torch.float32)
    return torch.tensor(check_number(value, name, **bounds), dtype=dtype, device=like.device)


def minority_score(
    x0: torch.Tensor,
    denoise: Callable[[torch.Tensor], torch.Tensor],
    scale: float = 1.0,
    noise_scale: float = 1.0,
    *,
    draws: int = 1,
    seed: int = 0,
) -> torch.Tensor:
    """The minority score of Um et al. (ICLR 2024): ``E_ε ‖x0 − denoise(scale·x0 + noise_scale·ε)‖²``,
    per sample ``(n,)``, averaged over ``draws`` noise draws (a dedicated generator seeded by ``seed``).

    ``denoise`` is the generator's own Tweedie estimate at the fixed noise level the perturbation
    ``(scale, noise_scale)`` reaches (``(sqrt(ᾱ_s), sqrt(1 − ᾱ_s))`` for a VP model, ``(1, σ_s)`` for a VE
    one). High where the generator reconstructs badly: its own notion of a minority sample.
    Differentiable in ``x0``. Accumulated, and returned, in float32 (``x0``'s dtype if wider): a sum of
    squares over a half-precision latent overflows float16 at ordinary sizes.
    """
    x0 = check_tensor(x0, "x0", floating=True, finite=True)
    if x0.ndim < 2 or x0.numel() == 0:
        raise ValueError(f"x0 must be a non-empty batch shaped (n, ...), got {tuple(x0.shape)}")
    _check_callable(denoise, "denoise", "denoise(x_noisy) -> x0_hat")
    scale = check_number(scale, "scale", above=0)
    noise_scale = check_number(noise_scale, "noise_scale", minimum=0)
    check_int(draws, "draws", 1, MAX_DRAWS)
    gen = torch.Generator(device=x0.device).manual_seed(check_int(seed, "seed", 0, 2**63 - 1))
    acc = torch.promote_types(x0.dtype, torch.float32)
    total = torch.zeros(x0.shape[0], dtype=acc, device=x0.device)
    for _ in range(draws):
        eps = torch.randn(x0.shape, generator=gen, device=x0.device, dtype=x0.dtype)
        recon = denoise(scale * x0 + noise_scale * eps)
        if not isinstance(recon, torch.Tensor) or recon.shape != x0.shape:
            raise ValueError(
                f"denoise must return a tensor shaped like x0 {tuple(x0.shape)}, got "
                f"{getattr(recon, 'shape', type(recon).__name__)}"
            )
        total = total + ((x0 - recon).to(acc) ** 2).reshape(x0.shape[0], -1).sum(dim=1)
    score = total / draws
    if not bool(torch.isfinite(score.detach()).all()):
        warnings.warn(
            f"minority_score: the score overflows {acc} (scale={scale:g}, noise_scale={noise_scale:g})",
            RuntimeWarning,
            stacklevel=2,
        )
    return score


def _keep_parameter(t: torch.Tensor) -> torch.Tensor:
    """Save a parameter for backward as it is now (an alias of its storage), not as the parameter object.

    Memory options swap a parameter's data after each forward: diffusers' ``enable_layerwise_casting`` casts
    the weights back to their storage dtype (``module.to``, which sets ``param.data``), leaf group offloading
    moves them back to the offload device. Autograd saved the parameter object itself (a convolution's
    weight), so the backward through the denoiser found bfloat16 / float8 weights ("expected scalar type Float
    but found BFloat16"). An alias keeps the weights the forward used, without a copy."""
    return t.detach() if isinstance(t, torch.nn.Parameter) else t


def _unpacked(t: torch.Tensor) -> torch.Tensor:
    return t


class TweedieGuidance:
    """Gradient descent on ``objective(preprocess(x̂0(z_t)))`` at the active steps of a sampler (module
    docstring). ``objective`` maps a batch to one value per sample, ``(n,)``, the quantity to lower.

    Call it as ``z = guidance(z, x0_fn, step, num_steps)`` before a plain torch sampler's update at step
    ``step`` of ``num_steps`` (``x0_fn(z)`` differentiable), or pass :meth:`diffusers_callback` to a
    diffusers pipeline. ``last_objective`` holds the objective's values at the latest active step.
    """

    def __init__(
        self,
        objective: Objective,
        eta: float = 0.5,
        *,
        start_fraction: float = 0.8,
        interval: int = 1,
        schedule: str = "constant",
        normalize: bool = True,
        preprocess: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        _check_callable(objective, "objective", "objective(x0_hat) -> (n,) tensor")
        self.objective = objective
        self.eta = check_number(eta, "eta")
        self.start_fraction = check_number(start_fraction, "start_fraction", 0.0, 1.0)
        self.interval = check_int(interval, "interval", 1, 2**31)
        self.schedule = check_choice(schedule, "schedule", SCHEDULES)
        if not isinstance(normalize, bool):
            raise TypeError(f"normalize must be a bool, got {type(normalize).__name__}")
        self.normalize = normalize
        if preprocess is not None:
            _check_callable(preprocess, "preprocess", "preprocess(x0_hat) -> tensor")
        self.preprocess = preprocess
        self.last_objective: torch.Tensor | None = None
        self.current_step = 0  # the step being guided: objectives may draw their noise from it

    def is_active(self, step: int, num_steps: int) -> bool:
        """Whether guidance acts at ``step`` (0-based) of ``num_steps``."""
        check_int(num_steps, "num_steps", 1, 2**31)
        check_int(step, "step", 0, num_steps - 1)
        return step % self.interval == 0 and 1.0 - step / num_steps <= self.start_fraction + 1e-12

    def __call__(
        self,
        z: torch.Tensor,
        x0_fn: X0Fn,
        step: int,
        num_steps: int,
        variance: float | torch.Tensor | None = None,
    ) -> torch.Tensor:
        check_tensor(z, "z", floating=True, finite=True)
        if z.ndim < 2 or z.numel() == 0:
            raise ValueError(f"z must be a non-empty batch shaped (n, ...), got {tuple(z.shape)}")
        _check_callable(x0_fn, "x0_fn", "x0_fn(z) -> x0_hat")
        if self.schedule == "variance":
            if variance is None:
                raise ValueError("schedule='variance' needs the step's posterior variance: pass variance")
            variance = _level(variance, "variance", z, minimum=0.0)
        if not self.is_active(step, num_steps) or self.eta == 0.0:
            return z
        self.current_step = step
        with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(_keep_parameter, _unpacked):
            zg = z.detach().requires_grad_(True)
            x0 = x0_fn(zg)
            if not isinstance(x0, torch.Tensor):
                raise TypeError(f"x0_fn must return a tensor, got {type(x0).__name__}")
            if self.preprocess is not None:
                x0 = self.preprocess(x0)
            if not isinstance(x0, torch.Tensor) or not x0.requires_grad:
                raise TypeError(
                    "x0_fn and preprocess must be differentiable: the Tweedie estimate does not depend on z "
                    "through autograd (a detach, torch.no_grad or a non-torch operation)"
                )
            try:
                value = self.objective(x0)
            except (IndexError, RuntimeError) as err:
                raise ValueError(f"objective failed on x0_hat shaped {tuple(x0.shape)}: {err}") from err
            if not isinstance(value, torch.Tensor) or value.shape != (z.shape[0],):
                raise ValueError(
                    f"objective must return one value per sample, shaped ({z.shape[0]},), got "
                    f"{getattr(value, 'shape', type(value).__name__)}"
                )
            grad = None
            if value.requires_grad:
                (grad,) = torch.autograd.grad(value.sum(), zg, allow_unused=True)
        if grad is None:  # the objective is constant in z (a linear encoder's JEPA-score): no push
            grad = torch.zeros_like(z)
        self.last_objective = value.detach()
        grad = grad.detach().reshape(z.shape[0], -1)
        finite = torch.isfinite(grad).all(dim=1)
        if not bool(finite.all()):
            warnings.warn(
                f"{type(self).__name__}: the guidance gradient is not finite for {int((~finite).sum())} "
                f"sample(s) at step {step}: those samples are left unguided at this step",
                RuntimeWarning,
                stacklevel=2,
            )
            grad = torch.where(finite[:, None], grad, torch.zeros_like(grad))
        if self.normalize:
            grad = grad / grad.abs().amax(dim=1, keepdim=True).clamp_min(torch.finfo(grad.dtype).tiny)
        scale = self.eta if variance is None or self.schedule == "constant" else self.eta * variance
        guided = (z.detach() - scale * grad.reshape(z.shape)).to(z.dtype)
        if not bool(torch.isfinite(guided).all()):
            raise ValueError(f"eta={self.eta:g} is too large: the guided z overflows {z.dtype}")
        return guided

    def diffusers_callback(
        self, x0_fn: Callable[[Any, torch.Tensor, Any, dict], torch.Tensor] | None = None
    ) -> Callable[[Any, int, Any, dict], dict]:
        """A ``callback_on_step_end`` for diffusers pipelines: after step ``i`` the latents sit at the next
        timestep; they are guided there, before the pipeline denoises them, and not after the loop's last
        step. Steps count in the scheduler's whole schedule (``start_fraction`` is a noise level): in img2img
        with ``strength`` < 1 the loop runs its tail, and the next timestep is found there.

        ``x0_fn(pipe, latents, timestep, callback_kwargs) -> x̂0`` gives the Tweedie estimate; by default
        the pipeline's ``unet`` under a variance-preserving scheduler (DDIM, DDPM, PNDM, DPM-Solver: those
        with ``alphas_cumprod`` and ``init_noise_sigma == 1``), with the prompt embeddings of
        ``callback_kwargs`` (their conditional half under classifier-free guidance; pass
        ``callback_on_step_end_tensor_inputs=["latents", "prompt_embeds"]``; SDXL's ``add_text_embeds``
        and ``add_time_ids`` too). For flow-matching or Euler pipelines pass ``x0_fn`` (:func:`tweedie_x0`
        does the algebra). The objective sees ``preprocess(x̂0)``: set ``preprocess`` to the VAE decode
        when the objective works on images.
        """
        if x0_fn is not None:
            _check_callable(x0_fn, "x0_fn", "x0_fn(pipe, latents, timestep, callback_kwargs) -> x0_hat")
        estimate = x0_fn or _unet_vp_x0

        def callback(pipe: Any, i: int, t: Any, callback_kwargs: dict) -> dict:
            latents = callback_kwargs.get("latents")
            timesteps = pipe.scheduler.timesteps
            nxt, end = _next_step(pipe, timesteps, int(i), t)
            if latents is None or nxt >= end or self.eta == 0.0:
                return callback_kwargs
            if not self.is_active(nxt, len(timesteps)):
                return callback_kwargs
            t_next = timesteps[nxt]
            variance = _vp_variance(pipe.scheduler, timesteps, nxt) if self.schedule == "variance" else None
            guided = self(
                latents,
                lambda z: estimate(pipe, z, t_next, callback_kwargs),
                nxt,
                len(timesteps),
                variance,
            )
            return {**callback_kwargs, "latents": guided}

        return callback


def _next_step(pipe: Any, timesteps: torch.Tensor, i: int, t: Any) -> tuple[int, int]:
    """``(index in scheduler.timesteps of the step after loop step i, end of the loop there)``.

    The loop runs a slice ``timesteps[begin : begin + pipe.num_timesteps]``: img2img and inpainting start it
    at ``strength`` (``begin > 0``), SDXL's ``denoising_end`` ends it early. ``begin`` is the scheduler's
    ``begin_index`` where it has one (the pipelines set it), else the first index ``>= i`` holding ``t``.
    """
    begin = getattr(pipe.scheduler, "begin_index", None)
    if not isinstance(begin, int):
        held = torch.nonzero(torch.as_tensor(timesteps) == torch.as_tensor(t, device=timesteps.device))
        begin = next((j - i for j in held.flatten().tolist() if j >= i), 0)
    loop = getattr(pipe, "_num_timesteps", None)
    end = len(timesteps) if not isinstance(loop, int) else min(len(timesteps), begin + loop)
    return begin + i + 1, end


def _vp_scheduler(scheduler: Any) -> torch.Tensor:
    alphas = getattr(scheduler, "alphas_cumprod", None)
    if alphas is None or float(getattr(scheduler, "init_noise_sigma", 1.0)) != 1.0:
        raise TypeError(
            f"the default x0_fn needs a variance-preserving scheduler (alphas_cumprod, init_noise_sigma 1), "
            f"got {type(scheduler).__name__}: pass x0_fn(pipe, latents, timestep, callback_kwargs)"
        )
    return alphas


def _vp_variance(scheduler: Any, timesteps: torch.Tensor, i: int) -> float:
    """DDPM's posterior variance ``(1−ᾱ_prev)/(1−ᾱ_t) · (1 − ᾱ_t/ᾱ_prev)`` between timesteps ``i`` and ``i+1``."""
    alphas = _vp_scheduler(scheduler)
    a_t = float(alphas[int(timesteps[i])])
    if i + 1 < len(timesteps):
        a_prev = float(alphas[int(timesteps[i + 1])])
    else:
        a_prev = float(getattr(scheduler, "final_alpha_cumprod", torch.tensor(1.0)))
    return (1 - a_prev) / max(1 - a_t, 1e-12) * (1 - a_t / a_prev)


def _unet_vp_x0(pipe: Any, latents: torch.Tensor, t: Any, kwargs: dict) -> torch.Tensor:
    """Tweedie from ``pipe.unet`` under a variance-preserving scheduler (see ``diffusers_callback``)."""
    unet = getattr(pipe, "unet", None)
    if unet is None:
        raise TypeError(
            f"{type(pipe).__name__} has no unet: pass x0_fn(pipe, latents, timestep, callback_kwargs)"
        )
    alphas = _vp_scheduler(pipe.scheduler)
    n = latents.shape[0]

    def cond_half(v: torch.Tensor) -> torch.Tensor:
        return v[n:] if v.shape[0] == 2 * n else v

    model_kwargs: dict[str, Any] = {}
    if getattr(unet.config, "cross_attention_dim", None) is not None:  # UNet2DConditionModel
        if "prompt_embeds" not in kwargs:
            raise ValueError(
                "the unet is text-conditioned: pass callback_on_step_end_tensor_inputs=['latents', "
                "'prompt_embeds'] to the pipeline so the guidance sees the prompt embeddings"
            )
        model_kwargs["encoder_hidden_states"] = cond_half(kwargs["prompt_embeds"])
    if "add_text_embeds" in kwargs and "add_time_ids" in kwargs:
        model_kwargs["added_cond_kwargs"] = {
            "text_embeds": cond_half(kwargs["add_text_embeds"]),
            "time_ids": cond_half(kwargs["add_time_ids"]),
        }
    model_input = pipe.scheduler.scale_model_input(latents, t)
    out = unet(model_input, t, **model_kwargs, return_dict=False)[0]
    a = alphas.to(latents.device)[int(t)]
    return tweedie_x0(latents, out, alpha_bar=a, prediction_type=pipe.scheduler.config.prediction_type)


class JEPAGuidance(TweedieGuidance):
    """JEPA guidance (Park & Um, ICML 2026): descend the randomized top-``top_k`` JEPA-score of ``x̂0``.

    ``encoder`` maps a batch of (preprocessed) samples to embeddings; the score is
    :func:`~icml_generative.jepa_guidance.jepa_score` with ``k=top_k`` and ``power_iters``,
    ``oversample``, ``jvp``, ``fd_eps`` passed on, differentiable in ``x̂0`` (the sketch basis held fixed;
    ``fd_eps=None``: ``1e-4``, or ``sqrt(machine epsilon)`` for a half-precision ``x̂0``).
    The sketch directions at step ``s`` are drawn from ``seed + s``: a run is reproducible and the global
    RNG is not touched. Defaults are the paper's Table 2 script (``eta 0.5, interval 1, start_fraction
    0.8, top_k 9, power_iters 2, oversample 2, constant schedule, normalized gradient``).
    """

    def __init__(
        self,
        encoder: Encoder,
        eta: float = 0.5,
        top_k: int = 9,
        power_iters: int = 2,
        start_fraction: float = 0.8,
        interval: int = 1,
        schedule: str = "constant",
        normalize: bool = True,
        *,
        oversample: int = 2,
        jvp: str = "finite_difference",
        fd_eps: float | None = None,
        preprocess: Callable[[torch.Tensor], torch.Tensor] | None = None,
        seed: int = 0,
    ) -> None:
        _check_callable(encoder, "encoder", "encoder(x) -> (n, D) embeddings")
        self.encoder = encoder
        self.top_k = check_int(top_k, "top_k", 1, 2**20)
        self.power_iters = check_int(power_iters, "power_iters", 0, 64)
        self.oversample = check_int(oversample, "oversample", 0, MAX_OVERSAMPLE)
        self.jvp = check_choice(jvp, "jvp", JVP_METHODS)
        self.fd_eps = None if fd_eps is None else check_number(fd_eps, "fd_eps", above=0, maximum=1.0)
        self.seed = check_int(seed, "seed", 0, 2**62)
        super().__init__(
            self._score,
            eta,
            start_fraction=start_fraction,
            interval=interval,
            schedule=schedule,
            normalize=normalize,
            preprocess=preprocess,
        )

    def _score(self, x: torch.Tensor) -> torch.Tensor:
        return jepa_score(
            self.encoder,
            x,
            self.top_k,
            method="randomized",
            power_iters=self.power_iters,
            oversample=self.oversample,
            jvp=self.jvp,
            fd_eps=self.fd_eps,
            seed=self.seed + self.current_step,
            create_graph=True,
        )


class MinorityGuidance(TweedieGuidance):
    """The generator-centric minority baseline: ascend :func:`minority_score` of ``x̂0`` (descend its
    negative), with the generator's own ``denoise`` at the fixed perturbation ``(scale, noise_scale)``.
    Same stepping rule and arguments as :class:`TweedieGuidance`; noise draws from ``seed + step``."""

    def __init__(
        self,
        denoise: Callable[[torch.Tensor], torch.Tensor],
        scale: float = 1.0,
        noise_scale: float = 1.0,
        eta: float = 0.5,
        *,
        draws: int = 1,
        start_fraction: float = 0.8,
        interval: int = 1,
        schedule: str = "constant",
        normalize: bool = True,
        seed: int = 0,
    ) -> None:
        _check_callable(denoise, "denoise", "denoise(x_noisy) -> x0_hat")
        self.denoise = denoise
        self.scale = check_number(scale, "scale", above=0)
        self.noise_scale = check_number(noise_scale, "noise_scale", minimum=0)
        self.draws = check_int(draws, "draws", 1, MAX_DRAWS)
        self.seed = check_int(seed, "seed", 0, 2**62)
        super().__init__(
            self._negative_score,
            eta,
            start_fraction=start_fraction,
            interval=interval,
            schedule=schedule,
            normalize=normalize,
        )

    def _negative_score(self, x: torch.Tensor) -> torch.Tensor:
        score = minority_score(
            x,
            self.denoise,
            self.scale,
            self.noise_scale,
            draws=self.draws,
            seed=self.seed + self.current_step,
        )
        return -score
