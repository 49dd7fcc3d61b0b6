"""The backend protocol: requests, completions, token accounting and the checks every backend shares.

A backend turns prompts (plain strings) or conversations (lists of ``{"role", "content"}`` messages) into
completions. :class:`Backend` validates the arguments once, builds one :class:`Request` per prompt and hands
the list to :meth:`Backend.run`, which subclasses implement. A request carries its own seed, derived from the
call's ``seed``, the prompt and how often that prompt already occurred in the call, so that a seeded result
does not depend on the batch it came in and repeated prompts (a GRPO group) still get different samples.
"""

from __future__ import annotations

import hashlib
import json
import numbers
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from icml_agents.validation import check_int, check_list, check_real

Kind = Literal["generate", "chat"]
ROLES = ("system", "user", "assistant", "tool")


class BackendError(RuntimeError):
    """A backend could not produce a completion (a server error after its retries, a malformed reply)."""


class BackendUnavailable(BackendError):
    """The backend could not be reached within its timeout."""


@dataclass(frozen=True)
class Request:
    """One prompt with its decoding parameters; ``prompt`` is a string for ``kind="generate"`` and a tuple of
    ``(role, content)`` pairs for ``kind="chat"``; ``seed`` is this prompt's own seed (``None``: unseeded)."""

    kind: Kind
    prompt: str | tuple[tuple[str, str], ...]
    max_new_tokens: int
    temperature: float
    top_p: float
    stop: tuple[str, ...]
    seed: int | None

    def messages(self) -> list[dict[str, str]]:
        """The conversation as the list of message dicts that chat templates and HTTP APIs take."""
        if isinstance(self.prompt, str):
            raise ValueError("messages() is defined for chat requests only")
        return [{"role": role, "content": content} for role, content in self.prompt]

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["stop"] = list(self.stop)
        if self.kind == "chat":
            out["prompt"] = [list(pair) for pair in self.prompt]
        return out


@dataclass(frozen=True)
class Completion:
    """One completion. ``text`` excludes the end-of-sequence token and any stop sequence;
    ``finish_reason`` is ``"stop"`` (end of sequence or a stop sequence) or ``"length"`` (the token budget
    ran out); ``completion_tokens`` counts every token the model generated, the end-of-sequence token and
    the tokens of a stop sequence included; ``token_ids`` holds them where the backend sees token ids."""

    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    token_ids: tuple[int, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if self.token_ids is not None:
            out["token_ids"] = list(self.token_ids)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Completion:
        ids = data.get("token_ids")
        return cls(
            text=data["text"],
            finish_reason=data["finish_reason"],
            prompt_tokens=data["prompt_tokens"],
            completion_tokens=data["completion_tokens"],
            token_ids=None if ids is None else tuple(ids),
        )


@dataclass(frozen=True)
class TokenLogprobs:
    """The log-probabilities of a continuation's tokens given its prompt (natural log, one per token)."""

    tokens: tuple[str, ...]
    logprobs: tuple[float, ...]
    token_ids: tuple[int, ...] | None = None

    @property
    def total(self) -> float:
        """The continuation's log-likelihood: the sum over its tokens."""
        return float(sum(self.logprobs))

    def to_json(self) -> dict[str, Any]:
        return {
            "tokens": list(self.tokens),
            "logprobs": list(self.logprobs),
            "token_ids": None if self.token_ids is None else list(self.token_ids),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TokenLogprobs:
        ids = data.get("token_ids")
        return cls(tuple(data["tokens"]), tuple(data["logprobs"]), None if ids is None else tuple(ids))


@dataclass
class Usage:
    """Token accounting, cumulative over a backend's life: calls of ``generate``/``chat``/``logprobs``,
    prompts served, and the prompt and completion tokens of those prompts."""

    calls: int = 0
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def __post_init__(self) -> None:
        # not a dataclass field, and left out of the pickled state: a lock field made dataclasses.asdict,
        # copy.deepcopy and pickle raise "cannot pickle '_thread.lock' object" on the usage and on every
        # backend (and agent) holding one
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def add(self, completions: Sequence[Completion]) -> None:
        with self._lock:
            self.calls += 1
            self.requests += len(completions)
            self.prompt_tokens += sum(c.prompt_tokens for c in completions)
            self.completion_tokens += sum(c.completion_tokens for c in completions)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def apply_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """``text`` cut before the earliest occurrence of any stop sequence, and whether one occurred."""
    cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
    return (text, False) if cut < 0 else (text[:cut], True)


def derive_seed(seed: int, prompt: Any, occurrence: int) -> int:
    """A prompt's own 63-bit seed from the call's ``seed``, the prompt and its occurrence count in the call."""
    blob = json.dumps([seed, occurrence, prompt], ensure_ascii=False).encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:8], "little") >> 1


def _check_prompts(prompts: Any, name: str = "prompts") -> list[str]:
    if isinstance(prompts, str):
        raise TypeError(f"{name} must be a list of strings (wrap a single prompt in a list), got a string")
    check_list(prompts, name)
    for i, p in enumerate(prompts):
        if not isinstance(p, str):
            raise TypeError(f"{name}[{i}] must be a string, got {type(p).__name__}")
        if not p:
            raise ValueError(f"{name}[{i}] must be a non-empty string, got ''")
    return list(prompts)


