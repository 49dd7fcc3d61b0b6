"""Bi-NAC's two-timescale actor-critic loop over the draft -> feedback -> revision protocol.

Singh, Sredharan, Chakraborty, Bedi, "Natural Language Actor-Critic Is Bilevel" (ICML 2026; arXiv
2605.24547). The critic's feedback is judged by what it does to the actor: the upper level maximises the
verified improvement ``r(x, y1) - r(x, y0)`` of the revision ``y1`` over the draft ``y0``, the lower level
trains the actor on its revisions and drafts. The paper's code was not available; the first-order
algorithm below is **our reconstruction** from the abstract and the project page:

1. the actor drafts ``G`` answers per prompt (``y0``); the verifier scores them;
2. the critic writes ``K`` feedbacks per draft (``f``);
3. the actor revises each (prompt, draft, feedback) ``M`` times (``y1``); the verifier scores them;
4. critic step (every ``critic_every`` steps): GRPO over the ``K`` feedbacks of each draft with reward
   ``delta = mean_M r(y1) - r(y0)``, the revisions coming from the current actor (``"in_context"``, no extra
   verifier call) or from a look-ahead copy of the actor after one actor step on this batch
   (``"after_adaptation"``, ``M`` fresh revisions per feedback, counted); the copy is then discarded;
5. actor step: GRPO on the revisions (grouped by prompt, ``G * K * M`` each) plus ``draft_weight`` times GRPO
   on the drafts (groups of ``G``), so the actor improves with and without feedback.

No second-order hypergradient is taken. The baselines share the loop: ``critic=None`` is GRPO on the actor
alone, ``critic_mode="fixed"`` keeps any critic (a frozen network, a scripted oracle or a generic one)
unchanged, and ``critic_mode="supervised"`` trains the critic to name the draft's correctness with two label
tokens, not to improve the actor. A :class:`Ledger` counts every verifier call and every parameter, so methods
are compared at equal spending.
"""

from __future__ import annotations

import copy
import math
import numbers
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from icml_agents.binac.policy import Completions, check_policy, check_prompts, is_trainable
from icml_agents.rl.grpo import LOSS_TYPES, SCALES, compute_advantages, grpo_loss
from icml_agents.validation import check_bool, check_choice, check_int, check_list, check_real

CRITIC_MODES = ("bilevel", "fixed", "supervised")
CRITIC_REWARDS = ("in_context", "after_adaptation")
MAX_GROUP = 1024  # a cap on G, K and M


@dataclass(frozen=True)
class Template:
    """How the protocol's token sequences are joined: ``prompt + draft + feedback_prefix`` is the critic's
    input, ``prompt + draft + feedback_prefix + feedback + revision_prefix`` the actor's revision prompt."""

    feedback_prefix: tuple[int, ...] = ()
    revision_prefix: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for name in ("feedback_prefix", "revision_prefix"):
            value = getattr(self, name)
            if value:
                object.__setattr__(self, name, tuple(check_prompts([value], name)[0]))
            else:
                object.__setattr__(self, name, ())

    def critic_prompt(self, prompt: Sequence[int], draft: Sequence[int]) -> list[int]:
        return [*prompt, *draft, *self.feedback_prefix]

    def revision_prompt(
        self, prompt: Sequence[int], draft: Sequence[int], feedback: Sequence[int]
    ) -> list[int]:
        return [*prompt, *draft, *self.feedback_prefix, *feedback, *self.revision_prefix]


def count_parameters(module) -> int:
    """The number of distinct parameter values of ``module`` (tied weights counted once); 0 for a scripted
    policy."""
    if not callable(getattr(module, "parameters", None)):
        raise TypeError(
            f"module must be a torch module or a policy (with parameters()), got {type(module).__name__}"
        )
    seen, total = set(), 0
    for p in module.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


