"""Structured output: ask for JSON, validate it, and retry a bounded number of times with the error shown.

Our own design (no paper): the first JSON value in the reply is parsed (code fences and text around it are
tolerated); ``validate`` may reject it by raising ``ValueError``/``TypeError`` (a pydantic model's
``model_validate`` raises ``ValidationError``, a ``ValueError``). A rejected reply is sent back as the
assistant's turn, followed by a user turn naming the error, so that the model can correct itself; after
``max_retries`` retries :class:`StructuredOutputError` shows the last reply.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from icml_agents.backends.base import Backend, check_conversation
from icml_agents.validation import check_int

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


class StructuredOutputError(ValueError):
    """No valid JSON after the allowed retries; ``last_response`` and ``errors`` (one per attempt) say why."""

    def __init__(self, message: str, last_response: str, errors: list[str]) -> None:
        super().__init__(message)
        self.last_response = last_response
        self.errors = errors


def parse_json(text: str) -> Any:
    """The first JSON object or array in ``text``: in its code fences first, in order, then anywhere in it;
    ``ValueError`` if none."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    try:
        try:  # the whole reply first: a JSON string may itself hold a fence
            value = json.loads(text)
            if isinstance(value, (dict, list)):
                return value
        except json.JSONDecodeError:
            pass
        # each code fence's body in order, then the whole reply: a fence holding no JSON (a shell command, or
        # JSON the model corrects below it) does not hide JSON elsewhere
        decoder = json.JSONDecoder()
        for body in [m.group(1) for m in _FENCE.finditer(text)] + [text]:
            for start, char in enumerate(body):
                if char in "{[":
                    try:
                        return decoder.raw_decode(body, start)[0]
                    except json.JSONDecodeError:
                        continue
    except RecursionError:
        raise ValueError("text nests JSON too deeply to parse") from None
    raise ValueError("text (the reply) holds no JSON object or array")


def complete_json(
    backend: Backend,
    prompt: str | Sequence[Mapping[str, str]],
    *,
    validate: Callable[[Any], Any] | None = None,
    max_retries: int = 2,
    max_new_tokens: int = 256,
    temperature: float = 0.0,
    seed: int | None = None,
) -> Any:
    """Ask ``backend`` (in chat form) for JSON and return it parsed, or what ``validate`` returns for it.

    ``prompt`` is a user message or a whole conversation. At most ``1 + max_retries`` requests are made.
    """
    retries = check_int(max_retries, "max_retries", minimum=0)
    if validate is not None and not callable(validate):
        raise TypeError(f"validate must be a callable or None, got {type(validate).__name__}")
    if not isinstance(backend, Backend):
        raise TypeError(f"backend must be an icml_agents Backend, got {type(backend).__name__}")
    if isinstance(prompt, str):
        if not prompt:
            raise ValueError("prompt must be a non-empty string or a conversation, got ''")
        conversation: list[dict[str, str]] = [{"role": "user", "content": prompt}]
    else:
        conversation = [{"role": r, "content": c} for r, c in check_conversation(prompt, "prompt")]
    errors: list[str] = []
    reply = ""
    for _ in range(retries + 1):
        reply = backend.chat(
            [conversation], max_new_tokens=max_new_tokens, temperature=temperature, seed=seed
        )[0].text
        try:
            value = parse_json(reply)
            return validate(value) if validate is not None else value
        except (ValueError, TypeError) as err:
            errors.append(f"{type(err).__name__}: {err}")
        conversation = [
            *conversation,
            {"role": "assistant", "content": reply},
            {
                "role": "user",
                "content": f"That reply was not valid ({errors[-1]}). Reply with the JSON only.",
            },
        ]
    raise StructuredOutputError(
        f"no valid JSON after {retries + 1} attempts; last error {errors[-1]}; last reply {reply[:500]!r}",
        reply,
        errors,
    )
