"""A backend that answers from a script and records every request: deterministic tests of agent code."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from icml_agents.backends.base import Backend, Completion, Request, TokenLogprobs, apply_stop

Response = str | Sequence[str]
_PIECE = re.compile(r"\s*\S+|\s+")


class ScriptedBackend(Backend):
    """Answers each request from ``script`` and appends the request to :attr:`calls`.

    ``script`` is either a callable ``(Request) -> str`` (it sees the prompt, the budget, the temperature
    and the request's own seed, so it can script seeded sampling) or rules: a mapping or a list of
    ``(pattern, response)`` pairs where the first pattern found in the prompt wins (a string matches as a
    substring, a compiled ``re.Pattern`` by ``search``). A response given as a list is served in order, one
    item per matching request, its last item repeating. Chat requests are matched against the conversation
    rendered as ``role: content`` lines. A request that no rule matches raises ``LookupError`` (a gap in
    the script, not bad input).

    The backend then does what a model server does with a raw answer: it cuts the answer at the first stop
    sequence or after ``max_new_tokens`` tokens and counts tokens with ``tokenizer`` (a Hugging Face
    tokenizer; without one a token is a run of non-space characters with the spaces before it).
    ``logprobs``, a callable ``(prompt, continuation) -> one float per continuation token``, scripts
    :meth:`logprobs`; without it that method raises ``NotImplementedError``.
    """

    def __init__(
        self,
        script: Callable[[Request], str] | Mapping[Any, Response] | Sequence[tuple[Any, Response]],
        *,
        tokenizer: Any = None,
        logprobs: Callable[[str, str], Sequence[float]] | None = None,
        name: str = "scripted",
    ) -> None:
        super().__init__(f"scripted:{name}")
        if callable(script):
            self._rules: list[tuple[Any, Response]] | None = None
            self._fn: Callable[[Request], str] | None = script
        else:
            rules = list(script.items()) if isinstance(script, Mapping) else script
            if not isinstance(rules, (list, tuple)) or not all(
                isinstance(r, tuple) and len(r) == 2 for r in rules
            ):
                raise TypeError(
                    "script must be a callable, a mapping or a list of (pattern, response) pairs, "
                    f"got {type(script).__name__}"
                )
            for i, (pattern, response) in enumerate(rules):
                if not isinstance(pattern, (str, re.Pattern)):
                    raise TypeError(
                        f"script[{i}]: a pattern must be a string or an re.Pattern, got {pattern!r}"
                    )
                items = [response] if isinstance(response, str) else response
                if (
                    not isinstance(items, (list, tuple))
                    or not items
                    or not all(isinstance(r, str) for r in items)
                ):
                    raise TypeError(
                        f"script[{i}]: a response must be a string or a non-empty list of strings"
                    )
            self._rules, self._fn = list(rules), None
        self._served_count: dict[int, int] = {}
        if tokenizer is not None and not (callable(tokenizer) and hasattr(tokenizer, "decode")):
            raise TypeError(
                f"tokenizer must be None or a Hugging Face tokenizer, got {type(tokenizer).__name__}"
            )
        if logprobs is not None and not callable(logprobs):
            raise TypeError(f"logprobs must be None or a callable (prompt, continuation), got {logprobs!r}")
        self.tokenizer = tokenizer
        self._logprob_fn = logprobs
        self.calls: list[Request] = []
        self.logprob_calls: list[tuple[str, str]] = []

    def __repr__(self) -> str:
        return f"ScriptedBackend(cache_id={self.cache_id!r}, calls={len(self.calls)})"

    # tokens ---------------------------------------------------------------------------------------
    def _encode(self, text: str, *, special: bool) -> list[Any]:
        if self.tokenizer is None:
            return _PIECE.findall(text)
        return list(self.tokenizer(text, add_special_tokens=special)["input_ids"])

    def _decode(self, tokens: list[Any]) -> str:
        if self.tokenizer is None:
            return "".join(tokens)
        return self.tokenizer.decode(tokens)

    def count_tokens(self, text: str) -> int:
        return len(self._encode(text, special=True))

    def render(self, request: Request) -> str:
        """The text a request's rules are matched against (a chat request's ``role: content`` lines)."""
        if isinstance(request.prompt, str):
            return request.prompt
        return "\n".join(f"{m['role']}: {m['content']}" for m in request.messages())

    # answers --------------------------------------------------------------------------------------
    def _answer(self, request: Request) -> str:
        if self._fn is not None:
            answer = self._fn(request)
            if not isinstance(answer, str):
                raise TypeError(f"the script must return a string, got {type(answer).__name__}")
            return answer
        assert self._rules is not None
        text = self.render(request)
        for i, (pattern, response) in enumerate(self._rules):
            found = pattern.search(text) if isinstance(pattern, re.Pattern) else pattern in text
            if found:
                if isinstance(response, str):
                    return response
                k = self._served_count.get(i, 0)
                self._served_count[i] = k + 1
                return response[min(k, len(response) - 1)]
        raise LookupError(f"no rule of the script matches the prompt {text[:200]!r}")

    def run(self, requests: Sequence[Request]) -> list[Completion]:
        out = []
        for request in requests:
            self.calls.append(request)
            text, finish, generated = self._decode_like_a_model(self._answer(request), request)
            prompt_tokens = self.count_tokens(self.render(request))
            out.append(Completion(text, finish, prompt_tokens, generated))
        return out

    def _decode_like_a_model(self, answer: str, request: Request) -> tuple[str, str, int]:
        """Emit the answer token by token: stop at the first stop sequence or when the budget is spent;
        an answer that runs out ends with an end-of-sequence token, counted as a model's is."""
        tokens = self._encode(answer, special=False)
        for n in range(1, min(len(tokens), request.max_new_tokens) + 1 if request.stop else 0):
            text, stopped = apply_stop(self._decode(tokens[:n]), request.stop)
            if stopped:
                return text, "stop", n
        if len(tokens) < request.max_new_tokens:
            return self._decode(tokens), "stop", len(tokens) + 1
        return self._decode(tokens[: request.max_new_tokens]), "length", request.max_new_tokens

    def _logprobs(self, prompts: list[str], continuations: list[str]) -> list[TokenLogprobs]:
        if self._logprob_fn is None:
            raise NotImplementedError(
                "this ScriptedBackend has no log-probabilities: pass logprobs=callable(prompt, continuation)"
            )
        out = []
        for prompt, continuation in zip(prompts, continuations, strict=True):
            self.logprob_calls.append((prompt, continuation))
            tokens = self._encode(continuation, special=False)
            values = [float(v) for v in self._logprob_fn(prompt, continuation)]
            if len(values) != len(tokens):
                raise ValueError(
                    f"the logprobs callable returned {len(values)} values for {len(tokens)} tokens"
                )
            out.append(TokenLogprobs(tuple(str(t) for t in tokens), tuple(values)))
        return out
