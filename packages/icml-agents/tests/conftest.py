"""Fixtures of the backend tests: SmolLM2's tokenizer, a tiny random Llama with it, and a local stub of
OpenAI's HTTP API (on 127.0.0.1, answered by any of our backends, with failures that tests switch on)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import torch

from icml_agents.backends import Backend, HFLocalBackend


@pytest.fixture(scope="session")
def smol_tokenizer():
    from transformers import AutoTokenizer

    from icml_tools.assets import smollm2_dir

    return AutoTokenizer.from_pretrained(smollm2_dir())


@pytest.fixture(scope="session")
def tiny_model(smol_tokenizer):
    from icml_tools.assets import tiny_llama

    torch.set_num_threads(1)
    return tiny_llama(vocab=len(smol_tokenizer))


@pytest.fixture
def tiny_backend(tiny_model, smol_tokenizer):
    return HFLocalBackend(tiny_model, smol_tokenizer, batch_size=4)


class StubServer:
    """OpenAI's ``/v1/completions`` and ``/v1/chat/completions`` answered by ``backend``.

    Faults, switched on by tests: ``fail`` (HTTP codes answered before any success, one per request),
    ``delay`` (seconds before answering), ``malformed`` (a body that is not JSON), ``echo_auth`` (a failure
    body that quotes the Authorization header, as a careless server would). ``log`` holds every request's
    path, payload and headers.
    """

    def __init__(self, backend: Backend, tokenizer: Any) -> None:
        self.backend = backend
        self.tokenizer = tokenizer
        self.fail: list[int] = []
        self.retry_after: str | None = None
        self.delay = 0.0
        self.malformed = False
        self.echo_auth = False
        self.log: list[tuple[str, dict, dict]] = []
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep pytest's output clean
                pass

            def do_POST(self) -> None:
                payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with stub._lock:
                    stub.log.append((self.path, payload, dict(self.headers)))
                    code = stub.fail.pop(0) if stub.fail else 200
                time.sleep(stub.delay)
                if code != 200:
                    body = {"error": {"message": "try again"}}
                    if stub.echo_auth:
                        body["error"]["message"] = f"bad header {self.headers.get('Authorization')}"
                    self._send(code, json.dumps(body).encode())
                    return
                if stub.malformed:
                    self._send(200, b"{'choices': [oops")
                    return
                with stub._lock:
                    reply = stub.answer(self.path, payload)
                self._send(200, json.dumps(reply).encode())

            def _send(self, code: int, body: bytes) -> None:
                self.send_response(code)
                if code == 429 and stub.retry_after is not None:
                    self.send_header("Retry-After", stub.retry_after)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def answer(self, path: str, payload: dict) -> dict:
        if path == "/v1/completions" and payload.get("echo") and payload.get("max_tokens") == 0:
            return self._echo(payload["prompt"])
        params = {
            "max_new_tokens": payload["max_tokens"],
            "temperature": payload.get("temperature", 1.0),
            "top_p": payload.get("top_p", 1.0),
            "stop": payload.get("stop"),
            "seed": payload.get("seed"),
        }
        if path == "/v1/completions":
            c = self.backend.generate([payload["prompt"]], **params)[0]
            choice: dict[str, Any] = {"index": 0, "text": c.text}
        elif path == "/v1/chat/completions":
            c = self.backend.chat([payload["messages"]], **params)[0]
            choice = {"index": 0, "message": {"role": "assistant", "content": c.text}}
        else:
            raise ValueError(path)
        choice["finish_reason"] = c.finish_reason
        usage = {"prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens}
        return {"choices": [choice], "usage": usage}

    def _echo(self, text: str) -> dict:
        """The prompt's token log-probabilities (the first token has none), as OpenAI's legacy API gives."""
        enc = self.tokenizer(text, return_offsets_mapping=True)
        ids = enc["input_ids"]
        scored = self.backend.logprobs(
            [self.tokenizer.decode(ids[:1])], [text[enc["offset_mapping"][1][0] :]]
        )[0]
        tokens = self.tokenizer.convert_ids_to_tokens(ids)
        logprobs = {
            "tokens": tokens,
            "token_logprobs": [None, *scored.logprobs],
            "text_offset": [start for start, _ in enc["offset_mapping"]],
        }
        choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": "length"}
        return {"choices": [choice], "usage": {"prompt_tokens": len(ids), "completion_tokens": 0}}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub_server(tiny_backend, smol_tokenizer):
    """A stub server answered by the tiny random Llama (``stub.backend``; tests may swap it)."""
    stub = StubServer(tiny_backend, smol_tokenizer)
    yield stub
    stub.close()
