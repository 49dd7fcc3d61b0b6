"""Token policies for the draft -> feedback -> revision protocol: any causal LM, or a scripted function.

A policy maps prompts (lists of token ids) to sampled completions and, when it is trainable, gives the
per-token log-probabilities of given completions with gradient. :class:`CausalLMPolicy` wraps any module
called like a Hugging Face causal LM (``model(input_ids=, attention_mask=, position_ids=)`` returning logits
or an output with ``.logits``): a ``transformers`` model of any size, or a small one of your own.
:class:`ScriptedPolicy` wraps a plain function (an oracle critic, a rule-based actor) and is not trainable.
"""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from icml_agents.validation import check_bool, check_int, check_real

MAX_NEW_TOKENS = 4096  # a cap on one completion's length (int arguments are bounded)


def check_prompts(prompts, name: str = "prompts", allow_empty: bool = False) -> list[list[int]]:
    """A non-empty sequence of non-empty (``allow_empty``: possibly empty) sequences of non-negative token ids,
    as lists of ints."""
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence):
        raise TypeError(f"{name} must be a sequence of token-id sequences, got {type(prompts).__name__}")
    if len(prompts) == 0:
        raise ValueError(f"{name} must not be empty")
    out = []
    for i, p in enumerate(prompts):
        if isinstance(p, torch.Tensor):
            p = p.tolist()
        if isinstance(p, (str, bytes)) or not isinstance(p, Sequence) or (len(p) == 0 and not allow_empty):
            raise ValueError(f"{name}[{i}] must be a non-empty sequence of token ids, got {p!r}")
        if not all(isinstance(t, numbers.Integral) and not isinstance(t, bool) and int(t) >= 0 for t in p):
            raise ValueError(f"{name}[{i}] must hold non-negative integer token ids, got {list(p)!r}")
        out.append([int(t) for t in p])
    return out


@dataclass
class Completions:
    """Sampled completions of a batch: ``tokens`` ``(B, T)`` (padding after the end), ``mask`` ``(B, T)`` (1
    on generated tokens, the end-of-sequence token included) and the end token's id."""

    tokens: torch.Tensor
    mask: torch.Tensor
    eos_token_id: int

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    def sequences(self) -> list[list[int]]:
        """The completions as lists of token ids, without the end-of-sequence token."""
        out = []
        for row, m in zip(self.tokens.tolist(), self.mask.tolist(), strict=True):
            seq = [t for t, keep in zip(row, m, strict=True) if keep]
            out.append(seq[:-1] if seq and seq[-1] == self.eos_token_id else seq)
        return out

    @classmethod
    def from_sequences(cls, sequences: Sequence[Sequence[int]], eos_token_id: int, pad_token_id: int = 0):
        """Pack completions given as token lists (each gets the end token appended) into a batch."""
        eos_token_id = check_int(eos_token_id, "eos_token_id", 0)
        pad_token_id = check_int(pad_token_id, "pad_token_id", 0)
        rows = [[*s, eos_token_id] for s in check_prompts(sequences, "sequences", allow_empty=True)]
        width = max(map(len, rows))
        tokens = torch.tensor([r + [pad_token_id] * (width - len(r)) for r in rows], dtype=torch.long)
        mask = torch.tensor([[1.0] * len(r) + [0.0] * (width - len(r)) for r in rows])
        return cls(tokens, mask, eos_token_id)