def check_conversation(conversation: Any, name: str) -> tuple[tuple[str, str], ...]:
    check_list(conversation, name)
    if not conversation:
        raise ValueError(f"{name} must hold at least one message, got []")
    out = []
    for j, message in enumerate(conversation):
        where = f"{name}[{j}]"
        if not isinstance(message, Mapping) or not {"role", "content"} <= set(message):
            raise TypeError(f"{where} must be a dict with 'role' and 'content', got {message!r}")
        role, content = message["role"], message["content"]
        if role not in ROLES:
            raise ValueError(f"{where}['role'] must be one of {ROLES}, got {role!r}")
        if not isinstance(content, str):
            raise TypeError(f"{where}['content'] must be a string, got {type(content).__name__}")
        out.append((role, content))
    if not any(content for _, content in out):
        raise ValueError(f"{name} must hold some text: every message is empty")
    return tuple(out)


def check_cache_id(cache_id: Any) -> str:
    """``None`` (derive one) or a non-empty string; returns ``""`` for ``None``."""
    if cache_id is None:
        return ""
    if not isinstance(cache_id, str) or not cache_id:
        raise ValueError(f"cache_id must be None or a non-empty string, got {cache_id!r}")
    return cache_id


def _check_stop(stop: Any) -> tuple[str, ...]:
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, (list, tuple)) or not all(isinstance(s, str) and s for s in stops):
        raise ValueError(f"stop must be None, a non-empty string or a list of them, got {stop!r}")
    return tuple(stops)


def _check_seed(seed: Any) -> int | None:
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be None or a non-negative integer, got {seed!r}")
    return int(seed)


def build_requests(
    kind: Kind,
    prompts: Sequence[Any],
    *,
    max_new_tokens: Any,
    temperature: Any,
    top_p: Any,
    stop: Any,
    seed: Any,
) -> list[Request]:
    """Validated :class:`Request` objects, one per prompt (conversations for ``kind="chat"``), in order."""
    if kind == "generate":
        items: list[Any] = _check_prompts(prompts)
    else:
        if isinstance(prompts, str):
            raise TypeError("conversations must be a list of conversations (lists of messages), got a string")
        check_list(prompts, "conversations")
        items = [check_conversation(c, f"conversations[{i}]") for i, c in enumerate(prompts)]
    budget = check_int(max_new_tokens, "max_new_tokens", minimum=1)
    temp = check_real(temperature, "temperature", "[0, inf)") + 0.0  # -0.0 is 0.0 (one cache key)
    nucleus = check_real(top_p, "top_p", "(0, 1]")
    stops = _check_stop(stop)
    call_seed = _check_seed(seed)
    seen: dict[Any, int] = {}
    out = []
    for item in items:
        k = seen.get(item, 0)
        seen[item] = k + 1
        own = None if call_seed is None else derive_seed(call_seed, item, k)
        out.append(Request(kind, item, budget, temp, nucleus, stops, own))
    return out


class Backend(ABC):
    """The protocol every backend follows.

    Subclasses implement :meth:`run` (a list of :class:`Request` to completions, in order),
    :meth:`_logprobs` and :meth:`count_tokens`, and set :attr:`cache_id`, the string a response cache keys
    them by. ``generate``, ``chat`` and ``logprobs`` validate their arguments and do the token accounting.
    """

    def __init__(self, cache_id: str = "") -> None:
        self.usage = Usage()
        self._cache_id = cache_id

    @property
    def cache_id(self) -> str:
        """Identifies the model behind the backend in a response cache (same id, same answers)."""
        return self._cache_id

    def generate(
        self,
        prompts: Sequence[str],
        *,
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        top_p: float = 1.0,
        stop: str | Sequence[str] | None = None,
        seed: int | None = None,
    ) -> list[Completion]:
        """One completion per prompt, in order. ``temperature=0`` decodes greedily; otherwise samples
        (nucleus ``top_p``); a fixed ``seed`` reproduces the samples whatever batch a prompt is in."""
        requests = build_requests(
            "generate",
            prompts,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            stop=stop,
            seed=seed,
        )
        return self.serve(requests)

    def chat(
        self,
        conversations: Sequence[Sequence[Mapping[str, str]]],
        *,
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        top_p: float = 1.0,
        stop: str | Sequence[str] | None = None,
        seed: int | None = None,
    ) -> list[Completion]:
        """The assistant's next message for each conversation (a list of ``{"role", "content"}`` dicts),
        rendered with the model's chat template; the same parameters as :meth:`generate`."""
        requests = build_requests(
            "chat",
            conversations,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            stop=stop,
            seed=seed,
        )
        return self.serve(requests)

    def logprobs(self, prompts: Sequence[str], continuations: Sequence[str]) -> list[TokenLogprobs]:
        """The log-probability of each continuation's tokens given its prompt (teacher forcing)."""
        prompts = _check_prompts(prompts)
        conts = _check_prompts(continuations, "continuations")
        if len(conts) != len(prompts):
            raise ValueError(
                f"continuations must hold one string per prompt ({len(prompts)}), got {len(conts)}"
            )
        self.usage.add([])
        return self._logprobs(prompts, conts)

    def serve(self, requests: Sequence[Request]) -> list[Completion]:
        """Completions for requests built by :func:`build_requests`, counted in :attr:`usage`."""
        if not requests:
            return []
        completions = self.run(requests)
        if len(completions) != len(requests):
            raise BackendError(
                f"{type(self).__name__} returned {len(completions)} for {len(requests)} prompts"
            )
        self.usage.add(completions)
        return completions

    @abstractmethod
    def run(self, requests: Sequence[Request]) -> list[Completion]:
        """Completions for already validated requests, in order (no token accounting)."""

    @abstractmethod
    def _logprobs(self, prompts: list[str], continuations: list[str]) -> list[TokenLogprobs]: ...

    @abstractmethod
    def count_tokens(self, text: str) -> int:
        """How many tokens the backend's tokenizer makes of a prompt ``text``."""
