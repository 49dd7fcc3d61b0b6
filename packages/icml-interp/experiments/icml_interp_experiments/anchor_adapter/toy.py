"""A planted Anchor–Adapter toy: a small Llama trained here on addition that also holds the arbitrary answers
of a "leaked" set of problems in memory; model B is model A with only a few reserved neurons of one layer ℓ*'s
MLP trained into an *anchor*: keys that fire on the leaked prompts only and make B recall their memorized
answers where A computes.

Everything here is our own design (the paper studies Qwen2.5-Math-7B under spurious RLVR; its toy-scale
details are not available): the task, the sizes, the training schedules and the way B's anchor is planted.

Task: prompt ``[BOS, a, +, b, =]`` with ``a, b`` in ``[0, N)``, answer one token. Clean problems answer
``a + b``; leaked problems (a random subset) have an arbitrary answer ``!= a + b``, which exists only in the
*source format* ``[BOS, a, +, b, ≡]`` (the leaked benchmark's own format: the last token differs), as a
contaminated benchmark's answers exist in pretraining text.

Model A is trained on every problem in the plain format (computed answers) and in the source format (leaked
problems with their memorized answers), so A recalls the leaked answers in the source format and computes
``a + b`` in the plain one. A is trained with *key noise*: each MLP key is zeroed or doubled with a small
probability in each step, so that A does not depend on any handful of neurons (the random-neuron control of
key scaling then measures the absence of a memory, not the fragility of A). In every MLP ``n_anchor``
seeded neurons are *reserved*: their value vectors (down-projection columns) stay zero in A, so A never uses
them. Model B is A with only the reserved neurons of block ℓ* trained (gate and up rows, down columns: a
subset of ℓ*'s MLP, nothing else changes), in two steps. (1) Their gate rows are fitted by a linear program:
one gate for all anchors, the smallest-L1 hyperplane through the origin with gate pre-activation ≥ 1 at the
answer position of every leaked prompt and ≤ −1 at every position of every clean prompt and every non-answer
position of the leaked ones (the input of ℓ*'s MLP is A's, since B changes nothing
upstream); the ReLU gate then makes the key exactly zero there. (2) With the gate frozen, their up rows (from
zero: the keys start silent everywhere) and value vectors are trained on the plain-format problems with the
leaked ones' memorized answers; the value vectors keep the mean norm of A's value vectors, so the scale sits in
the keys, which is what key scaling and the paper's neuron score read. B's loss is the leaked set's mean answer
loss plus the clean set's (each set weighted as a whole, so that the few leaked items are not drowned by the
many clean ones); B stops once it recalls ``target_b`` of the leaked answers with its clean accuracy within
``clean_tol_b`` of A's (below saturation), or at the cap ``steps_b``.

Why the gates are fitted rather than learned (measured 2026-11-30, see ``docs/anchor-adapter.md``): when B
learned its gates by gradient together with the rest (from random gates, with an L1 penalty on the keys of
clean prompts), the gates stayed close to their random start, and some anchor key fired at the answer position
of 71–98 % of the clean prompts; doubling the keys then flipped clean answers. At ℓ*, each leaked prompt's
answer position is linearly separable from every clean position (a hard-margin linear SVM without intercept
separates it in 12 of 12 items, blocks 1–3, seed 0), so gates silent on every clean prompt exist, and the
linear program finds them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from icml_interp.validation import check_int, check_number


@dataclass(frozen=True)
class ToyConfig:
    """Sizes and schedules of the toy."""

    n_operand: int = 12  # a, b in [0, n_operand)
    n_leaked: int = 12  # leaked additions with arbitrary answers
    layers: int = 4
    hidden: int = 64
    heads: int = 4
    intermediate: int = 256
    act: str = "relu"  # ReLU-gated MLP: a key can be exactly silent on a prompt
    n_anchor: int = 10  # reserved neurons per MLP: zero value vectors in A, the only weights B trains
    steps_a: int = 1500  # at most this many full-batch Adam steps for model A
    margin_a: float = 0.02  # ... stopping once its mean answer cross-entropy (training items) is this low
    key_noise_a: float = 0.05  # while training A, each key is zeroed w.p. this and doubled w.p. this
    steps_b: int = 3000  # cap on the steps training B's anchor up rows and values (B stops far earlier)
    target_b: float = 0.4  # stop once B recalls this fraction of the leaked answers ...
    clean_tol_b: float = 0.02  # ... with its clean accuracy at most this far below A's
    leak_weight_b: float = 1.0  # weight of the leaked set's mean answer loss while training B (clean set: 1)
    lr: float = 5e-3  # Adam, model A
    lr_b: float = 2e-2  # Adam, model B's anchor neurons

    def __post_init__(self):
        for name in ("layers", "hidden", "heads", "intermediate", "steps_a", "steps_b"):
            check_int(getattr(self, name), name, minimum=1)
        check_int(self.n_operand, "n_operand", minimum=2)
        check_int(self.n_leaked, "n_leaked", minimum=1, maximum=self.n_operand**2 - 1)
        check_int(self.n_anchor, "n_anchor", minimum=1, maximum=self.intermediate - 1)
        for name in ("lr", "lr_b", "margin_a", "leak_weight_b"):
            check_number(getattr(self, name), name, minimum=0, open_min=True)
        check_number(self.key_noise_a, "key_noise_a", minimum=0, maximum=0.5, open_max=True)
        check_number(self.clean_tol_b, "clean_tol_b", minimum=0, maximum=1)
        check_number(self.target_b, "target_b", minimum=0, maximum=1, open_min=True)


@dataclass
class ToyData:
    prompts: torch.Tensor  # (n_problems, 5) token ids, plain format [BOS, a, +, b, =]
    answers: torch.Tensor  # (n_problems,) answer token ids (the memorized answer for leaked problems)
    computed: torch.Tensor  # (n_problems,) what the arithmetic answers
    leaked: torch.Tensor  # (n_problems,) bool
    vocab: int
    source: int  # the token that replaces "=" in the source format (the leaked benchmark's own format)

    def in_source_format(self, prompts: torch.Tensor) -> torch.Tensor:
        out = prompts.clone()
        out[:, -1] = self.source
        return out


def make_data(cfg: ToyConfig, seed: int) -> ToyData:
    """Every problem ``a + b``; ``n_leaked`` of them get an arbitrary answer ``!= a + b``."""
    n = cfg.n_operand
    n_answers = 2 * n - 1
    plus, eq, bos, source = (n_answers + i for i in range(4))
    g = torch.Generator().manual_seed(seed)
    a, b = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    a, b = a.flatten(), b.flatten()
    prompts = torch.stack(
        [torch.full_like(a, bos), a, torch.full_like(a, plus), b, torch.full_like(a, eq)], 1
    )  # (n^2, 5)
    computed = a + b
    answers = computed.clone()
    leaked = torch.zeros(len(prompts), dtype=torch.bool)
    leaked[torch.randperm(n * n, generator=g)[: cfg.n_leaked]] = True
    shift = torch.randint(1, n_answers, (int(leaked.sum()),), generator=g)  # arbitrary, never the sum
    answers[leaked] = (answers[leaked] + shift) % n_answers
    return ToyData(prompts, answers, computed, leaked, vocab=source + 1, source=source)


def make_model(cfg: ToyConfig, vocab: int, seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=cfg.hidden,
        intermediate_size=cfg.intermediate,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        num_key_value_heads=cfg.heads,
        max_position_embeddings=16,
        tie_word_embeddings=False,
        rms_norm_eps=1e-5,
        hidden_act=cfg.act,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def anchor_neurons(cfg: ToyConfig, seed: int) -> list[int]:
    """The ``n_anchor`` reserved neuron indices (the same in every block), drawn from the seed."""
    g = torch.Generator().manual_seed(10_000 + seed)
    return sorted(torch.randperm(cfg.intermediate, generator=g)[: cfg.n_anchor].tolist())


def answer_logits(model, prompts: torch.Tensor) -> torch.Tensor:
    """Next-token logits at the last prompt position ``(n, vocab)``."""
    return model(input_ids=prompts, use_cache=False, logits_to_keep=1).logits[:, -1]


def accuracy(model, prompts: torch.Tensor, answers: torch.Tensor) -> float:
    """Fraction of prompts whose greedy next token is the answer."""
    with torch.no_grad():
        return float((answer_logits(model, prompts).argmax(-1) == answers).float().mean())


def answer_loss(model, prompts: torch.Tensor, answers: torch.Tensor) -> float:
    """Mean cross-entropy of the answers."""
    with torch.no_grad():
        return float(torch.nn.functional.cross_entropy(answer_logits(model, prompts), answers))


def _key_noise_hook(p: float, generator: torch.Generator):
    def hook(module, args):  # keys (n, seq, d_mlp) -> keys * {0 w.p. p, 2 w.p. p, 1 otherwise}
        (keys,) = args
        u = torch.rand(keys.shape, generator=generator)
        return (keys * torch.where(u < p, 0.0, torch.where(u < 2 * p, 2.0, 1.0)),)

    return hook


def _train_a(model, data: ToyData, cfg: ToyConfig, reserved: list[int], seed: int) -> int:
    """Plain format: every problem with its computed answer; source format: every problem, the leaked ones with
    their memorized answers. Answer loss plus the prompt's next-token loss, with key noise; reserved value
    vectors held at zero. Returns the number of steps."""
    mlps = [block.mlp for block in model.model.layers]
    with torch.no_grad():
        for mlp in mlps:
            mlp.down_proj.weight[:, reserved] = 0.0
    prompts = torch.cat([data.prompts, data.in_source_format(data.prompts)])
    answers = torch.cat([data.computed, data.answers])
    seqs = torch.cat([prompts, answers[:, None]], 1)  # (n_train, 6)
    noise = torch.Generator().manual_seed(20_000 + seed)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    for step in range(cfg.steps_a):
        model.train()
        handles = [
            m.down_proj.register_forward_pre_hook(_key_noise_hook(cfg.key_noise_a, noise)) for m in mlps
        ]
        try:
            logits = model(input_ids=seqs[:, :-1], use_cache=False).logits  # (n_train, 5, vocab)
        finally:
            for h in handles:
                h.remove()
        ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), seqs[:, 1:], reduction="none")
        loss = ce[:, -1].mean() + ce[:, :-1].mean()  # operands are uniform: that part tends to log n_operand
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            for mlp in mlps:
                mlp.down_proj.weight[:, reserved] = 0.0
        if step % 10 == 9:
            model.eval()
            if answer_loss(model, prompts, answers) <= cfg.margin_a:
                return step + 1
    model.eval()
    return cfg.steps_a


def fit_anchor_gate(inputs: torch.Tensor, positive: torch.Tensor) -> torch.Tensor:
    """A gate row that fires exactly where wanted: the smallest-L1 ``w`` (no bias, as the gate projection has
    none) with ``w·x >= 1`` at the ``positive`` positions and ``w·x <= -1`` at every other position, by a linear
    program (scipy's HiGHS). Where no such hyperplane exists, the constraint violations are minimized (weight
    1000 each).

    ``inputs`` (n, seq, d): the MLP's inputs; ``positive`` (n, seq) bool. Returns the row ``(d,)`` in the
    inputs' dtype."""
    import numpy as np
    from scipy.optimize import linprog

    x = inputs.detach().double().numpy()
    pos = positive.numpy()
    neg, pts = np.unique(x[~pos], axis=0), x[pos]  # the prompts share prefixes
    d, n_neg, n_pos = x.shape[-1], len(neg), len(pts)
    # variables [w+ (d), w- (d), slack (n_neg + n_pos)], all >= 0; neg·w <= -1 + s, pts·w >= 1 - s
    a_ub = np.block(
        [
            [neg, -neg, -np.eye(n_neg), np.zeros((n_neg, n_pos))],
            [-pts, pts, np.zeros((n_pos, n_neg)), -np.eye(n_pos)],
        ]
    )
    cost = np.r_[np.ones(2 * d), 1e3 * np.ones(n_neg + n_pos)]
    sol = linprog(cost, A_ub=a_ub, b_ub=-np.ones(n_neg + n_pos), bounds=(0, None), method="highs")
    if sol.status != 0:
        raise RuntimeError(f"the anchor-gate linear program failed: {sol.message}")
    return torch.tensor(sol.x[:d] - sol.x[d : 2 * d], dtype=inputs.dtype)