class CausalLMPolicy(nn.Module):
    """A sampling policy over any causal language model.

    ``model(input_ids=, attention_mask=, position_ids=)`` must return logits ``(B, L, vocab)`` or an object
    with ``.logits`` (every ``transformers`` ``*ForCausalLM`` does). Prompts are left-padded with
    ``pad_token_id`` and positions counted from each prompt's first real token, so a batch gives the same
    tokens as one prompt at a time. ``allowed_tokens`` restricts sampling, and the log-probabilities, to a
    vocabulary (a constrained feedback language); the end token is always allowed. ``temperature`` scales
    the logits in sampling and in :meth:`log_probs` alike (as TRL does), so the GRPO ratio is of one policy.
    The key-value cache is used in sampling when ``model.forward`` takes ``cache`` or ``past_key_values``.
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        eos_token_id: int,
        pad_token_id: int = 0,
        max_new_tokens: int = 16,
        temperature: float = 1.0,
        allowed_tokens: Sequence[int] | None = None,
    ):
        super().__init__()
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module (a causal LM), got {type(model).__name__}")
        self.model = model
        self.eos_token_id = check_int(eos_token_id, "eos_token_id", 0)
        self.pad_token_id = check_int(pad_token_id, "pad_token_id", 0)
        self.max_new_tokens = check_int(max_new_tokens, "max_new_tokens", 1, MAX_NEW_TOKENS)
        self.temperature = check_real(temperature, "temperature", "(0, inf)")
        self.allowed_tokens: list[int] | None = None
        if allowed_tokens is not None:
            allowed = check_prompts([allowed_tokens], "allowed_tokens")[0]
            self.allowed_tokens = sorted({*allowed, self.eos_token_id})
        # the key-value cache argument: transformers 5.2x renamed past_key_values to cache
        params = inspect.signature(model.forward).parameters
        self._cache_arg = next((a for a in ("cache", "past_key_values") if a in params), None)

    def _logits(self, input_ids, attention_mask, past=None, position_ids=None, cache: bool = False):
        if position_ids is None:
            position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}
        if cache and self._cache_arg is not None:
            kwargs.update({self._cache_arg: past, "use_cache": True})
        try:
            out = self.model(**kwargs)
        except IndexError as err:  # an embedding lookup past the vocabulary
            raise ValueError(
                f"prompts (or completions) hold a token id outside the model's vocabulary: {err}"
            ) from err
        logits = out if isinstance(out, torch.Tensor) else out.logits
        if self.allowed_tokens is not None and self.allowed_tokens[-1] >= logits.shape[-1]:
            raise ValueError(
                f"allowed_tokens and eos_token_id must be below the model's vocabulary size {logits.shape[-1]}, "
                f"got {self.allowed_tokens[-1]}"
            )
        logits = logits.float() / self.temperature
        if self.allowed_tokens is not None:
            blocked = torch.ones(logits.shape[-1], dtype=torch.bool, device=logits.device)
            blocked[self.allowed_tokens] = False
            logits = logits.masked_fill(blocked, float("-inf"))
        return logits, (
            getattr(out, self._cache_arg, None) if cache and self._cache_arg is not None else None
        )

    def _left_pad(self, prompts: list[list[int]]):
        width = max(map(len, prompts))
        device = next(self.model.parameters()).device
        ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long, device=device)
        mask = torch.zeros((len(prompts), width), dtype=torch.long, device=device)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.tensor(p, device=device)
            mask[i, width - len(p) :] = 1
        return ids, mask

    @torch.no_grad()
    def generate(
        self,
        prompts,
        generator: torch.Generator | None = None,
        greedy: bool = False,
        max_new_tokens: int | None = None,
    ) -> Completions:
        """Sample one completion per prompt (``greedy``: the most likely token at each step)."""
        prompts = check_prompts(prompts)
        check_bool(greedy, "greedy")
        n_new = (
            self.max_new_tokens if max_new_tokens is None else check_int(max_new_tokens, "max_new_tokens", 1)
        )
        ids, attn = self._left_pad(prompts)
        b = len(prompts)
        done = torch.zeros(b, dtype=torch.bool, device=ids.device)
        out, keep = [], []
        use_cache = self._cache_arg is not None
        logits, past = self._logits(ids, attn, cache=use_cache)
        for step in range(n_new):
            last = logits[:, -1]  # (B, vocab)
            if greedy:
                nxt = last.argmax(-1)
            else:
                probs = torch.softmax(last, -1)
                on = probs.cpu() if generator is None else probs.to(generator.device)  # a CUDA generator too
                nxt = torch.multinomial(on, 1, generator=generator).squeeze(1).to(ids.device)
            nxt = torch.where(done, torch.full_like(nxt, self.pad_token_id), nxt)
            keep.append(~done)
            out.append(nxt)
            done = done | (nxt == self.eos_token_id)
            if done.all() or step == n_new - 1:
                break
            attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)  # rows already done: ignored
            if past is not None:
                position = (attn.sum(-1, keepdim=True) - 1).clamp(min=0)
                logits, past = self._logits(nxt[:, None], attn, past=past, position_ids=position, cache=True)
            else:
                ids = torch.cat([ids, nxt[:, None]], dim=1)
                logits, _ = self._logits(ids, attn)
        return Completions(torch.stack(out, 1), torch.stack(keep, 1).float(), self.eos_token_id)

    def log_probs(self, prompts, completions: Completions) -> torch.Tensor:
        """Per-token log-probabilities ``(B, T)`` of ``completions`` after ``prompts`` (with gradient); zero
        where the completion's mask is zero."""
        prompts = check_prompts(prompts)
        if not isinstance(completions, Completions):
            raise TypeError(f"completions must be Completions, got {type(completions).__name__}")
        if len(completions) != len(prompts):
            raise ValueError(
                f"completions must have one row per prompt ({len(prompts)}), got {len(completions)}"
            )
        ids, attn = self._left_pad(prompts)
        tokens = completions.tokens.to(ids.device)
        mask = completions.mask.to(ids.device)
        full = torch.cat([ids, tokens], dim=1)
        full_attn = torch.cat([attn, mask.long()], dim=1)
        logits, _ = self._logits(full, full_attn)
        width = ids.shape[1]
        logp = torch.log_softmax(logits[:, width - 1 : -1], dim=-1)  # (B, T, vocab)
        picked = logp.gather(2, tokens.unsqueeze(2)).squeeze(2)
        return torch.where(mask > 0, picked, torch.zeros_like(picked))


class ScriptedPolicy:
    """A fixed policy from a function ``fn(prompt_ids, rng) -> completion_ids`` (an oracle critic, a generic
    "check your work" critic, a rule-based actor). Not trainable: it has no parameters."""

    trainable = False

    def __init__(
        self, fn: Callable[[list[int], torch.Generator | None], Sequence[int]], *, eos_token_id: int
    ):
        if not callable(fn):
            raise TypeError(f"fn must be callable (prompt_ids, generator) -> completion ids, got {fn!r}")
        self.fn = fn
        self.eos_token_id = check_int(eos_token_id, "eos_token_id", 0)

    def generate(self, prompts, generator=None, greedy: bool = False, max_new_tokens=None) -> Completions:
        prompts = check_prompts(prompts)
        return Completions.from_sequences([list(self.fn(p, generator)) for p in prompts], self.eos_token_id)

    def parameters(self) -> Iterator[nn.Parameter]:
        return iter(())


def check_policy(policy, name: str):
    """A policy: an object with ``generate`` (a :class:`CausalLMPolicy`, a :class:`ScriptedPolicy`)."""
    if not callable(getattr(policy, "generate", None)) or not callable(getattr(policy, "parameters", None)):
        raise TypeError(
            f"{name} must be a policy (CausalLMPolicy or ScriptedPolicy), got {type(policy).__name__}"
        )
    return policy


def is_trainable(policy) -> bool:
    """Whether ``policy`` has parameters that need a gradient (a scripted policy has none)."""
    return getattr(policy, "trainable", True) and any(p.requires_grad for p in policy.parameters())
