"""Latent-thought loops for any Hugging Face causal LM: the multi-pass training forward (Coconut's loop, with
any thought builder) and batched generation that switches between explicit tokens and latent thoughts.

A model is used through ``model.get_input_embeddings()`` and
``model(inputs_embeds=, attention_mask=, position_ids=, <cache>=, use_cache=, output_hidden_states=True)``,
where ``<cache>`` is ``cache`` (transformers 5.2x) or ``past_key_values`` (earlier releases); every
``*ForCausalLM`` of transformers qualifies. Prompts are left-padded and positions counted from each row's first
real token, so a batch gives what one sequence at a time gives.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from icml_agents.validation import check_bool, check_int, check_real, check_tensor

Thought = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
MAX_NEW_TOKENS = 1 << 16


INTEGER_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8)
MAX_ID = (1 << 63) - 1


def _check_ids(ids, name: str, vocab: int | None = None) -> torch.Tensor:
    """An integer tensor of token ids, inside ``[0, vocab)`` when ``vocab`` is given."""
    check_tensor(ids, name)
    if ids.dtype not in INTEGER_DTYPES:
        raise TypeError(f"{name} must be an integer tensor of token ids, got dtype {ids.dtype}")
    if vocab is not None and ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
        raise ValueError(
            f"{name} must hold token ids in [0, {vocab}), got {int(ids.min())}..{int(ids.max())}"
        )
    return ids


def _check_thought(fill, rows: int, width: int) -> torch.Tensor:
    """What a thought builder returned: a finite ``(rows, width)`` float tensor."""
    if not isinstance(fill, torch.Tensor) or not fill.is_floating_point():
        raise TypeError(f"thought must return a float tensor, got {type(fill).__name__}")
    if tuple(fill.shape) != (rows, width):
        raise ValueError(f"thought must return shape {(rows, width)}, got {tuple(fill.shape)}")
    if not bool(torch.isfinite(fill).all()):
        raise ValueError("thought returned NaN or inf (check the model's hidden states and logits)")
    return fill


class LatentLM:
    """A causal LM seen through input embeddings: ``step(embeds, mask, positions, cache)`` gives the logits, the
    last-layer hidden states and the updated key-value cache."""

    def __init__(self, model: nn.Module | LatentLM):
        if isinstance(model, LatentLM):
            model = model.model
        if not isinstance(model, nn.Module) or not hasattr(model, "get_input_embeddings"):
            raise TypeError(
                f"model must be a Hugging Face causal LM (an nn.Module with get_input_embeddings), "
                f"got {type(model).__name__}"
            )
        self.model: nn.Module = model
        params = inspect.signature(model.forward).parameters
        self.cache_arg = next((a for a in ("cache", "past_key_values") if a in params), None)

    @property
    def embedding(self) -> nn.Module:
        return self.model.get_input_embeddings()  # type: ignore[operator]

    @property
    def embedding_weight(self) -> torch.Tensor:
        weight = self.embedding.weight
        assert isinstance(weight, torch.Tensor)
        return weight

    @property
    def vocab_size(self) -> int:
        return int(self.embedding_weight.shape[0])

    def embed(self, ids: torch.Tensor, name: str = "ids") -> torch.Tensor:
        _check_ids(ids, name, self.vocab_size)
        return self.embedding(ids)

    def step(self, embeds, attention_mask, position_ids, cache=None, use_cache: bool = True):
        kwargs = {
            "inputs_embeds": embeds,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "output_hidden_states": True,
        }
        if self.cache_arg is not None:
            kwargs.update({self.cache_arg: cache, "use_cache": use_cache})
        out = self.model(**kwargs)
        new_cache = getattr(out, self.cache_arg, None) if (use_cache and self.cache_arg) else None
        return out.logits, out.hidden_states[-1], new_cache


def _device(lm: LatentLM) -> torch.device:
    return lm.embedding_weight.device


def left_pad(
    sequences: Sequence[Sequence[int]], pad_token_id: int = 0, device=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists into ``(input_ids, attention_mask)``."""
    return _left_pad(sequences, pad_token_id, device, "sequences")