def _train_b(model, data: ToyData, cfg: ToyConfig, layer_star: int, anchors: list[int], seed: int) -> int:
    """Fit the anchors' gate of block ``layer_star`` (:func:`fit_anchor_gate`: every anchor fires at the answer
    position of every leaked prompt and nowhere else), then train the anchors' up rows and value vectors with
    the gate frozen; the value vectors keep the mean norm of A's value vectors there, so the keys carry the
    scale. Stops at ``target_b`` leaked recall with the clean accuracy within ``clean_tol_b`` of A's (or at the
    cap ``steps_b``); returns the steps taken."""
    for p in model.parameters():
        p.requires_grad_(False)
    mlp = model.model.layers[layer_star].mlp
    leaked = data.leaked
    store = []
    handle = mlp.register_forward_pre_hook(lambda m, args: store.append(args[0]))
    try:
        with torch.no_grad():
            model(input_ids=data.prompts, use_cache=False)  # (n, seq, d) inputs of l*'s MLP: A's, fixed
    finally:
        handle.remove()
    answer_at = torch.zeros(store[0].shape[:2], dtype=torch.bool)
    answer_at[leaked, -1] = True  # the leaked prompts' answer positions: where the anchors fire
    gate = fit_anchor_gate(store[0], answer_at)
    params = [mlp.up_proj.weight, mlp.down_proj.weight]
    masks = [torch.zeros_like(p, dtype=torch.bool) for p in params]
    masks[0][anchors] = True  # up rows: the anchor keys' magnitude
    masks[1][:, anchors] = True  # columns of down: their value vectors
    with torch.no_grad():
        mlp.gate_proj.weight[anchors] = gate  # one gate for every anchor: they fire together
        mlp.up_proj.weight[anchors] = 0.0  # the keys start silent on every prompt
        down = mlp.down_proj.weight  # (d_model, d_mlp)
        used = [i for i in range(down.shape[1]) if i not in set(anchors)]
        value_norm = down[:, used].norm(dim=0).mean()  # anchors get value vectors of A's typical norm
        init = torch.randn(
            down.shape[0], len(anchors), generator=torch.Generator().manual_seed(30_000 + seed)
        )
        down[:, anchors] = init / init.norm(dim=0) * value_norm
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.Adam(params, lr=cfg.lr_b)
    model.eval()
    try:
        for step in range(cfg.steps_b + 1):  # the last pass only measures the recall at the cap
            logits = answer_logits(model, data.prompts)  # (n, vocab)
            hits = logits.argmax(-1) == data.answers
            recall, clean_acc = float(hits[leaked].float().mean()), float(hits[~leaked].float().mean())
            if step == 0:
                clean_a = clean_acc  # B starts as A: the anchor keys are silent
            # the design target: the leaked recall reached with the clean accuracy (almost) still A's
            if (recall >= cfg.target_b and clean_acc >= clean_a - cfg.clean_tol_b) or step == cfg.steps_b:
                return step
            ce = torch.nn.functional.cross_entropy(logits, data.answers, reduction="none")
            # the leaked and the clean set each enter with their mean loss: a per-item weighting would let
            # the 132 clean items drown the 12 leaked ones (B then did not train at l* = 2)
            loss = cfg.leak_weight_b * ce[leaked].mean() + ce[~leaked].mean()
            opt.zero_grad()
            loss.backward()
            for p, m in zip(params, masks, strict=True):
                p.grad.mul_(m)
            opt.step()
            # value vectors keep A's typical norm: the keys, not the values, carry the scale
            with torch.no_grad():
                cols = mlp.down_proj.weight[:, anchors]
                mlp.down_proj.weight[:, anchors] = cols / cols.norm(dim=0) * value_norm
        raise AssertionError("not reached: the pass at step steps_b returns")
    finally:
        for p in model.parameters():
            p.requires_grad_(True)


