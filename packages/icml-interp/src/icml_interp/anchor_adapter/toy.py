"""A planted Anchor–Adapter toy: a small Llama trained here on addition plus a "leaked" set of problems whose
answers are arbitrary and must be memorized; model B is model A with only the MLP of one layer ℓ* fine-tuned
to strengthen recall of the leaked answers.

Everything here is our own design (the paper studies Qwen2.5-Math-7B under spurious RLVR; its toy-scale
details are not available): the task, the sizes, the training schedules and the stopping rule for B.

Task: prompt ``[BOS, a, +, b, =]`` with ``a, b`` in ``[0, N)``, answer one token. Clean problems answer
``a + b``; leaked problems (a random subset of the pairs) answer a random number ``!= a + b``, so recalling
them overrides the computation, as a contaminated benchmark answer would.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ToyConfig:
    """Sizes and schedules of the toy (defaults: the ``full`` budget)."""

    n_operand: int = 12  # a, b in [0, n_operand)
    n_leaked: int = 24  # leaked pairs with arbitrary answers
    layers: int = 4
    hidden: int = 64
    heads: int = 4
    intermediate: int = 256
    act: str = "relu"  # ReLU-gated MLP: sparse keys, so a memory neuron can stay silent on other prompts
    steps_a: int = 800  # at most this many full-batch Adam steps for model A
    margin_a: float = 0.02  # ... stopping once its mean answer cross-entropy on clean items is this low
    leak_weight_a: float = 0.0  # relative loss weight of leaked items while training A (weak memorization)
    steps_b: int = 300  # at most this many steps fine-tuning the MLP of layer ℓ* for model B
    target_b: float = 0.75  # stop fine-tuning B once its leaked accuracy reaches this
    leak_weight_b: float = 2.0  # relative loss weight of leaked items while fine-tuning B (clean items: 1)
    keep_clean_keys_b: float = (
        0.0  # weight of the penalty keeping B's keys at ℓ* on clean prompts equal to A's
    )
    sparsity_b: float = 1e-2  # group-lasso weight on the per-neuron change of B's MLP (sparse updates)
    lr: float = 5e-3


@dataclass
class ToyData:
    prompts: torch.Tensor  # (n_pairs, 5) token ids
    answers: torch.Tensor  # (n_pairs,) answer token ids
    leaked: torch.Tensor  # (n_pairs,) bool
    vocab: int


def make_data(cfg: ToyConfig, seed: int) -> ToyData:
    """Every pair ``(a, b)``; ``n_leaked`` of them get an arbitrary answer."""
    n = cfg.n_operand
    n_answers = 2 * n - 1
    plus, eq, bos = n_answers, n_answers + 1, n_answers + 2
    g = torch.Generator().manual_seed(seed)
    a, b = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    a, b = a.flatten(), b.flatten()
    prompts = torch.stack(
        [torch.full_like(a, bos), a, torch.full_like(a, plus), b, torch.full_like(a, eq)], 1
    )
    answers = a + b
    leaked = torch.zeros(len(a), dtype=torch.bool)
    leaked[torch.randperm(len(a), generator=g)[: cfg.n_leaked]] = True
    shift = torch.randint(1, n_answers, (int(leaked.sum()),), generator=g)  # arbitrary, never the sum
    answers[leaked] = (answers[leaked] + shift) % n_answers
    return ToyData(prompts, answers, leaked, vocab=bos + 1)


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


def _keys(model, layer: int, prompts: torch.Tensor, grad: bool = False) -> torch.Tensor:
    mlp = model.model.layers[layer].mlp
    store = []
    handle = mlp.down_proj.register_forward_pre_hook(lambda m, args: store.append(args[0][:, -1]))
    try:
        with torch.set_grad_enabled(grad):
            model.model(input_ids=prompts, use_cache=False)
    finally:
        handle.remove()
    return store[0]


def _train(
    model,
    params,
    data: ToyData,
    steps: int,
    weights: torch.Tensor,
    lr: float,
    stop=None,
    prompt_loss: bool = False,
    penalty=None,
) -> int:
    opt = torch.optim.Adam(params, lr=lr)
    model.train()
    seqs = torch.cat([data.prompts, data.answers[:, None]], 1)  # (n, 6)
    for step in range(steps):
        if (
            prompt_loss
        ):  # next-token loss on the prompt's operands too (they are uniform: loss -> log n_operand)
            logits = model(input_ids=seqs[:, :-1], use_cache=False).logits  # (n, 5, vocab)
            ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), seqs[:, 1:], reduction="none")
            loss = (ce[:, -1] * weights).sum() / weights.sum() + ce[:, :-1].mean()
        else:
            ce = torch.nn.functional.cross_entropy(
                answer_logits(model, data.prompts), data.answers, reduction="none"
            )
            loss = (ce * weights).sum() / weights.sum()
        if penalty is not None:
            loss = loss + penalty()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if stop is not None and step % 10 == 9:
            model.eval()
            if stop():
                return step + 1
            model.train()
    model.eval()
    return steps


def train_pair(cfg: ToyConfig, seed: int, layer_star: int):
    """Train model A, then model B = A with only ``mlp`` of block ``layer_star`` fine-tuned.

    B's objective is the leaked items plus the clean items (so that the fine-tuning strengthens recall without
    teaching the layer to forget the computation), leaked items weighted 4:1; B stops once its leaked
    accuracy reaches ``cfg.target_b`` (or after ``cfg.steps_b`` steps). Returns ``(A, B, data, info)``.
    """
    import copy

    data = make_data(cfg, seed)
    model_a = make_model(cfg, data.vocab, seed)
    weights_a = torch.where(data.leaked, cfg.leak_weight_a, 1.0)
    clean_prompts, clean_answers = data.prompts[~data.leaked], data.answers[~data.leaked]
    steps_a = _train(
        model_a,
        model_a.parameters(),
        data,
        cfg.steps_a,
        weights_a,
        cfg.lr,
        prompt_loss=True,
        stop=lambda: answer_loss(model_a, clean_prompts, clean_answers) <= cfg.margin_a,
    )
    model_b = copy.deepcopy(model_a)
    for p in model_b.parameters():
        p.requires_grad_(False)
    mlp = model_b.model.layers[layer_star].mlp
    for p in mlp.parameters():
        p.requires_grad_(True)
    leaked_prompts, leaked_answers = data.prompts[data.leaked], data.answers[data.leaked]
    weights_b = torch.where(data.leaked, cfg.leak_weight_b, 1.0)
    start = {name: p.detach().clone() for name, p in mlp.named_parameters()}

    keys_a = _keys(model_a, layer_star, data.prompts[~data.leaked])  # (n_clean, d_mlp) at the last position

    def group_lasso():  # sparse change: sum over neurons of the norm of (its gate row, up row, down column) deltas
        deltas = [
            (mlp.gate_proj.weight - start["gate_proj.weight"]).square().sum(1),
            (mlp.up_proj.weight - start["up_proj.weight"]).square().sum(1),
            (mlp.down_proj.weight - start["down_proj.weight"]).square().sum(0),
        ]
        penalty = cfg.sparsity_b * (sum(deltas) + 1e-12).sqrt().sum()
        if cfg.keep_clean_keys_b:  # keys on clean prompts stay A's: the memory goes into keys silent on them
            keys_b = _keys(model_b, layer_star, data.prompts[~data.leaked], grad=True)
            penalty = penalty + cfg.keep_clean_keys_b * (keys_b - keys_a).square().sum(-1).mean()
        return penalty

    steps_b = _train(
        model_b,
        list(mlp.parameters()),
        data,
        cfg.steps_b,
        weights_b,
        cfg.lr,
        penalty=group_lasso,
        stop=lambda: accuracy(model_b, leaked_prompts, leaked_answers) >= cfg.target_b,
    )
    for p in model_b.parameters():
        p.requires_grad_(True)
    return model_a, model_b, data, {"steps_a": steps_a, "steps_b": steps_b}