def _left_pad(sequences, pad_token_id, device, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(sequences, (list, tuple)) or not sequences:
        raise ValueError(f"{name} must be a non-empty list of token-id lists, got {sequences!r}")
    pad_token_id = check_int(pad_token_id, "pad_token_id", 0, MAX_ID)
    try:
        device = torch.device("cpu") if device is None else torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device must be a torch device or its name, got {device!r}") from err
    rows = []
    for i, s in enumerate(sequences):
        if not isinstance(s, (list, tuple)) or not s:
            raise ValueError(f"{name}[{i}] must be a non-empty list of token ids, got {s!r}")
        rows.append([check_int(t, f"{name}[{i}] token", 0, MAX_ID) for t in s])
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(rows), width), dtype=torch.long, device=device)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(r, device=device)
        mask[i, width - len(r) :] = 1
    return ids, mask


@dataclass
class LatentOutput:
    """What :func:`latent_forward` returns: ``logits`` ``(B, T, V)``, the mean next-token ``loss`` over labels
    other than -100 (None without labels), the ``inputs_embeds`` with the thoughts filled in, the ``latents``
    fed ``(N, D)`` in (row, position) order, the key-value ``cache`` (None with ``use_cache=False``) and the
    number of model ``passes``."""

    logits: torch.Tensor
    loss: torch.Tensor | None
    inputs_embeds: torch.Tensor
    latents: torch.Tensor
    cache: object
    passes: int
    last_hidden: torch.Tensor = field(repr=False)


def latent_forward(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    latent_token_id: int,
    thought: Thought,
    labels: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    use_cache: bool = True,
) -> LatentOutput:
    """Coconut's multi-pass forward, with any thought builder: every ``latent_token_id`` slot of ``input_ids``
    gets ``thought(h, z, E)`` of the position before it (its last-layer hidden state ``h`` and logits ``z``).

    The sequence is run in chunks that end before each column holding a slot, so a thought may depend on
    thoughts before it; with ``use_cache`` each chunk reuses the key-value cache of the previous ones
    (Coconut's loop), otherwise every pass recomputes the whole prefix (the reference). Slots may sit at
    different columns in different rows; a column is filled in every row that has a slot there."""
    lm = LatentLM(model)
    check_tensor(input_ids, "input_ids", ndim=2)
    _check_ids(input_ids, "input_ids", lm.vocab_size)
    if input_ids.shape[0] == 0 or input_ids.shape[1] == 0:
        raise ValueError(f"input_ids must have at least one row and one column, got {tuple(input_ids.shape)}")
    latent_token_id = check_int(latent_token_id, "latent_token_id", 0, lm.vocab_size - 1)
    use_cache = check_bool(use_cache, "use_cache") and lm.cache_arg is not None
    if not callable(thought):
        raise TypeError(
            f"thought must be callable as thought(hidden, logits, embedding_weight), got {thought!r}"
        )
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    check_tensor(attention_mask, "attention_mask", shape=tuple(input_ids.shape))
    if attention_mask.is_complex() or not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
        raise ValueError("attention_mask must hold only 0 and 1")
    attention_mask = attention_mask.long()
    if position_ids is None:
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    check_tensor(position_ids, "position_ids", shape=tuple(input_ids.shape))
    if labels is not None:
        check_tensor(labels, "labels", shape=tuple(input_ids.shape))
        _check_ids(labels.clamp(min=0), "labels", lm.vocab_size)
        if bool(((labels < 0) & (labels != -100)).any()):
            raise ValueError("labels must hold token ids or -100 (ignored)")
    is_slot = (input_ids == latent_token_id) & attention_mask.bool()
    first = attention_mask.argmax(-1)  # each row's first real position
    if bool(is_slot[torch.arange(len(first)), first].any()):
        raise ValueError(
            "input_ids: a latent slot needs a real token before it (found one opening a row), "
            f"latent_token_id={latent_token_id}"
        )
    columns = torch.nonzero(is_slot.any(0)).flatten().tolist()
    embeds = lm.embed(input_ids, "input_ids")
    width = input_ids.shape[1]
    bounds = [*columns, width]
    logits_parts, hidden_parts = [], []
    cache, start, passes = None, 0, 0
    latents = []
    for end in bounds:
        lo = start if use_cache else 0
        out_logits, hidden, new_cache = lm.step(
            embeds[:, lo:end],
            attention_mask[:, :end],
            position_ids[:, lo:end],
            cache if use_cache else None,
            use_cache=use_cache,
        )
        passes += 1
        logits_parts.append(out_logits[:, start - lo :])
        hidden_parts.append(hidden[:, start - lo :])
        cache = new_cache
        if end == width:
            break
        rows = torch.nonzero(is_slot[:, end]).flatten()
        prev = end - 1 - lo
        fill = thought(hidden[rows, prev], out_logits[rows, prev].float(), lm.embedding_weight)
        fill = _check_thought(fill, len(rows), embeds.shape[-1])
        embeds = embeds.clone()
        embeds[rows, end] = fill.to(embeds.dtype)
        latents.append((end, rows, fill))
        start = end
    logits = torch.cat(logits_parts, dim=1)
    last_hidden = torch.cat(hidden_parts, dim=1)
    ordered = []
    for col, rows, fill in latents:
        ordered += [(int(r), col, fill[j]) for j, r in enumerate(rows)]
    ordered.sort(key=lambda t: (t[0], t[1]))
    lat = torch.stack([v for _, _, v in ordered]) if ordered else embeds.new_zeros((0, embeds.shape[-1]))
    loss = None
    if labels is not None:
        shift_logits = logits[:, :-1].reshape(-1, logits.shape[-1]).float()
        shift_labels = labels[:, 1:].reshape(-1)
        if bool((shift_labels != -100).any()):
            loss = nn.functional.cross_entropy(shift_logits, shift_labels, ignore_index=-100)
        else:
            loss = shift_logits.sum() * 0.0
    return LatentOutput(logits, loss, embeds, lat, cache if use_cache else None, passes, last_hidden)


