"""A backend for any server with OpenAI's HTTP API (vLLM, llama.cpp's server, Ollama, hosted APIs).

Standard library only (``urllib``). Each prompt is one request (a prompt's own seed travels with it); up to
``max_concurrency`` run at once. HTTP 408, 409, 429 and 5xx replies are retried with exponential backoff
(a ``Retry-After`` header is honoured up to ``max_backoff``), ``max_retries`` times, then raise
:class:`~icml_agents.backends.BackendError`; a server that cannot be reached, or that does not answer
within ``timeout`` seconds, raises :class:`~icml_agents.backends.BackendUnavailable` at once (no retry: a
second wait would double the time the caller asked for). The API key is read from the environment variable
``api_key_env`` at each request and never stored, logged or shown: it is removed from every error text.
"""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from icml_agents.backends.base import (
    Backend,
    BackendError,
    BackendUnavailable,
    Completion,
    Request,
    TokenLogprobs,
    apply_stop,
    check_cache_id,
)
from icml_agents.validation import check_int, check_real

logger = logging.getLogger("icml_agents.backends")
RETRIED = frozenset({408, 409, 429, 500, 502, 503, 504})


class OpenAICompatibleBackend(Backend):
    """``base_url`` is the API root, e.g. ``http://127.0.0.1:8000/v1``; ``generate`` posts to
    ``/completions``, ``chat`` to ``/chat/completions`` and ``logprobs`` to ``/completions`` with
    ``echo=True, max_tokens=0`` (the prompt's token log-probabilities; the continuation's tokens are those
    starting at or after the prompt's end, so a token spanning the boundary is left out). Token counts
    come from the server's ``usage``; :meth:`count_tokens` needs ``tokenizer`` (the model's own)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str | None = "OPENAI_API_KEY",
        *,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        max_concurrency: int = 4,
        tokenizer: Any = None,
        cache_id: str | None = None,
    ) -> None:
        super().__init__()
        parts = urllib.parse.urlsplit(base_url) if isinstance(base_url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url must be an http:// or https:// URL with a host, got {base_url!r}")
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a non-empty string (the server's model name), got {model!r}")
        if api_key_env is not None and (not isinstance(api_key_env, str) or not api_key_env):
            raise ValueError(
                f"api_key_env must be None or the name of an environment variable, got {api_key_env!r}"
            )
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        self.timeout = check_real(timeout, "timeout", "(0, 86400]")  # seconds; a day at most
        self.max_retries = check_int(max_retries, "max_retries", minimum=0)
        self.backoff = check_real(backoff, "backoff", "[0, 3600]")
        self.max_backoff = check_real(max_backoff, "max_backoff", "[0, 3600]")
        self.max_concurrency = check_int(max_concurrency, "max_concurrency", minimum=1)
        self.tokenizer = tokenizer
        self._cache_id = check_cache_id(cache_id) or f"openai:{self.base_url}:{model}"

    def __repr__(self) -> str:
        return (
            f"OpenAICompatibleBackend(base_url={self.base_url!r}, model={self.model!r}, "
            f"api_key_env={self.api_key_env!r}, timeout={self.timeout})"
        )

    def count_tokens(self, text: str) -> int:
        if self.tokenizer is None:
            raise ValueError(
                "count_tokens needs the model's tokenizer: pass tokenizer= to OpenAICompatibleBackend"
            )
        return len(self.tokenizer(text)["input_ids"])

    # HTTP -----------------------------------------------------------------------------------------
    def _key(self) -> str | None:
        if self.api_key_env is None:
            return None
        return os.environ.get(self.api_key_env) or None

    def _scrub(self, text: str) -> str:
        key = self._key()
        return text.replace(key, "***") if key else text

    def _post(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.base_url}{path}"
        body = json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"}
        key = self._key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        for attempt in range(self.max_retries + 1):
            request = urllib.request.Request(url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    raw = response.read()
                break
            except urllib.error.HTTPError as err:
                detail = self._scrub(err.read().decode("utf-8", "replace")[:500])
                if err.code not in RETRIED or attempt == self.max_retries:
                    tries = f" after {attempt + 1} attempts" if err.code in RETRIED else ""
                    raise BackendError(f"POST {url} failed with HTTP {err.code}{tries}: {detail}") from None
                wait = min(self.backoff * 2**attempt, self.max_backoff)
                retry_after = err.headers.get("Retry-After") if err.headers else None
                if retry_after is not None:
                    try:
                        wait = min(max(float(retry_after), 0.0), self.max_backoff)
                    except ValueError:
                        pass
                logger.warning(
                    "HTTP %d from %s; retry %d of %d in %.2f s",
                    err.code,
                    url,
                    attempt + 1,
                    self.max_retries,
                    wait,
                )
                time.sleep(wait)
            except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
                reason = getattr(err, "reason", err)
                raise BackendUnavailable(
                    self._scrub(f"POST {url}: no answer within timeout={self.timeout} s ({reason})")
                ) from None
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            snippet = self._scrub(raw[:200].decode("utf-8", "replace"))
            raise BackendError(f"POST {url} returned malformed JSON: {snippet!r}") from None
        if not isinstance(data, dict) or not isinstance(data.get("choices"), list) or not data["choices"]:
            raise BackendError(self._scrub(f"POST {url} returned no choices: {str(data)[:200]}"))
        return data

    # the protocol ---------------------------------------------------------------------------------
    def run(self, requests: Sequence[Request]) -> list[Completion]:
        if len(requests) == 1 or self.max_concurrency == 1:
            return [self._one(r) for r in requests]
        with ThreadPoolExecutor(min(self.max_concurrency, len(requests))) as pool:
            return list(pool.map(self._one, requests))

    def _one(self, request: Request) -> Completion:
        payload: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_new_tokens,
            "temperature": request.temperature,
            "top_p": request.top_p,
        }
        if request.stop:
            payload["stop"] = list(request.stop)
        if request.seed is not None:
            payload["seed"] = request.seed
        if request.kind == "generate":
            payload["prompt"] = request.prompt
            data = self._post("/completions", payload)
        else:
            payload["messages"] = request.messages()
            data = self._post("/chat/completions", payload)
        try:
            choice = data["choices"][0]
            text = choice["text"] if request.kind == "generate" else choice["message"]["content"]
            usage = data["usage"]
            prompt_tokens, completion_tokens = int(usage["prompt_tokens"]), int(usage["completion_tokens"])
            reason = choice.get("finish_reason")
        except (KeyError, TypeError, ValueError, IndexError) as err:
            raise BackendError(f"the server's reply lacks {err}: {str(data)[:200]}") from None
        if not isinstance(text, str):
            raise BackendError(f"the server's reply holds no text: {str(data)[:200]}")
        text, stopped = apply_stop(text, request.stop)  # a server that ignores stop sequences
        finish = "length" if reason == "length" and not stopped else "stop"
        return Completion(text, finish, prompt_tokens, completion_tokens)

    def _logprobs(self, prompts: list[str], continuations: list[str]) -> list[TokenLogprobs]:
        out = []
        for prompt, continuation in zip(prompts, continuations, strict=True):
            payload = {
                "model": self.model,
                "prompt": prompt + continuation,
                "max_tokens": 0,
                "echo": True,
                "logprobs": 0,
                "temperature": 0.0,
            }
            data = self._post("/completions", payload)
            try:
                lp = data["choices"][0]["logprobs"]
                rows = zip(lp["tokens"], lp["token_logprobs"], lp["text_offset"], strict=True)
                kept = [(tok, float(v)) for tok, v, at in rows if at >= len(prompt)]
            except (KeyError, TypeError, ValueError) as err:
                raise BackendError(f"the server's reply has no prompt log-probabilities ({err})") from None
            out.append(TokenLogprobs(tuple(t for t, _ in kept), tuple(v for _, v in kept)))
        return out