class Ledger:
    """One counter of what compared methods must spend equally: verifier calls and parameters.

    ``verifier(reference, completion_ids) -> float`` scores one completion; :meth:`verify` calls it once per
    completion and adds to :attr:`calls`. :meth:`register` records a model's parameters under a name.
    """

    def __init__(self, verifier: Callable[[Any, list[int]], float]):
        if not callable(verifier):
            raise TypeError(
                f"verifier must be callable (reference, completion_ids) -> float, got {verifier!r}"
            )
        self.verifier = verifier
        self.calls = 0
        self.parameters: dict[str, int] = {}

    def verify(self, references: Sequence[Any], completions: Sequence[Sequence[int]]) -> torch.Tensor:
        """Scores ``(N,)`` float64 of ``completions`` against ``references`` (equal lengths)."""
        references = list(check_list(references, "references"))
        completions = check_prompts(completions, "completions", allow_empty=True)
        if len(references) != len(completions):
            raise ValueError(
                f"references must have one entry per completion ({len(completions)}), got {len(references)}"
            )
        scores: list[float] = []
        for i, (ref, comp) in enumerate(zip(references, completions, strict=True)):
            try:
                s = self.verifier(ref, list(comp))
            except (TypeError, ValueError) as err:  # the user's verifier refused the pair: say which one
                raise type(err)(f"verifier failed on references[{i}] and completions[{i}]: {err}") from err
            if isinstance(s, bool) or not isinstance(s, numbers.Real) or not math.isfinite(float(s)):
                raise ValueError(f"verifier must return a finite number, got {s!r}")
            scores.append(float(s))
        self.calls += len(scores)
        return torch.tensor(scores, dtype=torch.float64)

    def register(self, name: str, module) -> int:
        self.parameters[name] = count_parameters(module)
        return self.parameters[name]

    @property
    def total_parameters(self) -> int:
        return sum(self.parameters.values())


def _rewards(values, name: str) -> torch.Tensor:
    """Finite real rewards as a 1-D float64 tensor."""
    try:
        arr = values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else np.asarray(values)
        if arr.dtype.kind not in "biuf" or arr.ndim != 1 or arr.size == 0:
            raise TypeError
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a non-empty 1-D sequence of real numbers, got {values!r}") from None
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite, got NaN or inf")
    return torch.from_numpy(arr.astype(np.float64))


def improvement_rewards(
    draft_rewards, revision_rewards, feedbacks_per_draft: int, revisions_per_feedback: int = 1
) -> torch.Tensor:
    """The critic's reward per feedback: ``mean over its M revisions of r(y1)`` minus ``r(y0)`` of its draft.

    ``draft_rewards`` ``(D,)``; ``revision_rewards`` ``(D * K * M,)`` laid out draft-major (the ``K`` feedbacks
    of a draft consecutive, the ``M`` revisions of a feedback consecutive). Returns ``(D * K,)`` float64.
    """
    k = check_int(feedbacks_per_draft, "feedbacks_per_draft", 1, MAX_GROUP)
    m = check_int(revisions_per_feedback, "revisions_per_feedback", 1, MAX_GROUP)
    r0, r1 = _rewards(draft_rewards, "draft_rewards"), _rewards(revision_rewards, "revision_rewards")
    if r1.numel() != r0.numel() * k * m:
        raise ValueError(
            f"revision_rewards must have len(draft_rewards) * K * M = {r0.numel() * k * m} entries, "
            f"got {r1.numel()}"
        )
    return r1.view(-1, m).mean(1) - r0.repeat_interleave(k)