@dataclass(frozen=True)
class ConfidenceSwitch:
    """When generation thinks latently. In explicit mode the confidence is the largest probability of an
    ordinary (non-special) token, and the model enters latent mode when it is below ``enter_below``. In latent
    mode the confidence is the probability of the end-of-thought token (the largest ordinary-token
    probability when there is none), and the model leaves after ``min_latent`` thoughts once it is at least
    ``exit_above``, or after ``max_latent``. After a run, ``min_explicit`` tokens are written before another
    may start (the first token after a run is the one the run was for, and is often the least certain).
    ``start_latent`` begins in latent mode (Soft-Thinking's thinking phase). ``None`` disables a threshold."""

    enter_below: float | None = 0.5
    exit_above: float | None = 0.5
    max_latent: int = 8
    min_latent: int = 1
    start_latent: bool = False
    min_explicit: int = 1

    def __post_init__(self):
        for name in ("enter_below", "exit_above"):
            value = getattr(self, name)
            if value is not None:
                check_real(value, name, "(0, 1)")
        check_int(self.max_latent, "max_latent", 1, MAX_NEW_TOKENS)
        check_int(self.min_latent, "min_latent", 0, self.max_latent, why=" (and at most max_latent)")
        check_bool(self.start_latent, "start_latent")
        check_int(self.min_explicit, "min_explicit", 0, MAX_NEW_TOKENS)

    def enter(self, confidence: float, written: int | None = None) -> bool:
        """Whether an explicit-mode step with this confidence starts a latent run, ``written`` explicit tokens
        after the last run ended (None: no run yet)."""
        confidence = check_real(confidence, "confidence", "[0, 1]")
        if written is not None and check_int(written, "written", 0) < self.min_explicit:
            return False
        return self.enter_below is not None and confidence < self.enter_below

    def exit(self, confidence: float, run: int) -> bool:
        """Whether a latent run of ``run`` thoughts ends, given the current confidence."""
        confidence = check_real(confidence, "confidence", "[0, 1]")
        if check_int(run, "run", 0) >= self.max_latent:
            return True
        return run >= self.min_latent and self.exit_above is not None and confidence >= self.exit_above


