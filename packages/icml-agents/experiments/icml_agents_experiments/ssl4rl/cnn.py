"""Fast-tier testbed: a small CNN encoder with one categorical answer head per SSL task, trained by GRPO.

Each head is a policy over the task's answer space. A sampled action is written as the answer text
(``<answer>90</answer>``, ``<answer>2,1,4,3</answer>``, ...) and scored by the official reward functions
of :mod:`icml_agents.ssl4rl.rewards`, so the RL signal is exactly the verifiable reward, never the label.
Jigsaw and patch answers are factorized over positions (one categorical per position, the positions act
as the "tokens" of GRPO's token aggregation). Two-image tasks (rotation with its reference, position,
contrastive) encode both images with the shared encoder and read ``[f1, f2, |f1 - f2|, f1 * f2]``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from icml_agents.rl.grpo import GRPOConfig, compute_advantages, grpo_loss
from icml_agents.ssl4rl import rewards as R
from icml_agents.ssl4rl.tasks import CONTRASTIVE, QUADRANTS, SSLExample, build_examples, rotation_angles
from icml_agents.validation import check_choice, check_int, check_real


@dataclass
class TaskSpec:
    """A task's pool of examples as tensors: ``images`` ``(N, V, C, S, S)``, ``labels`` ``(N, P)`` and the
    ground-truth ``answers`` strings; ``n_classes`` per position."""

    name: str
    images: torch.Tensor
    labels: torch.Tensor
    answers: list
    n_classes: int
    options: dict

    @property
    def n_positions(self) -> int:
        return self.labels.shape[1]

    def answer_text(self, actions: np.ndarray) -> list[str]:
        """Sampled actions ``(n, P)`` as completions ``<answer>...</answer>``."""
        if self.name == "rotation":
            angles = rotation_angles(self.options.get("granularity", 90))
            body = [str(angles[a[0]]) for a in actions]
        elif self.name == "digit":
            body = [str(a[0]) for a in actions]
        elif self.name == "position":
            body = [QUADRANTS[a[0]] for a in actions]
        elif self.name == "contrastive":
            body = [CONTRASTIVE[a[0]] for a in actions]
        elif self.name == "jigsaw":
            body = [",".join(str(i + 1) for i in a) for a in actions]
        else:  # patch
            body = [",".join(str(i) for i in a) for a in actions]
        return [f"<answer>{b}</answer>" for b in body]

    def reward(self, completions: list[str], answers: list[str]) -> list[float]:
        """The official reward of the task (patch: our design), TRL signature."""
        if self.name == "jigsaw":
            return R.jigsaw_reward(completions, answers)
        if self.name == "patch":
            return R.patch_reward(completions, answers, levels=self.options.get("levels", R.PATCH_LEVELS))
        return R.answer_match_reward(completions, answers)


def make_task(name: str, images, seed: int = 0, n_per_image: int = 1, **options) -> TaskSpec:
    """Build a task pool from images with :func:`icml_agents.ssl4rl.tasks.build_examples`."""
    examples: list[SSLExample] = build_examples(images, name, n_per_image=n_per_image, seed=seed, **options)
    stacked = np.stack([np.stack(ex.images) for ex in examples])  # (N, V, S, S, C)
    imgs = torch.from_numpy(stacked).permute(0, 1, 4, 2, 3).contiguous()  # (N, V, C, S, S)
    labels = torch.tensor([ex.label for ex in examples], dtype=torch.long)  # (N, P)
    if name == "rotation":
        n_classes = len(rotation_angles(options.get("granularity", 90)))
    elif name in ("position", "contrastive"):
        n_classes = 4 if name == "position" else 2
    elif name == "jigsaw":
        n_classes = options.get("grid", 2) ** 2
    else:
        n_classes = options.get("levels", R.PATCH_LEVELS)
    return TaskSpec(name, imgs, labels, [ex.answer for ex in examples], n_classes, options)


def digit_task(images: torch.Tensor, labels) -> TaskSpec:
    """The positive control's task: the digit label of each image, a 10-way answer (``"0"`` .. ``"9"``).

    ``images`` ``(N, C, S, S)`` (the probe's input format), ``labels`` ``(N,)`` integers in 0..9. Trained with
    :func:`supervised_train` like the pretext references; its ``answer_text`` and ``reward`` (exact match)
    let :func:`task_reward` report the head's accuracy.
    """
    if not isinstance(images, torch.Tensor) or images.ndim != 4:
        raise TypeError(f"images must be a 4-d tensor (N, C, S, S), got {type(images).__name__}")
    y = torch.as_tensor(np.asarray(labels), dtype=torch.long)
    if y.shape != (images.shape[0],) or y.numel() == 0 or y.min() < 0 or y.max() > 9:
        raise ValueError(f"labels must be {images.shape[0]} integers in 0..9, one per image")
    return TaskSpec("digit", images.unsqueeze(1), y.unsqueeze(1), [str(int(v)) for v in y], 10, {})


def conv_layers(in_channels: int, width: int) -> list[nn.Module]:
    """Three 3x3 convolutions with ReLU: ``width`` channels, then 2 and 4 x ``width`` with stride 2."""
    return [
        nn.Conv2d(in_channels, width, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(width, 2 * width, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(2 * width, 4 * width, 3, stride=2, padding=1),
        nn.ReLU(),
    ]


class Encoder(nn.Module):
    """Three 3x3 convolutions (``width``, 2, 4 x ``width`` channels, the last two with stride 2), then either
    global average pooling (``head="avg"``, features ``4 * width``) or flatten and a linear layer with ReLU
    (``head="fc"``, features ``feature_dim``). Input ``(N, C, S, S)``."""

    def __init__(
        self, in_channels: int = 1, width: int = 16, head: str = "avg", size: int = 16, feature_dim: int = 128
    ):
        super().__init__()
        check_choice(head, "head", ("avg", "fc"))
        self.convs = nn.Sequential(*conv_layers(in_channels, width))
        side = (size + 3) // 4
        if head == "avg":
            self.head, self.dim = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten()), 4 * width
        else:
            self.head = nn.Sequential(
                nn.Flatten(), nn.Linear(4 * width * side * side, feature_dim), nn.ReLU()
            )
            self.dim = feature_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (N, C, S, S) -> (N, dim)
        return self.head(self.convs(x))

    def feature_map(self, x: torch.Tensor) -> torch.Tensor:  # (N, C, S, S) -> (N, 4 * width * side^2)
        return self.convs(x).flatten(1)


class SSLPolicy(nn.Module):
    """A shared :class:`Encoder` with one categorical head per task: ``forward(task, images)`` gives logits
    ``(N, P, K)`` for images ``(N, V, C, S, S)``."""

    def __init__(
        self,
        tasks: dict,
        in_channels: int = 1,
        width: int = 16,
        hidden: int = 64,
        head: str = "avg",
        size: int = 16,
    ):
        super().__init__()
        self.encoder = Encoder(in_channels, width, head=head, size=size)
        d = self.encoder.dim
        self.shapes = {name: (t.n_positions, t.n_classes) for name, t in tasks.items()}
        self.views = {name: t.images.shape[1] for name, t in tasks.items()}
        self.heads = nn.ModuleDict(
            {
                name: nn.Sequential(
                    nn.Linear(4 * d if self.views[name] == 2 else d, hidden),
                    nn.ReLU(),
                    nn.Linear(hidden, p * k),
                )
                for name, (p, k) in self.shapes.items()
            }
        )

    def forward(self, task: str, images: torch.Tensor) -> torch.Tensor:
        n, v = images.shape[:2]
        feats = self.encoder(images.flatten(0, 1)).view(n, v, -1)  # (N, V, d)
        if v == 2:
            a, b = feats[:, 0], feats[:, 1]
            x = torch.cat([a, b, (a - b).abs(), a * b], dim=1)  # (N, 4d)
        else:
            x = feats[:, 0]
        p, k = self.shapes[task]
        return self.heads[task](x).view(n, p, k)


SCHEDULES = ("constant", "linear")


def _optimizer(policy: nn.Module, lr: float, steps: int, schedule: str):
    """Adam with a constant learning rate or a linear decay to 0 over ``steps`` (TRL's default schedule)."""
    check_choice(schedule, "schedule", SCHEDULES)
    check_real(lr, "lr", "(0, inf)")
    opt = torch.optim.Adam(policy.parameters(), lr=lr)
    decay = (lambda s: 1.0 - s / steps) if schedule == "linear" else (lambda s: 1.0)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, decay)


def grpo_train(
    policy: SSLPolicy,
    tasks: dict,
    steps: int,
    seed: int = 0,
    batch: int = 32,
    lr: float = 3e-3,
    config: GRPOConfig | None = None,
    combine: bool = False,
    log_every: int = 10,
    schedule: str = "constant",
    progress: bool = True,
) -> dict:
    """GRPO on the SSL rewards; ``combine=True`` samples one joint answer per image for all tasks (the pools
    must be aligned on the same images) and uses the average of the task rewards as the reward.
    ``schedule="linear"`` decays the learning rate linearly to 0 over ``steps``.

    Returns the curve ``{"step": [...], "reward": {task: [...]}, "frac_zero_std": [...], "entropy": [...]}``:
    mean rewards over the sampled completions (chance level at step 0), the fraction of groups whose
    rewards all tie (no gradient) and the policy's mean entropy per answer position (nats).
    """
    cfg = config or GRPOConfig(num_generations=8, beta=0.01)
    g = cfg.num_generations
    gen = torch.Generator().manual_seed(seed)
    ref = copy.deepcopy(policy).eval().requires_grad_(False)
    opt, sched = _optimizer(policy, lr, steps, schedule)
    names = list(tasks)
    n_pool = min(len(t.answers) for t in tasks.values())
    curve: dict[str, Any] = {"step": [], "reward": {n: [] for n in names}, "frac_zero_std": [], "entropy": []}
    for step in tqdm(range(steps), desc="GRPO", disable=not progress, leave=False):
        active = names if combine else [names[step % len(names)]]
        idx = torch.randint(n_pool, (batch,), generator=gen)
        sampled, rewards, logits, entropy = {}, {}, {}, []
        for name in active:
            t = tasks[name]
            logits[name] = policy(name, t.images[idx])  # (B, P, K), with grad: reused by the first pass
            probs = torch.softmax(logits[name].detach(), -1)
            entropy.append(float(-(probs * probs.clamp_min(1e-30).log()).sum(-1).mean()))
            flat = probs.repeat_interleave(g, 0).flatten(0, 1)  # (B*G*P, K)
            act = torch.multinomial(flat, 1, generator=gen).view(batch * g, -1)  # (B*G, P)
            completions = t.answer_text(act.numpy())
            truth = [t.answers[i] for i in idx.tolist() for _ in range(g)]
            sampled[name] = act
            rewards[name] = torch.tensor(t.reward(completions, truth), dtype=torch.float64)
        r = torch.stack(list(rewards.values())).mean(0)  # (B*G,) the reward, averaged over tasks if combined
        adv, frac = compute_advantages(r, g, scale=cfg.scale_rewards, eps=cfg.std_eps)
        ref_logp = None
        if cfg.beta > 0:
            with torch.no_grad():
                ref_logp = torch.cat(
                    [
                        torch.log_softmax(ref(n, tasks[n].images[idx]), -1)
                        .repeat_interleave(g, 0)
                        .gather(2, sampled[n].unsqueeze(2))
                        .squeeze(2)
                        for n in active
                    ],
                    1,
                )  # (B*G, T)
        old = None
        for it in range(cfg.num_iterations):
            logps = []
            for name in active:
                lg = logits[name] if it == 0 else policy(name, tasks[name].images[idx])  # (B, P, K)
                logp = torch.log_softmax(lg, -1).repeat_interleave(g, 0)  # (B*G, P, K)
                logps.append(logp.gather(2, sampled[name].unsqueeze(2)).squeeze(2))  # (B*G, P)
            logp = torch.cat(logps, 1)  # (B*G, T) all answer positions of the active tasks
            old = logp.detach() if old is None else old
            loss, _ = grpo_loss(
                logp,
                old,
                adv.float(),
                ref_logp=ref_logp,
                epsilon=cfg.epsilon,
                epsilon_high=cfg.epsilon_high,
                beta=cfg.beta,
                loss_type=cfg.loss_type,
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
        sched.step()
        if step % log_every == 0 or step == steps - 1:
            curve["step"].append(step)
            curve["frac_zero_std"].append(frac)
            curve["entropy"].append(float(np.mean(entropy)))
            for name in names:
                vals = curve["reward"][name]
                vals.append(
                    float(rewards[name].mean()) if name in rewards else (vals[-1] if vals else float("nan"))
                )
    return curve


def supervised_train(
    policy: SSLPolicy,
    tasks: dict,
    steps: int,
    seed: int = 0,
    batch: int = 32,
    lr: float = 3e-3,
    schedule: str = "constant",
    progress: bool = True,
) -> None:
    """The classical SSL reference: cross-entropy on the pretext labels, tasks in turn, same steps, batch
    and learning-rate schedule."""
    gen = torch.Generator().manual_seed(seed)
    opt, sched = _optimizer(policy, lr, steps, schedule)
    names = list(tasks)
    for step in tqdm(range(steps), desc="supervised", disable=not progress, leave=False):
        t = tasks[names[step % len(names)]]
        idx = torch.randint(len(t.answers), (batch,), generator=gen)
        logits = policy(t.name, t.images[idx])  # (B, P, K)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), t.labels[idx].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()


@torch.no_grad()
def task_reward(policy: SSLPolicy, task: TaskSpec, greedy: bool = True) -> float:
    """Mean reward of the policy's greedy (or sampled) answers over the task's pool."""
    logits = policy(task.name, task.images)
    act = logits.argmax(-1) if greedy else torch.distributions.Categorical(logits=logits).sample()
    return float(np.mean(task.reward(task.answer_text(act.numpy()), task.answers)))


PROBE_LAYERS = ("pooled", "gap")
PROBE_C_GRID = tuple(float(c) for c in np.logspace(-3, 2, 11))  # L2 strengths tried by cross-validation


@torch.no_grad()
def features(encoder: Encoder, images: torch.Tensor, layer: str = "pooled") -> np.ndarray:
    """Frozen-encoder features of images ``(N, C, S, S)``.

    ``layer="pooled"`` (the probe's default): the last convolution block's map average-pooled to 2 x 2,
    ``(N, 4 * 4 * width)``, the usual way to probe an intermediate layer of a small CNN (it keeps coarse
    layout); ``layer="gap"``: the encoder's output ``(N, dim)``, global average pooling for ``head="avg"``.
    """
    check_choice(layer, "layer", PROBE_LAYERS)
    encoder = encoder.eval()
    if layer == "gap":
        return encoder(images).numpy().astype(np.float64)
    fmap = encoder.convs(images)  # (N, 4 * width, side, side)
    return nn.functional.adaptive_avg_pool2d(fmap, 2).flatten(1).numpy().astype(np.float64)


def linear_probe(
    train_x, train_y, test_x, test_y, c_grid=PROBE_C_GRID, folds: int = 5
) -> tuple[float, float]:
    """Test accuracy of a standardized L2 logistic-regression probe and the ``C`` it used.

    ``C`` is chosen from ``c_grid`` by stratified ``folds``-fold cross-validation on the *training* examples
    only (the scaler is refit inside each fold; ties go to the smaller ``C``), then the probe is refit on all
    training examples and scored once on the test set. A one-element grid skips the cross-validation.
    """
    from sklearn.linear_model import LogisticRegression  # lazy: dev / repro only
    from sklearn.model_selection import StratifiedKFold, cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    c_grid = tuple(sorted(float(c) for c in c_grid))  # ascending, so that argmax breaks ties to the smaller C
    if not c_grid or min(c_grid) <= 0:
        raise ValueError(f"c_grid must be a non-empty sequence of positive numbers, got {c_grid!r}")
    check_int(folds, "folds", 2)

    def make(c):
        return make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=5000))

    best = c_grid[0]
    if len(c_grid) > 1:
        cv = StratifiedKFold(folds, shuffle=True, random_state=0)
        scores = [cross_val_score(make(c), train_x, train_y, cv=cv).mean() for c in c_grid]
        best = c_grid[int(np.argmax(scores))]  # argmax takes the first, i.e. the smallest C, of ties
    probe = make(best).fit(train_x, train_y)
    return float(probe.score(test_x, test_y)), best