@dataclass
class BiNACConfig:
    """Bi-NAC's hyper-parameters (GRPO's names as in :class:`icml_agents.rl.GRPOConfig`)."""

    group_size: int = 4  # G: drafts per prompt
    feedbacks_per_draft: int = 4  # K: the critic's GRPO group
    revisions_per_feedback: int = 1  # M
    draft_weight: float = 1.0  # lambda: weight of the drafts' GRPO term in the actor's loss
    critic_mode: str = "bilevel"  # "bilevel" | "fixed" | "supervised"
    critic_reward: str = "in_context"  # "in_context" | "after_adaptation"
    critic_every: int = 1  # the critic's timescale: one critic step every this many actor steps
    actor_lr: float = 1e-3
    critic_lr: float = 1e-3
    epsilon: float = 0.2
    scale_rewards: str = "group"
    loss_type: str = "dapo"
    std_eps: float = 1e-4
    max_grad_norm: float | None = 1.0
    supervised_tokens: tuple[int, int] | None = None  # (correct, wrong): the supervised critic's labels

    def __post_init__(self) -> None:
        check_int(self.group_size, "group_size", 2, MAX_GROUP, why=" (a group of one has no baseline)")
        check_int(self.feedbacks_per_draft, "feedbacks_per_draft", 1, MAX_GROUP)
        check_int(self.revisions_per_feedback, "revisions_per_feedback", 1, MAX_GROUP)
        check_real(self.draft_weight, "draft_weight", "[0, inf)")
        check_choice(self.critic_mode, "critic_mode", CRITIC_MODES)
        check_choice(self.critic_reward, "critic_reward", CRITIC_REWARDS)
        check_int(self.critic_every, "critic_every", 1, 10**6)
        check_real(self.actor_lr, "actor_lr", "(0, inf)")
        check_real(self.critic_lr, "critic_lr", "(0, inf)")
        check_real(self.epsilon, "epsilon", "[0, inf)")
        check_choice(self.scale_rewards, "scale_rewards", SCALES)
        check_choice(self.loss_type, "loss_type", LOSS_TYPES)
        check_real(self.std_eps, "std_eps", "[0, inf)")
        if self.max_grad_norm is not None:
            check_real(self.max_grad_norm, "max_grad_norm", "(0, inf)")
        if self.critic_mode == "bilevel" and self.feedbacks_per_draft < 2:
            raise ValueError(
                "feedbacks_per_draft must be >= 2 with critic_mode='bilevel' (the critic's GRPO group), "
                f"got {self.feedbacks_per_draft}"
            )
        if self.supervised_tokens is not None:
            labels = check_prompts([self.supervised_tokens], "supervised_tokens")[0]
            if len(labels) != 2:
                raise ValueError(
                    f"supervised_tokens must be (correct, wrong) token ids, got {self.supervised_tokens}"
                )
            self.supervised_tokens = (labels[0], labels[1])
        if self.critic_mode == "supervised" and self.supervised_tokens is None:
            raise ValueError("supervised_tokens (correct, wrong) is required with critic_mode='supervised'")


@dataclass
class Rollout:
    """One batch of the protocol, everything laid out draft-major (see :func:`improvement_rewards`)."""

    prompts: list[list[int]]  # (B,)
    references: list[Any]  # (B,)
    draft_prompts: list[list[int]]  # (B * G,)
    drafts: Completions
    draft_rewards: torch.Tensor  # (B * G,)
    critic_prompts: list[list[int]] = field(default_factory=list)  # (B * G * K,)
    feedback: Completions | None = None
    revision_prompts: list[list[int]] = field(default_factory=list)  # (B * G * K * M,)
    revisions: Completions | None = None
    revision_rewards: torch.Tensor | None = None  # (B * G * K * M,)


def _check_template(template) -> Template:
    if template is None:
        return Template()
    if not isinstance(template, Template):
        raise TypeError(f"template must be a Template, got {type(template).__name__}")
    return template


def _grpo_term(policy, prompts, completions: Completions, rewards, group: int, cfg: BiNACConfig):
    adv, frac = compute_advantages(rewards, group, scale=cfg.scale_rewards, eps=cfg.std_eps)
    logp = policy.log_probs(prompts, completions)
    loss, _ = grpo_loss(
        logp,
        logp.detach(),
        adv.to(device=logp.device, dtype=logp.dtype),
        completions.mask.to(logp.device),
        epsilon=cfg.epsilon,
        loss_type=cfg.loss_type,
    )
    return loss, frac


def _params(policy) -> list[nn.Parameter]:
    return [p for p in policy.parameters() if p.requires_grad]


def _check_trainable_dtypes(trained: dict[str, Any]) -> None:
    """Refuse float16 trainable parameters and warn once about bfloat16 ones (Adam updates the parameters
    in their own dtype: there are no float32 master weights)."""
    bf16 = []
    for name, policy in trained.items():
        dtypes = {p.dtype for p in _params(policy)}
        if torch.float16 in dtypes:
            raise ValueError(
                f"{name} has float16 trainable parameters: Adam in float16 rounds its eps (1e-8) to 0 and "
                "turns the weights into NaN after one step; train it in float32 (its model's .float()) or "
                "bfloat16, or freeze those parameters"
            )
        if torch.bfloat16 in dtypes:
            bf16.append(name)
    if bf16:
        warnings.warn(
            f"{' and '.join(bf16)} {'has' if len(bf16) == 1 else 'have'} bfloat16 trainable parameters: "
            "without float32 master weights, Adam updates smaller than half a bfloat16 ulp of a weight are "
            "lost to rounding (most of them at small learning rates); train in float32 to keep them",
            RuntimeWarning,
            stacklevel=3,
        )