@dataclass
class LatentGeneration:
    """What :func:`generate` returns, one entry per prompt: ``tokens`` (the explicit tokens written, the
    begin/end-of-thought markers included, end-of-sequence excluded), ``trace`` (the same with
    ``latent_token_id`` (or -1) at each thought), the counts of thoughts and explicit positions, and the
    ``latents`` fed, ``(N, D)``, in generation order."""

    tokens: list[list[int]]
    trace: list[list[int]]
    n_latent: list[int]
    n_explicit: list[int]
    latents: torch.Tensor

    @property
    def n_positions(self) -> list[int]:
        """Generated positions per prompt (thoughts plus explicit tokens)."""
        return [a + b for a, b in zip(self.n_latent, self.n_explicit, strict=False)]


def _check_id(value, name: str, vocab: int) -> int | None:
    return None if value is None else check_int(value, name, 0, vocab - 1)


@torch.no_grad()
def generate(
    model,
    prompts: Sequence[Sequence[int]],
    *,
    thought: Thought | None = None,
    switch: ConfidenceSwitch | None = None,
    max_new_tokens: int = 32,
    eos_token_id: int,
    latent_token_id: int | None = None,
    bot_token_id: int | None = None,
    eot_token_id: int | None = None,
    special_token_ids: Sequence[int] = (),
    pad_token_id: int = 0,
) -> LatentGeneration:
    """Greedy batched generation with latent thoughts.

    Latent slots in a prompt (``latent_token_id``, Coconut's ``<bot><latent>…<eot>``) are filled by
    :func:`latent_forward` first. After the prompt, ``switch`` decides at every position whether to write the
    greedy token or feed ``thought(h, z, E)``; entering a run writes ``bot_token_id`` first and leaving it writes
    ``eot_token_id`` (when they are given; without them the run starts and ends silently). Without ``switch``
    this is greedy decoding. ``max_new_tokens`` bounds the generated positions, thoughts included. The KV cache
    is reused throughout when the model takes one."""
    lm = LatentLM(model)
    vocab = lm.vocab_size
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise ValueError("prompts must be a non-empty list of token-id lists")
    max_new_tokens = check_int(max_new_tokens, "max_new_tokens", 1, MAX_NEW_TOKENS)
    eos_token_id = check_int(eos_token_id, "eos_token_id", 0, vocab - 1)
    latent_token_id = _check_id(latent_token_id, "latent_token_id", vocab)
    bot_token_id = _check_id(bot_token_id, "bot_token_id", vocab)
    eot_token_id = _check_id(eot_token_id, "eot_token_id", vocab)
    pad_token_id = check_int(pad_token_id, "pad_token_id", 0, vocab - 1)
    if switch is not None and not isinstance(switch, ConfidenceSwitch):
        raise TypeError(f"switch must be a ConfidenceSwitch or None, got {type(switch).__name__}")
    if switch is not None and thought is None:
        raise ValueError("thought must be given when switch is (what to feed in latent mode)")
    if thought is not None and not callable(thought):
        raise TypeError(
            f"thought must be callable as thought(hidden, logits, embedding_weight), got {thought!r}"
        )
    if not isinstance(special_token_ids, (list, tuple)):
        raise ValueError(f"special_token_ids must be a list of token ids, got {special_token_ids!r}")
    special = {check_int(t, "special_token_ids item", 0, vocab - 1) for t in special_token_ids}
    special |= {t for t in (latent_token_id, bot_token_id, eot_token_id) if t is not None}
    ordinary = torch.ones(vocab, dtype=torch.bool, device=_device(lm))
    ordinary[sorted(special)] = False
    ordinary[eos_token_id] = True
    if not bool(ordinary.any()):
        raise ValueError("special_token_ids leave no ordinary token to write")

    ids, mask = _left_pad(prompts, pad_token_id, _device(lm), "prompts")
    if int(ids.max()) >= vocab:
        raise ValueError(
            f"prompts must hold token ids below the vocabulary size {vocab}, got {int(ids.max())}"
        )
    has_slots = latent_token_id is not None and bool(((ids == latent_token_id) & mask.bool()).any())
    if has_slots:
        if thought is None:
            raise ValueError("thought must be given when prompts hold latent slots")
        assert latent_token_id is not None
        try:
            out = latent_forward(lm.model, ids, mask, latent_token_id=latent_token_id, thought=thought)
        except ValueError as err:
            if "input_ids" in str(err):
                raise ValueError(str(err).replace("input_ids", "prompts")) from None
            raise
        logits, hidden, cache = out.logits[:, -1].float(), out.last_hidden[:, -1], out.cache
        prompt_latents = [out.latents]
    else:
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        z, h, cache = lm.step(lm.embed(ids), mask, positions, None, use_cache=lm.cache_arg is not None)
        logits, hidden = z[:, -1].float(), h[:, -1]
        prompt_latents = []
    embeds_so_far = None
    if cache is None:  # a model without a key-value cache: recompute the whole sequence at every step
        embeds_so_far = out.inputs_embeds if has_slots else lm.embed(ids)

    b = len(prompts)
    tokens: list[list[int]] = [[] for _ in range(b)]
    trace: list[list[int]] = [[] for _ in range(b)]
    n_latent, n_explicit = [0] * b, [0] * b
    latent_mode = [bool(switch is not None and switch.start_latent)] * b
    run = [0] * b
    written: list[int | None] = [None] * b  # explicit tokens since the last run ended
    done = [False] * b
    fed_latents = []
    marker = -1 if latent_token_id is None else latent_token_id
    for _ in range(max_new_tokens):
        probs = torch.softmax(logits, dim=-1)
        ordinary_conf = probs.masked_fill(~ordinary, 0).max(dim=-1).values
        exit_conf = probs[:, eot_token_id] if eot_token_id is not None else ordinary_conf
        greedy = logits.masked_fill(~ordinary, float("-inf")).argmax(-1)
        feed_ids = torch.full((b,), pad_token_id, dtype=torch.long, device=ids.device)
        use_latent = torch.zeros(b, dtype=torch.bool, device=ids.device)
        for i in range(b):
            if done[i]:
                continue
            if latent_mode[i]:
                if switch is not None and switch.exit(float(exit_conf[i]), run[i]):
                    latent_mode[i], run[i], written[i] = False, 0, 0
                    if eot_token_id is not None:
                        feed_ids[i] = eot_token_id
                        tokens[i].append(eot_token_id)
                        trace[i].append(eot_token_id)
                        n_explicit[i] += 1
                        continue
                else:
                    use_latent[i] = True
                    run[i] += 1
                    n_latent[i] += 1
                    trace[i].append(marker)
                    continue
            elif switch is not None and switch.enter(float(ordinary_conf[i]), written[i]):
                latent_mode[i], run[i] = True, 0
                if bot_token_id is not None:
                    feed_ids[i] = bot_token_id
                    tokens[i].append(bot_token_id)
                    trace[i].append(bot_token_id)
                    n_explicit[i] += 1
                else:
                    use_latent[i] = True
                    run[i] += 1
                    n_latent[i] += 1
                    trace[i].append(marker)
                continue
            token = int(greedy[i])
            if token == eos_token_id:
                done[i] = True
                continue
            feed_ids[i] = token
            tokens[i].append(token)
            trace[i].append(token)
            n_explicit[i] += 1
            if written[i] is not None:
                written[i] += 1  # type: ignore[operator]
        if all(done):
            break
        step_embeds = lm.embed(feed_ids)
        if bool(use_latent.any()):
            rows = torch.nonzero(use_latent).flatten()
            fill = thought(hidden[rows], logits[rows], lm.embedding_weight)  # type: ignore[misc]
            fill = _check_thought(fill, len(rows), step_embeds.shape[-1])
            step_embeds = step_embeds.clone()
            step_embeds[rows] = fill.to(step_embeds.dtype)
            fed_latents.append(fill)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        position = (mask.sum(-1, keepdim=True) - 1).clamp(min=0)
        if cache is not None:
            z, h, cache = lm.step(step_embeds[:, None], mask, position, cache)
            logits, hidden = z[:, -1].float(), h[:, -1]
        else:
            assert embeds_so_far is not None
            embeds_so_far = torch.cat([embeds_so_far, step_embeds[:, None]], dim=1)
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            z, h, _ = lm.step(embeds_so_far, mask, positions, None, use_cache=False)
            logits, hidden = z[:, -1].float(), h[:, -1]
    width = lm.embedding_weight.shape[1]
    parts = [*prompt_latents, *fed_latents]
    latents = torch.cat(parts) if parts else lm.embedding_weight.new_zeros((0, width))
    return LatentGeneration(tokens, trace, n_latent, n_explicit, latents)
