"""Model backends: one protocol for local Hugging Face models, OpenAI-compatible servers and scripted tests.

Every backend has ``generate(prompts, max_new_tokens, temperature, top_p, stop, seed)``,
``chat(conversations, ...)`` and ``logprobs(prompts, continuations)``, counts tokens in ``usage``, and can be
wrapped in :class:`CachedBackend` (an SQLite response cache) and driven by :func:`complete_json`
(structured output with validation and bounded retries).
"""

from icml_agents.backends.base import (
    Backend,
    BackendError,
    BackendUnavailable,
    Completion,
    Request,
    TokenLogprobs,
    Usage,
)
from icml_agents.backends.cache import CachedBackend, ResponseCache, request_key
from icml_agents.backends.hf import HFLocalBackend
from icml_agents.backends.openai_compat import OpenAICompatibleBackend
from icml_agents.backends.scripted import ScriptedBackend
from icml_agents.backends.structured import StructuredOutputError, complete_json, parse_json

__all__ = [
    "Backend",
    "BackendError",
    "BackendUnavailable",
    "CachedBackend",
    "Completion",
    "HFLocalBackend",
    "OpenAICompatibleBackend",
    "Request",
    "ResponseCache",
    "ScriptedBackend",
    "StructuredOutputError",
    "TokenLogprobs",
    "Usage",
    "complete_json",
    "parse_json",
    "request_key",
]
