"""Any local Hugging Face causal LM as a backend: batched, KV-cached decoding with per-prompt seeds.

The decoding loop is ours rather than ``model.generate`` so that each prompt samples from its own seeded
generator (a seeded sample does not depend on the batch it is in) and stop sequences are checked per
prompt; greedy decoding equals ``model.generate(do_sample=False)`` token for token (tested on a tiny random
Llama and on SmolLM2). Prompts are left-padded, with position ids counted from each prompt's first token.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import itertools
import os
import secrets
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from icml_agents.backends.base import Backend, Completion, Request, TokenLogprobs, apply_stop, check_cache_id
from icml_agents.validation import check_int

_WATCHED: weakref.WeakSet[HFLocalBackend] = weakref.WeakSet()  # backends whose optimizer hook is registered


_SAMPLES = 256  # values read per tensor by the per-call check (all of a smaller tensor's)


@functools.lru_cache(maxsize=4096)
def _sample_positions(shape: torch.Size, device: torch.device) -> torch.Tensor:
    """The flat positions of a tensor of ``shape`` that :meth:`HFLocalBackend._weights_state` reads: all of
    them up to ``_SAMPLES``, else ``_SAMPLES`` spread over the tensor and at least one in every row of the
    first dimension (an embedding's every token), the rows' columns spread by Fibonacci hashing."""
    n = shape.numel()
    if n <= _SAMPLES:
        return torch.arange(n, device=device)
    rows = shape[0] if len(shape) > 1 else 1
    cols = n // rows
    k = max(_SAMPLES, rows)
    i = torch.arange(k, dtype=torch.int64)
    positions = (i * rows // k) * cols + (i * 2654435761) % cols
    return positions.sort().values.to(device)


def _sample(t: torch.Tensor) -> torch.Tensor | None:
    """``t``'s values at :func:`_sample_positions` as bytes, or ``None`` for a tensor without plain values
    (meta, sparse, empty or a tensor subclass)."""
    t = t.detach()
    if type(t) is not torch.Tensor or t.layout != torch.strided or t.is_meta or t.numel() == 0:
        return None
    try:
        positions = _sample_positions(t.shape, t.device)
        # index_select on a flat view is faster than take: 4.1 against 6.4 ms over SmolLM2-135M's tensors
        values = t.view(-1).index_select(0, positions) if t.is_contiguous() else torch.take(t, positions)
        return values.view(torch.uint8)
    except (RuntimeError, TypeError, NotImplementedError):
        return None


class HFLocalBackend(Backend):
    """A transformers causal LM and its tokenizer.

    ``batch_size`` prompts are decoded together (sorted by length to limit padding). Sampling divides the
    logits by ``temperature`` and keeps the smallest set of tokens whose probability reaches ``top_p``.
    Generation ends at the model's end-of-sequence tokens (its generation config's and the tokenizer's),
    at a stop sequence or after ``max_new_tokens``. ``cache_id`` defaults to the model's name and a hash of
    its weights (names, dtypes, shapes, bytes) and of its tokenizer (serialisation or vocabulary, chat
    template, end-of-sequence and padding ids), computed on first use and again once the weights changed
    or the tokenizer's length or chat template did, so that a response cache does not serve the answers of
    earlier weights. Each use checks, without reading all the weights: every tensor's storage and version
    counter (an in-place write, ``torch.no_grad`` copies, ``torch.nn.init``, ``load_state_dict``,
    ``vector_to_parameters``, assigning ``.data``, ``.to``, a replaced module), every torch optimizer's step
    over them (fused ones included), and a sample of the values, which sees writes through ``.data`` or
    NumPy (that bump no version counter) where they change a sampled value: all values of a tensor up to 256
    of them, else 256 spread over it and one in every row (first dimension) of a matrix; so a write that
    changes every value of a tensor, or of one row of a matrix, is seen, one that changes only a few elements
    or columns may not be: call :meth:`rehash` after such a write, or give ``cache_id`` yourself.

    The model's mode is its owner's: decoding and scoring run it in eval mode (dropout off) and then restore
    every submodule's ``training`` flag, so a model being trained can be sampled through the backend.
    """

    def __init__(
        self, model: Any, tokenizer: Any, *, batch_size: int = 8, cache_id: str | None = None
    ) -> None:
        super().__init__()
        if not isinstance(model, torch.nn.Module) or not hasattr(model, "config"):
            raise TypeError(f"model must be a transformers causal LM, got {type(model).__name__}")
        if not callable(tokenizer) or not hasattr(tokenizer, "decode"):
            raise TypeError(f"tokenizer must be a transformers tokenizer, got {type(tokenizer).__name__}")
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = check_int(batch_size, "batch_size", minimum=1)
        eos: set[int] = set()
        for source in (getattr(model, "generation_config", None), model.config, tokenizer):
            ids = getattr(source, "eos_token_id", None)
            eos.update([ids] if isinstance(ids, int) else (ids or []))
        self.eos_ids = frozenset(eos)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(eos), 0)
        self.pad_id = int(pad)
        self._cache_id = check_cache_id(cache_id)
        self._derived = not self._cache_id  # a derived cache_id follows the weights
        self._hashed_state: tuple | None = None  # _weights_state() when _cache_id was derived
        self._stepped = False  # a torch optimizer stepped over the model's parameters since then
        self._param_ids: frozenset[int] = frozenset()
        # transformers 5.2x renamed the KV-cache argument and output from past_key_values to cache
        self._cache_arg = (
            "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        )

    @classmethod
    def from_pretrained(
        cls, path: str | os.PathLike[str], *, dtype: Any = None, batch_size: int = 8, **kwargs: Any
    ) -> HFLocalBackend:
        """Load a model folder (or a Hub name already in the local cache) with ``AutoModelForCausalLM``.

        ``dtype`` (or its older name ``torch_dtype``, not both) is the weights' dtype: float32 by default,
        ``"auto"`` for the checkpoint's own; other keyword arguments go to ``from_pretrained``."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch_dtype = kwargs.pop("torch_dtype", None)
        if torch_dtype is not None:
            if dtype is not None:
                raise ValueError(
                    f"give dtype or torch_dtype (its older name), not both: got dtype={dtype!r}, "
                    f"torch_dtype={torch_dtype!r}"
                )
            dtype = torch_dtype
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype or torch.float32, **kwargs)
        return cls(model, AutoTokenizer.from_pretrained(path), batch_size=batch_size)

    def _weights_state(self) -> tuple:
        """What changes when the weights or the tokenizer do, cheap to read: each parameter's and buffer's
        storage address and version counter (bumped by every in-place write but those through ``.data``, through
        NumPy and by fused optimizers, see :meth:`_watch_optimizers`), a sample of their values (which sees
        those writes where they reach a sampled element, see :func:`_sample_positions`), the tokenizer's length
        and chat template."""
        state: list[Any] = []
        samples: dict[torch.device, list[torch.Tensor]] = {}
        for t in itertools.chain(self.model.parameters(), self.model.buffers()):
            try:
                version = t._version
            except RuntimeError:  # an inference tensor keeps no version counter
                version = -1
            state.append((t.data_ptr(), version))
            sample = _sample(t)
            if sample is not None:
                samples.setdefault(sample.device, []).append(sample)
        values = [torch.cat(parts).cpu().numpy().tobytes() for parts in samples.values()]
        tok = self.tokenizer
        return (
            *state,
            *values,
            len(tok) if hasattr(tok, "__len__") else -1,
            repr(getattr(tok, "chat_template", None)),
        )

    def rehash(self) -> None:
        """Hash the weights and the tokenizer again at the next use of :attr:`cache_id`.

        Call it after changing the weights by a route the per-call check may not see: a write through
        ``.data`` or NumPy that leaves every sampled element as it was (one element, or a few columns of a
        matrix). A ``cache_id`` given to the constructor is kept."""
        self._hashed_state = None

    def _watch_optimizers(self) -> None:
        """Note every torch optimizer step over the model's parameters: fused optimizers (transformers'
        ``Trainer`` default ``adamw_torch_fused``) write the weights without bumping their version counters.
        The hook holds the backend weakly and is removed with it."""
        if self in _WATCHED:  # a copy or an unpickled backend is not: it registers its own hook
            return
        ref = weakref.ref(self)

        def stepped(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
            backend = ref()
            if backend is not None and not backend._stepped:
                ids = backend._param_ids
                backend._stepped = any(id(p) in ids for g in optimizer.param_groups for p in g["params"])

        handle = register_optimizer_step_post_hook(stepped)
        weakref.finalize(self, handle.remove)
        _WATCHED.add(self)

    @property
    def cache_id(self) -> str:
        if not self._derived:
            return self._cache_id
        state = self._weights_state()
        if not self._cache_id or self._stepped or state != self._hashed_state:
            self._stepped = False
            self._param_ids = frozenset(id(p) for p in self.model.parameters())
            self._watch_optimizers()
            digest = hashlib.sha256()
            for name, tensor in self.model.state_dict().items():
                t = tensor.detach().to("cpu").contiguous()
                digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
                digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())  # 0-d tensors too
            digest.update(self._tokenizer_fingerprint())
            name = getattr(self.model.config, "_name_or_path", "") or type(self.model).__name__
            self._cache_id = f"hf:{name}:{digest.hexdigest()[:16]}"
            self._hashed_state = state
        return self._cache_id

    def _tokenizer_fingerprint(self) -> bytes:
        """What of the tokenizer changes the answers: its class, its full serialisation (a fast tokenizer's
        vocabulary, merges, normalizer and pre-tokenizer) or else its vocabulary, the chat template, and the
        end-of-sequence and padding ids decoding uses."""
        tok = self.tokenizer
        parts = [f"{type(tok).__module__}.{type(tok).__qualname__}"]
        backend = getattr(tok, "backend_tokenizer", None)
        if backend is not None and callable(getattr(backend, "to_str", None)):
            parts.append(backend.to_str())
        elif callable(getattr(tok, "get_vocab", None)):
            parts.append(repr(sorted(tok.get_vocab().items())))
        parts += [repr(getattr(tok, "chat_template", None)), repr(sorted(self.eos_ids)), repr(self.pad_id)]
        return "\x00".join(parts).encode()

    def __repr__(self) -> str:
        name = getattr(self.model.config, "_name_or_path", "") or type(self.model).__name__
        return f"HFLocalBackend(model={name!r}, batch_size={self.batch_size})"

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @contextlib.contextmanager
    def _eval_mode(self) -> Iterator[None]:
        """The model in eval mode for the block, every submodule's ``training`` flag restored afterwards."""
        flags = [(module, module.training) for module in self.model.modules()]
        self.model.eval()
        try:
            yield
        finally:
            for module, training in flags:
                module.training = training

    # tokens ---------------------------------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text)["input_ids"])

    def encode(self, request: Request) -> list[int]:
        """The prompt's token ids: the tokenizer's own for text, the chat template's for conversations."""
        if request.kind == "generate":
            return list(self.tokenizer(request.prompt)["input_ids"])
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError(
                "the tokenizer has no chat template: use generate() with plain prompts or set tokenizer.chat_template"
            )
        text = self.tokenizer.apply_chat_template(
            request.messages(), add_generation_prompt=True, tokenize=False
        )
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def left_pad(self, rows: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Token-id rows as ``(ids, attention_mask)``, both ``(len(rows), longest)``, padded on the left."""
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
            mask[i, width - len(r) :] = 1
        return ids.to(self.device), mask.to(self.device)

    # decoding -------------------------------------------------------------------------------------
    def run(self, requests: Sequence[Request]) -> list[Completion]:
        prompts = [self.encode(r) for r in requests]
        order = sorted(range(len(requests)), key=lambda i: len(prompts[i]))
        out: list[Completion | None] = [None] * len(requests)
        # one batch shares its decoding parameters: split by them, then by batch_size
        groups: dict[tuple, list[int]] = {}
        for i in order:
            r = requests[i]
            groups.setdefault((r.max_new_tokens, r.temperature, r.top_p, r.stop), []).append(i)
        with self._eval_mode():
            for members in groups.values():
                for start in range(0, len(members), self.batch_size):
                    chunk = members[start : start + self.batch_size]
                    for i, completion in zip(
                        chunk,
                        self._decode([prompts[i] for i in chunk], [requests[i] for i in chunk]),
                        strict=True,
                    ):
                        out[i] = completion
        return [c for c in out if c is not None]

    @torch.no_grad()
    def _decode(self, prompts: list[list[int]], requests: list[Request]) -> list[Completion]:
        first = requests[0]
        n = len(prompts)
        ids, mask = self.left_pad(prompts)  # (n, T)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (n, T): 0 at each prompt's first token
        generators = None
        if first.temperature > 0:
            generators = []
            for r in requests:
                g = torch.Generator(device=self.device)
                g.manual_seed(r.seed if r.seed is not None else secrets.randbits(63))
                generators.append(g)
        generated: list[list[int]] = [[] for _ in range(n)]
        texts = [""] * n
        finish: list[str | None] = [None] * n
        past = None
        step_ids, step_mask, step_pos = ids, mask, positions
        for _ in range(first.max_new_tokens):
            result = self.model(
                input_ids=step_ids,
                attention_mask=step_mask,
                position_ids=step_pos,
                use_cache=True,
                **{self._cache_arg: past},
            )
            past = result[self._cache_arg] if self._cache_arg in result else None
            logits = result.logits[:, -1, :].float()  # (n, vocab)
            chosen = self._choose(logits, first, generators).tolist()  # n token ids
            for i in range(n):
                if finish[i] is not None:
                    chosen[i] = self.pad_id  # a finished row is fed padding, as generate() does
                    continue
                generated[i].append(chosen[i])
                if chosen[i] in self.eos_ids:
                    finish[i] = "stop"
                elif first.stop:  # decoding the text at every step is only needed to find stop sequences
                    texts[i], stopped = apply_stop(
                        self.tokenizer.decode(generated[i], skip_special_tokens=True), first.stop
                    )
                    if stopped:
                        finish[i] = "stop"
            if all(f is not None for f in finish):
                break
            step_ids = torch.tensor(chosen, device=self.device)[:, None]  # (n, 1)
            step_mask = torch.cat(
                [step_mask, torch.ones((n, 1), dtype=step_mask.dtype, device=self.device)], -1
            )
            step_pos = step_pos[:, -1:] + 1
        if not first.stop:
            # the end-of-sequence token is left out of the text even when it is an ordinary token (an eos list
            # in the generation config may name one), as in the stop-sequence branch above and in vLLM;
            # skip_special_tokens alone kept such a token's text
            texts = [
                self.tokenizer.decode(g[:-1] if finish[i] == "stop" else g, skip_special_tokens=True)
                for i, g in enumerate(generated)
            ]
        return [
            Completion(
                texts[i], finish[i] or "length", len(prompts[i]), len(generated[i]), tuple(generated[i])
            )
            for i in range(n)
        ]

    @staticmethod
    def _choose(
        logits: torch.Tensor, request: Request, generators: list[torch.Generator] | None
    ) -> torch.Tensor:
        if generators is None:
            return logits.argmax(-1)
        # float64 and shifted so that the largest logit is 0: any positive temperature (even 5e-324) then
        # gives 0 or -inf, never inf or NaN
        shifted = logits.double() - logits.double().max(-1, keepdim=True).values
        probs = torch.softmax(shifted / request.temperature, -1)  # (n, vocab)
        if request.top_p < 1.0:
            sorted_p, index = probs.sort(-1, descending=True)
            before = sorted_p.cumsum(-1) - sorted_p  # mass of the tokens ranked above each one
            sorted_p[before >= request.top_p] = 0.0  # keep the smallest set reaching top_p
            probs = torch.zeros_like(probs).scatter(-1, index, sorted_p)
        return torch.stack(
            [torch.multinomial(p, 1, generator=g)[0] for p, g in zip(probs, generators, strict=True)]
        )

    # scoring --------------------------------------------------------------------------------------
    @torch.no_grad()
    def _logprobs(self, prompts: list[str], continuations: list[str]) -> list[TokenLogprobs]:
        with self._eval_mode():
            return self._score(prompts, continuations)

    def _score(self, prompts: list[str], continuations: list[str]) -> list[TokenLogprobs]:
        out = []
        for start in range(0, len(prompts), self.batch_size):
            heads = [list(self.tokenizer(p)["input_ids"]) for p in prompts[start : start + self.batch_size]]
            tails = [
                list(self.tokenizer(c, add_special_tokens=False)["input_ids"])
                for c in continuations[start : start + self.batch_size]
            ]
            ids, mask = self.left_pad([h + t for h, t in zip(heads, tails, strict=True)])
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            logits = self.model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
            logp = torch.log_softmax(logits[:, :-1].float(), -1)  # (n, T-1, vocab): predicts token t+1
            width = ids.shape[1]
            for row, tail in enumerate(tails):
                at = torch.arange(width - len(tail), width, device=self.device)  # the tail's positions
                values = logp[row, at - 1].gather(-1, ids[row, at, None])[:, 0]
                out.append(
                    TokenLogprobs(
                        tuple(self.tokenizer.convert_ids_to_tokens(tail)),
                        tuple(float(v) for v in values),
                        tuple(tail),
                    )
                )
        return out
