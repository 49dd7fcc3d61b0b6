"""The frozen base, the three DLMR training stages and the evaluation of ``dlmr-chains`` (our design).

The base is a tiny Mistral trained here from scratch on the chain testbed. It is deployed with a sliding
attention window (``Sizes.window`` cache slots), as a model with a bounded key-value cache would be; half of
its training batches use the window and half full attention, so that the same weights also work without the
window (the headroom check's "context can fix it" arm). A quarter of its training steps carry a restated
fact (``instruction value``, the cited one or a random one) between the instruction and the tag, so that the
base is used to reading inserted content at the step boundary, as a real LM is used to reading notes.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import MistralConfig, MistralForCausalLM

from icml_agents.dlmr import (
    MemorySession,
    ReasoningMemory,
    Router,
    VisualMemory,
    distillation_loss,
    freeze,
    token_cost_reward,
)
from icml_agents.rl import compute_advantages, grpo_loss
from icml_agents_experiments.dlmr.tasks import (
    BOS,
    CELLS,
    IMAGE_LEN,
    MAX_STEPS,
    PAD,
    VOCAB_SIZE,
    Chain,
    make_chain,
    tag,
    tag_positions,
)


@dataclass(frozen=True)
class Sizes:
    """Model, memory and schedule sizes (``quick`` and ``full`` in the reproduction)."""

    hidden: int = 64
    layers: int = 2
    heads: int = 4
    window: int = 16  # the deployed base's attention window (cache slots)
    base_steps: int = 1500
    batch: int = 64
    lr: float = 3e-3
    p_note: float = 0.25
    memory_sizes: tuple[int, ...] = (2, 4)
    former_width: int = 64
    former_layers: int = 2
    slots: int = 12
    layer: int = 0  # hidden states the formers read (0: input embeddings)
    router_layer: int = -1  # hidden states the router reads
    visual_steps: int = 600
    reasoning_steps: int = 600
    router_steps: int = 150
    memory_lr: float = 3e-3
    router_lr: float = 1e-3
    group: int = 8  # GRPO generations per question
    token_cost: float = 0.02
    train_lengths: tuple[int, ...] = field(default_factory=lambda: tuple(range(2, MAX_STEPS + 1)))


def build_base(sizes: Sizes, seed: int) -> MistralForCausalLM:
    torch.manual_seed(seed)
    config = MistralConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=sizes.hidden,
        intermediate_size=2 * sizes.hidden,
        num_hidden_layers=sizes.layers,
        num_attention_heads=sizes.heads,
        num_key_value_heads=sizes.heads,
        max_position_embeddings=512,
        sliding_window=sizes.window,
        attn_implementation="eager",
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=None,
    )
    return MistralForCausalLM(config)


@contextlib.contextmanager
def window(model, size: int | None):
    """Run ``model`` with attention window ``size`` (None: full attention) inside the block."""
    old = model.config.sliding_window
    model.config.sliding_window = size
    try:
        yield model
    finally:
        model.config.sliding_window = old


def base_sequence(chain: Chain, rng: np.random.Generator, p_note: float) -> tuple[list[int], list[int]]:
    """Pretraining ids and labels (the result tokens only), with restated facts at some boundaries."""
    ids = chain.image()
    labels = [-100] * len(ids)
    facts = chain.facts()
    for t in range(1, chain.length + 1):
        a, r, f = chain.step(t)
        ids.append(a)
        labels.append(-100)
        if rng.random() < p_note:
            known = facts[: CELLS + t - 1]
            if rng.random() < 0.5:
                note = next(x for x in known if x[0] == a)
            else:
                note = known[int(rng.integers(len(known)))]
            ids += list(note)
            labels += [-100, -100]
        ids += [r, f]
        labels += [-100, f]
    return ids, labels


def pretrain_base(sizes: Sizes, seed: int, log=None) -> MistralForCausalLM:
    """Train the base from scratch (alternating windowed and full-attention batches) and freeze it."""
    model = build_base(sizes, seed)
    rng = np.random.default_rng(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=sizes.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, sizes.lr, total_steps=sizes.base_steps, pct_start=0.1)
    model.train()
    for it in range(sizes.base_steps):
        seqs = [
            base_sequence(make_chain(int(rng.integers(1, MAX_STEPS + 1)), rng), rng, sizes.p_note)
            for _ in range(sizes.batch)
        ]
        width = max(len(s) for s, _ in seqs)
        ids = torch.full((len(seqs), width), PAD)
        labels = torch.full((len(seqs), width), -100)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, (s, lab) in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s)
            labels[i, : len(lab)] = torch.tensor(lab)
            mask[i, : len(s)] = 1
        with window(model, sizes.window if it % 2 == 0 else None):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if log is not None and (it % 500 == 0 or it == sizes.base_steps - 1):
            log(f"base step {it}: loss {loss.item():.3f}")
    return freeze(model)


def build_memories(base, sizes: Sizes, seed: int) -> tuple[VisualMemory, ReasoningMemory, Router]:
    torch.manual_seed(seed + 7)
    emb = base.get_input_embeddings().weight
    former = {
        "width": sizes.former_width,
        "layers": sizes.former_layers,
        "heads": 4,
        "target_norm": float(emb.detach().norm(dim=1).mean()),
    }
    top = max(sizes.memory_sizes)
    visual = VisualMemory(sizes.hidden, sizes.hidden, top, **former)
    reasoning = ReasoningMemory(sizes.hidden, sizes.hidden, top, slots=sizes.slots, **former)
    router = Router(sizes.hidden, sizes.memory_sizes, width=sizes.former_width)
    return visual, reasoning, router


def batch_tensors(chains: list[Chain]):
    image = torch.tensor([c.image() for c in chains])
    image_mask = torch.zeros_like(image, dtype=torch.bool)
    image_mask[:, 1:IMAGE_LEN] = True
    return image, image_mask


@dataclass
class Rollout:
    """Per row and step: ``correct`` (B, L) booleans, ``tokens`` inserted (B, L), the router's action
    ``index`` (B, L) (-1 when forced without one), the ``modes`` and the boundary ``states`` (B, L, H), and
    the result-position ``logits`` (B, L, V)."""

    correct: torch.Tensor
    tokens: torch.Tensor
    index: torch.Tensor
    modes: list[list[str]]
    states: torch.Tensor
    logits: torch.Tensor


def rollout(
    base,
    chains: list[Chain],
    *,
    visual=None,
    reasoning=None,
    router=None,
    action=None,
    teacher_forcing: bool = False,
    greedy: bool = True,
    generator=None,
    layer: int = 0,
    router_layer: int = -1,
) -> Rollout:
    """Run a batch of equal-length chains through a :class:`MemorySession`: per step, feed the instruction,
    insert memories (``action`` forced, or the router's; ``action="base"`` skips the boundary altogether), feed
    the tag and read the result token (argmax over the vocabulary). The model's own result is fed back, or the
    gold one with ``teacher_forcing``."""
    length = chains[0].length
    if any(c.length != length for c in chains):
        raise ValueError("chains must have equal lengths")
    session = MemorySession(base, visual, reasoning, router, layer=layer, router_layer=router_layer)
    image, image_mask = batch_tensors(chains)
    session.start(image, image_mask)
    gold = torch.tensor([[c.step(t)[2] for t in range(1, length + 1)] for c in chains])
    operands = torch.tensor([list(c.operands) for c in chains])
    rows = len(chains)
    correct, tokens, index, modes, states, logits = [], [], [], [], [], []
    previous = None
    for t in range(1, length + 1):
        step_ids = operands[:, t - 1 : t]
        session.feed(step_ids if previous is None else torch.cat([previous[:, None], step_ids], dim=1))
        if action == "base":
            tokens.append(torch.zeros(rows, dtype=torch.long))
            index.append(torch.full((rows,), -1))
            modes.append(["none"] * rows)
            states.append(session.router_state)
        else:
            b = session.boundary(action, greedy=greedy, generator=generator)
            tokens.append(b.tokens)
            index.append(b.index if b.index is not None else torch.full((rows,), -1))
            modes.append(b.modes)
            states.append(b.state)
        out = session.feed(torch.full((rows, 1), tag(t)))
        logits.append(out)
        pred = out.argmax(dim=-1)
        correct.append(pred == gold[:, t - 1])
        previous = gold[:, t - 1] if teacher_forcing else pred
    return Rollout(
        torch.stack(correct, 1),
        torch.stack(tokens, 1),
        torch.stack(index, 1),
        [list(x) for x in zip(*modes, strict=True)],
        torch.stack(states, 1),
        torch.stack(logits, 1),
    )


def teacher_logits(base, chains: list[Chain]) -> torch.Tensor:
    """The full-attention base's logits at the tags of the gold sequences ``(B, L, V)`` (the teacher of both
    memory stages: it sees the image and the whole history)."""
    ids = torch.tensor([c.ids() for c in chains])
    with torch.no_grad(), window(base, None):
        out = base(input_ids=ids).logits
    return out[:, tag_positions(chains[0].length)]


def parallel_logits(
    base, chains: list[Chain], mode: str, size: int, visual=None, reasoning=None
) -> torch.Tensor:
    """Teacher-forced logits at the tags ``(B, L, V)`` with ``mode`` memories of ``size`` tokens inserted at
    every boundary, in one forward of the base. The formers read layer 0 (the input embeddings), so that
    their inputs do not depend on earlier insertions and every memory can be built before the forward; this
    equals :func:`rollout` with ``teacher_forcing`` and ``layer=0`` (a test checks it), only faster."""
    embed = base.get_input_embeddings()
    length = chains[0].length
    image = embed(torch.tensor([c.image() for c in chains]))  # (B, IMAGE_LEN, D)
    steps = embed(torch.tensor([[i for t in range(1, length + 1) for i in c.step(t)] for c in chains]))
    steps = steps.reshape(len(chains), length, 3, -1)  # instruction, tag, result
    slots = None if reasoning is None else reasoning.init_state(len(chains))
    parts = [image]
    for t in range(length):
        state = steps[:, t, 0]
        memory = []
        if reasoning is not None:
            segment = steps[:, t, :1] if t == 0 else torch.cat([steps[:, t - 1, 1:], steps[:, t, :1]], dim=1)
            slots = reasoning.write(slots, segment)
        if mode in ("visual", "both"):
            memory.append(visual(image[:, 1:], state, n_tokens=size))
        if mode in ("reasoning", "both"):
            memory.append(reasoning(slots, state, n_tokens=size))
        parts += [steps[:, t, :1], *memory, steps[:, t, 1:]]
    logits = base(inputs_embeds=torch.cat(parts, dim=1)).logits
    tags = np.cumsum(
        [IMAGE_LEN] + [3 + (size * (2 if mode == "both" else 1) if mode != "none" else 0)] * length
    )
    return logits[:, [int(x) - 2 for x in tags[1:]]]


def train_memory(base, memory, kind: str, sizes: Sizes, seed: int, log=None, partner=None) -> None:
    """Stage 1 (``kind="visual"``) or 2 (``"reasoning"``): the memory inserted at every boundary, a size drawn
    per batch, gold results fed back; loss = KL to the full-attention teacher + answer cross-entropy. Stage 1
    trains on image questions (every step reads a cell); stage 2 on chains where a step after the second
    cites an earlier result with probability 0.8, and with a (frozen) visual
    ``partner`` half of its batches insert both memories, so that the reasoning memory learns to work beside
    the visual one."""
    rng = np.random.default_rng(seed + (11 if kind == "visual" else 13))
    steps = sizes.visual_steps if kind == "visual" else sizes.reasoning_steps
    opt = torch.optim.AdamW(memory.parameters(), lr=sizes.memory_lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, sizes.memory_lr, total_steps=steps, pct_start=0.1)
    memory.train()
    p_reasoning = 0.0 if kind == "visual" else 0.8
    for it in range(steps):
        length = int(rng.choice(sizes.train_lengths))
        chains = [make_chain(length, rng, p_reasoning=p_reasoning) for _ in range(sizes.batch)]
        size = int(rng.choice(sizes.memory_sizes))
        mode = "both" if partner is not None and rng.random() < 0.5 else kind
        if kind == "visual":
            logits = parallel_logits(base, chains, mode, size, visual=memory)
        else:
            logits = parallel_logits(base, chains, mode, size, visual=partner, reasoning=memory)
        teacher = teacher_logits(base, chains)
        gold = torch.tensor([[c.step(t)[2] for t in range(1, length + 1)] for c in chains])
        v = logits.shape[-1]
        loss = distillation_loss(logits.reshape(-1, v), teacher.reshape(-1, v), gold.reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(memory.parameters(), 1.0)
        opt.step()
        sched.step()
        if log is not None and (it % 100 == 0 or it == steps - 1):
            accuracy = (logits.argmax(-1) == gold).float().mean()
            log(f"{kind} step {it}: loss {loss.item():.3f}, step accuracy {accuracy:.3f} (length {length})")
    memory.eval()


def train_router(base, visual, reasoning, router, sizes: Sizes, seed: int, log=None) -> None:
    """Stage 3: formers frozen; GRPO over the actions at each boundary, ``group`` samples per (question,
    step), reward = correct - token_cost * inserted tokens, gold results fed back."""
    rng = np.random.default_rng(seed + 17)
    gen = torch.Generator().manual_seed(seed + 17)
    opt = torch.optim.AdamW(router.parameters(), lr=sizes.router_lr, weight_decay=0.0)
    for p in [*visual.parameters(), *reasoning.parameters()]:
        p.requires_grad_(False)
    g = sizes.group
    for it in range(sizes.router_steps):
        length = int(rng.choice(sizes.train_lengths))
        chains = [make_chain(length, rng) for _ in range(sizes.batch // g)]
        chains = [c for c in chains for _ in range(g)]  # the group's copies are consecutive
        with torch.no_grad():
            r = rollout(
                base,
                chains,
                visual=visual,
                reasoning=reasoning,
                router=router,
                teacher_forcing=True,
                greedy=False,
                generator=gen,
                layer=sizes.layer,
                router_layer=sizes.router_layer,
            )
        reward = token_cost_reward(r.correct.float(), r.tokens, sizes.token_cost)  # (B, L)
        # groups: the g copies of one question at one step
        grouped = reward.reshape(-1, g, length).transpose(1, 2).reshape(-1)
        adv, zero = compute_advantages(grouped, g)
        adv = adv.reshape(-1, length, g).transpose(1, 2).reshape(-1).float()
        logp_all = torch.log_softmax(router(r.states.reshape(-1, r.states.shape[-1])), dim=-1)
        logp = logp_all.gather(1, r.index.reshape(-1, 1))
        loss, _ = grpo_loss(logp, logp.detach(), adv, loss_type="grpo")
        opt.zero_grad()
        loss.backward()
        opt.step()
        if log is not None and (it % 50 == 0 or it == sizes.router_steps - 1):
            log(
                f"router step {it}: reward {reward.mean():.3f}, step accuracy {r.correct.float().mean():.3f}, "
                f"tokens {r.tokens.float().mean():.2f}, zero-std groups {zero:.2f}"
            )
    router.eval()