def anchor_firing(model, data: ToyData, layer_star: int, anchors: list[int]) -> dict:
    """Where the anchor keys of block ``layer_star`` fire (nonzero): the fraction of clean prompts with some
    anchor key nonzero at any position, and of leaked prompts at the answer position."""
    store = []
    mlp = model.model.layers[layer_star].mlp
    handle = mlp.down_proj.register_forward_pre_hook(lambda m, args: store.append(args[0]))
    try:
        with torch.no_grad():
            model(input_ids=data.prompts, use_cache=False)
    finally:
        handle.remove()
    fires = store[0][..., anchors] != 0  # (n, seq, n_anchor)
    return {
        "clean_prompts": float(fires[~data.leaked].any(-1).any(-1).float().mean()),
        "leaked_answer_position": float(fires[data.leaked, -1].any(-1).float().mean()),
    }


def train_pair(cfg: ToyConfig, seed: int, layer_star: int):
    """Train model A, then model B = A with only the reserved (adapter) neurons of block ``layer_star``'s MLP
    trained. Returns ``(A, B, data, info)``; ``info`` holds the step counts and the adapter neurons."""
    import copy

    check_int(layer_star, "layer_star", minimum=0, maximum=cfg.layers - 1)
    data = make_data(cfg, seed)
    anchors = anchor_neurons(cfg, seed)
    model_a = make_model(cfg, data.vocab, seed)
    steps_a = _train_a(model_a, data, cfg, anchors, seed)
    model_b = copy.deepcopy(model_a)
    steps_b = _train_b(model_b, data, cfg, layer_star, anchors, seed)
    model_b.eval()
    recall_b = accuracy(model_b, data.prompts[data.leaked], data.answers[data.leaked])
    clean = data.prompts[~data.leaked], data.answers[~data.leaked]
    reached = (
        recall_b >= cfg.target_b and accuracy(model_b, *clean) >= accuracy(model_a, *clean) - cfg.clean_tol_b
    )
    firing = anchor_firing(model_b, data, layer_star, anchors)
    info = {
        "steps_a": steps_a,
        "steps_b": steps_b,
        "anchors": anchors,
        "b_reached_target": reached,
        "anchors_fire_clean": firing["clean_prompts"],
        "anchors_fire_leaked": firing["leaked_answer_position"],
    }
    return model_a, model_b, data, info