class BiNACTrainer:
    """Train ``actor`` (and ``critic``) with the Bi-NAC loop; ``critic=None`` trains the actor alone by GRPO.

    ``actor`` is a :class:`~icml_agents.binac.CausalLMPolicy` (a scripted actor is kept fixed, to train a
    critic for it); ``critic`` is any policy
    (:class:`~icml_agents.binac.ScriptedPolicy` for scripted critics) and trainable for the ``"bilevel"`` and
    ``"supervised"`` modes. ``verifier(reference, completion_ids) -> float`` scores answers; it is called
    through :attr:`ledger`, which also records both models' parameters.

    The trained models are updated by Adam in their parameters' own dtype: float16 trainable parameters
    are refused (``ValueError``: Adam's eps rounds to 0 and the weights turn NaN), bfloat16 ones are
    trained with a ``RuntimeWarning`` (updates below half a bfloat16 ulp of a weight are lost); train in
    float32 for exact updates.
    """

    def __init__(
        self,
        actor,
        critic,
        verifier: Callable[[Any, list[int]], float],
        template: Template | None = None,
        config: BiNACConfig | None = None,
        seed: int = 0,
    ):
        self.config = cfg = config if config is not None else BiNACConfig()
        if not isinstance(cfg, BiNACConfig):
            raise TypeError(f"config must be a BiNACConfig, got {type(cfg).__name__}")
        if critic is not None and cfg.critic_mode != "fixed" and not is_trainable(critic):
            raise ValueError(f"critic must be trainable with critic_mode={cfg.critic_mode!r}; use 'fixed'")
        self.template = _check_template(template)
        check_policy(actor, "actor")
        if critic is not None:
            check_policy(critic, "critic")
        self.actor, self.critic = actor, critic
        self.ledger = Ledger(verifier)
        self.ledger.register("actor", actor)
        self.ledger.register("critic", critic if critic is not None else nn.Module())
        self.generator = torch.Generator().manual_seed(check_int(seed, "seed", 0, 2**63 - 1))
        trained = {"actor": actor} if is_trainable(actor) else {}
        if critic is not None and cfg.critic_mode != "fixed":
            trained["critic"] = critic
        _check_trainable_dtypes(trained)
        self.actor_opt = torch.optim.Adam(_params(actor), lr=cfg.actor_lr) if "actor" in trained else None
        self.critic_opt = None
        if "critic" in trained:
            self.critic_opt = torch.optim.Adam(_params(critic), lr=cfg.critic_lr)
        self.steps = 0

    # -- the protocol -------------------------------------------------------------------------------
    def rollout(self, prompts, references) -> Rollout:
        """Drafts, feedback and revisions for a batch of prompts, with their verified rewards."""
        prompts = check_prompts(prompts)
        references = list(check_list(references, "references"))
        if len(references) != len(prompts):
            raise ValueError(
                f"references must have one entry per prompt ({len(prompts)}), got {len(references)}"
            )
        cfg, gen = self.config, self.generator
        g, k, m = cfg.group_size, cfg.feedbacks_per_draft, cfg.revisions_per_feedback
        draft_prompts = [p for p in prompts for _ in range(g)]
        drafts = self.actor.generate(draft_prompts, gen)
        seqs = drafts.sequences()
        r0 = self.ledger.verify([r for r in references for _ in range(g)], seqs)
        out = Rollout(prompts, references, draft_prompts, drafts, r0)
        if self.critic is None:
            return out
        out.critic_prompts = [
            self.template.critic_prompt(p, d)
            for p, d in zip(draft_prompts, seqs, strict=True)
            for _ in range(k)
        ]
        out.feedback = self.critic.generate(out.critic_prompts, gen)
        out.revision_prompts = self._revision_prompts(out)
        out.revisions = self.actor.generate(out.revision_prompts, gen)
        refs = [r for r in references for _ in range(g * k * m)]
        out.revision_rewards = self.ledger.verify(refs, out.revisions.sequences())
        return out

    def _revision_prompts(self, r: Rollout) -> list[list[int]]:
        k, m = self.config.feedbacks_per_draft, self.config.revisions_per_feedback
        seqs = r.drafts.sequences()
        assert r.feedback is not None
        return [
            self.template.revision_prompt(r.draft_prompts[i // k], seqs[i // k], f)
            for i, f in enumerate(r.feedback.sequences())
            for _ in range(m)
        ]

    # -- the two levels -----------------------------------------------------------------------------
    def actor_loss(self, r: Rollout, actor=None) -> tuple[torch.Tensor, dict[str, float]]:
        """The actor's GRPO loss on ``r``: revisions (groups of ``G*K*M`` per prompt) + ``draft_weight`` x drafts
        (groups of ``G``); drafts alone without a critic."""
        actor = self.actor if actor is None else actor
        cfg = self.config
        g = cfg.group_size
        if r.revisions is None:
            loss, frac = _grpo_term(actor, r.draft_prompts, r.drafts, r.draft_rewards, g, cfg)
            return loss, {"frac_zero_std_draft": frac}
        gkm = g * cfg.feedbacks_per_draft * cfg.revisions_per_feedback
        loss, frac_rev = _grpo_term(actor, r.revision_prompts, r.revisions, r.revision_rewards, gkm, cfg)
        stats = {"frac_zero_std_revision": frac_rev}
        if cfg.draft_weight > 0:
            loss_d, frac_d = _grpo_term(actor, r.draft_prompts, r.drafts, r.draft_rewards, g, cfg)
            loss = loss + cfg.draft_weight * loss_d
            stats["frac_zero_std_draft"] = frac_d
        else:
            stats["frac_zero_std_draft"] = compute_advantages(r.draft_rewards, g, eps=cfg.std_eps)[1]
        return loss, stats

    def _apply(self, loss: torch.Tensor, opt: torch.optim.Optimizer, params: list[nn.Parameter]) -> None:
        if not bool(torch.isfinite(loss.detach())):
            warnings.warn(
                f"BiNACTrainer: a non-finite loss ({float(loss)}); the step is skipped", RuntimeWarning, 3
            )
            return
        opt.zero_grad()
        loss.backward()
        if self.config.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(params, self.config.max_grad_norm)
        opt.step()

    def lookahead_revisions(self, r: Rollout) -> torch.Tensor:
        """Revision rewards from a copy of the actor after one actor step on ``r`` (the "after adaptation"
        critic reward); the copy is discarded, the live actor and its optimizer are untouched."""
        look = self.actor  # a scripted actor does not adapt: its revisions are drawn again as they are
        if self.actor_opt is not None:
            look = copy.deepcopy(self.actor)
            params = _params(look)
            opt = type(self.actor_opt)(params, **self.actor_opt.defaults)
            opt.load_state_dict(copy.deepcopy(self.actor_opt.state_dict()))
            loss, _ = self.actor_loss(r, look)
            self._apply(loss, opt, params)
        revisions = look.generate(r.revision_prompts, self.generator)
        m = self.config.group_size * self.config.feedbacks_per_draft * self.config.revisions_per_feedback
        refs = [ref for ref in r.references for _ in range(m)]
        return self.ledger.verify(refs, revisions.sequences())

    def critic_update(self, r: Rollout) -> dict[str, float]:
        """One critic step on ``r`` (nothing for a fixed critic); the live actor is not changed."""
        cfg = self.config
        if self.critic is None or r.feedback is None or r.revision_rewards is None:
            return {}
        k, m = cfg.feedbacks_per_draft, cfg.revisions_per_feedback
        delta = improvement_rewards(r.draft_rewards, r.revision_rewards, k, m)
        stats = {"improvement": float(delta.mean()), "useful_feedback": float((delta > 0).double().mean())}
        if cfg.critic_mode == "fixed" or self.critic_opt is None:
            return stats
        params = _params(self.critic)
        if cfg.critic_mode == "supervised":
            assert cfg.supervised_tokens is not None
            good, bad = cfg.supervised_tokens
            first = r.critic_prompts[::k]  # one critic prompt per draft
            labels = [[good if float(v) > 0.5 else bad] for v in r.draft_rewards]
            target = Completions.from_sequences(labels, self.critic.eos_token_id)
            target.mask[:, 1:] = 0  # the label token only
            loss = -(self.critic.log_probs(first, target)[:, 0]).mean()
            self._apply(loss, self.critic_opt, params)
            stats["critic_loss"] = float(loss.detach())
            return stats
        if cfg.critic_reward == "after_adaptation":
            delta = improvement_rewards(r.draft_rewards, self.lookahead_revisions(r), k, m)
            stats["improvement_after_adaptation"] = float(delta.mean())
        loss, frac = _grpo_term(self.critic, r.critic_prompts, r.feedback, delta, k, cfg)
        self._apply(loss, self.critic_opt, params)
        stats["frac_zero_std_critic"] = frac
        return stats

    def actor_update(self, r: Rollout) -> dict[str, float]:
        """One actor GRPO step on ``r`` (none for a scripted actor: only its statistics)."""
        if self.actor_opt is None:
            g = self.config.group_size
            stats = {
                "frac_zero_std_draft": compute_advantages(r.draft_rewards, g, eps=self.config.std_eps)[1]
            }
            if r.revision_rewards is not None:
                gkm = g * self.config.feedbacks_per_draft * self.config.revisions_per_feedback
                stats["frac_zero_std_revision"] = compute_advantages(
                    r.revision_rewards, gkm, eps=self.config.std_eps
                )[1]
            return stats
        loss, stats = self.actor_loss(r)
        self._apply(loss, self.actor_opt, _params(self.actor))
        return stats

    def step(self, prompts, references) -> dict[str, float]:
        """Rollout, critic step (on the critic's timescale), actor step; returns the batch's statistics."""
        r = self.rollout(prompts, references)
        stats = {"draft_accuracy": float(r.draft_rewards.mean())}
        if r.revision_rewards is not None:
            stats["revision_accuracy"] = float(r.revision_rewards.mean())
        if self.steps % self.config.critic_every == 0:
            stats.update(self.critic_update(r))
        stats.update(self.actor_update(r))
        self.steps += 1
        stats["verifier_calls"] = float(self.ledger.calls)
        return stats


def evaluate(
    actor,
    critic,
    verifier,
    prompts,
    references,
    template: Template | None = None,
    greedy: bool = True,
    generator: torch.Generator | None = None,
) -> dict[str, np.ndarray]:
    """Draft and revised correctness per prompt (one draft, one feedback, one revision each; greedy by default).

    Not counted in any ledger: evaluation is measurement, not training. Without a critic the revised answer is
    the draft. Returns ``{"draft": (N,), "revised": (N,)}`` float arrays of verifier scores.
    """
    prompts = check_prompts(prompts)
    references = list(check_list(references, "references"))
    if len(references) != len(prompts):
        raise ValueError(f"references must have one entry per prompt ({len(prompts)}), got {len(references)}")
    template = _check_template(template)
    check_policy(actor, "actor")
    if critic is not None:
        check_policy(critic, "critic")
    check_bool(greedy, "greedy")
    ledger = Ledger(verifier)
    with torch.no_grad():
        drafts = actor.generate(prompts, generator, greedy=greedy).sequences()
        r0 = ledger.verify(references, drafts).numpy()
        if critic is None:
            return {"draft": r0, "revised": r0.copy()}
        feedback = critic.generate(
            [template.critic_prompt(p, d) for p, d in zip(prompts, drafts, strict=True)],
            generator,
            greedy=greedy,
        ).sequences()
        rev_prompts = [
            template.revision_prompt(p, d, f) for p, d, f in zip(prompts, drafts, feedback, strict=True)
        ]
        revised = actor.generate(rev_prompts, generator, greedy=greedy).sequences()
        return {"draft": r0, "revised": ledger.verify(references, revised).numpy()}
