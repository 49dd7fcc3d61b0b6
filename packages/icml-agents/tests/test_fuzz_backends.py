"""The bad-input contract (GUIDE "Bad input"), one fuzz test per public API of icml_agents.backends.

Every case either returns a result its check verifies, or raises ValueError/TypeError naming the argument.
Most protocol fuzzing runs on ScriptedBackend (no model); HFLocalBackend decodes at most 4 tokens of a tiny
random Llama, and OpenAICompatibleBackend talks to the local stub server of conftest.py. The breaches the
first run of this fuzz found (each with its minimal input) were fixed; their tests stay as regressions.
"""

import json
import math
import re

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import icml_agents.backends
from icml_agents.backends import (
    Backend,
    CachedBackend,
    Completion,
    HFLocalBackend,
    OpenAICompatibleBackend,
    Request,
    ResponseCache,
    ScriptedBackend,
    StructuredOutputError,
    TokenLogprobs,
    Usage,
    complete_json,
    parse_json,
    request_key,
)
from icml_tools.fuzz import Coverage, fuzz_call, keeps_contract, rejects

FUZZ = Coverage()
FUZZ.exempt(Completion, "the result container every backend returns; it holds no logic to fuzz")
FUZZ.exempt(TokenLogprobs, "the result container of logprobs(); it holds no logic to fuzz")
FUZZ.exempt(Usage, "the token counter a backend keeps; only the library builds and updates it")
FUZZ.exempt(Request, "built by Backend.generate/chat after their validation, which the protocol fuzz covers")

FUNCTION_SCOPED = [HealthCheck.function_scoped_fixture]
PIECE = re.compile(r"\s*\S+|\s+")  # ScriptedBackend's token without a tokenizer
ANSWER = "The answer is forty two. Or so"

PROMPTS = ["hello there", "hello there", "two words"]  # a repeated prompt, as in a GRPO group
CONVERSATIONS = [
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
    [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": ""},
        {"role": "tool", "content": "x"},
    ],
]
BAD_PROMPTS = st.sampled_from(
    [None, "x", b"x", 3, {}, {"a"}, [None], [""], ["ok", 3], ["ok", ""], [b"x"], [["x"]], object()]
)
BAD_CONVERSATIONS = st.sampled_from(
    [
        None,
        "x",
        3,
        [None],
        [[]],
        ["hi"],
        [{"role": "user", "content": "hi"}],  # one conversation not wrapped in a list
        [[{"role": "user"}]],
        [[{"content": "hi"}]],
        [[{"role": "bot", "content": "hi"}]],
        [[{"role": "USER", "content": "hi"}]],
        [[{"role": "user", "content": 3}]],
        [[{"role": "user", "content": None}]],
        [[{"role": "user", "content": ""}]],
        [[("user", "hi")]],
        [[None]],
        [[{"role": [], "content": "hi"}]],
    ]
)
BAD_STOPS = st.sampled_from(["", [""], ["a", ""], [3], 3, b"x", {"a"}, [None], object(), math.nan])
BAD_BUDGETS = st.sampled_from([0, -1, True, False, 0.5, 2.0, None, "2", math.nan, math.inf, 1, 2, 4])
BAD_TEMPERATURES = st.sampled_from(  # no tiny positive values: see test_hf_tiny_temperature
    [-1.0, -1e-300, math.nan, math.inf, -math.inf, True, "0.5", None, 0.0, -0.0, 0.5, 2.0, 1e300, 3]
)


def _scripted(**kwargs):
    return ScriptedBackend([("", ANSWER)], **kwargs)


def _serving(method):
    """``method`` returning its arguments with its result, so that a check can compare them."""

    def call(**kwargs):
        return kwargs, method(**kwargs)

    call.__qualname__ = getattr(method, "__qualname__", "call")
    return call


def _completions_ok(kwargs, out, items="prompts", *, ids=False):
    assert isinstance(out, list) and len(out) == len(kwargs[items])
    budget, stop = kwargs["max_new_tokens"], kwargs["stop"]
    stops = [] if stop is None else [stop] if isinstance(stop, str) else list(stop)
    for c in out:
        assert isinstance(c, Completion) and isinstance(c.text, str)
        assert c.finish_reason in ("stop", "length") and c.prompt_tokens >= 1
        assert 1 <= c.completion_tokens <= budget
        if c.finish_reason == "length":
            assert c.completion_tokens == budget
        assert not any(s in c.text for s in stops)
        if ids:
            assert c.token_ids is not None and len(c.token_ids) == c.completion_tokens
    return True


def _valid_decoding(data):
    """Valid decoding parameters, drawn."""
    return {
        "max_new_tokens": data.draw(st.integers(1, 4), label="valid max_new_tokens"),
        "temperature": data.draw(st.sampled_from([0.0, 0.7, 1.0]), label="valid temperature"),
        "top_p": data.draw(st.sampled_from([1.0, 0.9, 0.5]), label="valid top_p"),
        "stop": data.draw(st.sampled_from([None, ".", [".", "Or"], ("two",), []]), label="valid stop"),
        "seed": data.draw(st.sampled_from([None, 0, 7, 2**63]), label="valid seed"),
    }


DECODING_STRATEGIES = {
    "max_new_tokens": BAD_BUDGETS,
    "temperature": BAD_TEMPERATURES,
    "stop": BAD_STOPS,
}


# ---- the protocol, on ScriptedBackend -------------------------------------------------------------------


@FUZZ.covers(Backend, ScriptedBackend)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_scripted_generate(data):
    backend = _scripted()
    fuzz_call(
        data,
        _serving(backend.generate),
        {"prompts": PROMPTS, **_valid_decoding(data)},
        check=lambda r: _completions_ok(*r),
        strategies={"prompts": BAD_PROMPTS, **DECODING_STRATEGIES},
    )
    assert all(isinstance(r, Request) and r.kind == "generate" for r in backend.calls)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_scripted_chat(data):
    backend = _scripted()
    fuzz_call(
        data,
        _serving(backend.chat),
        {"conversations": CONVERSATIONS, **_valid_decoding(data)},
        check=lambda r: _completions_ok(*r, items="conversations"),
        strategies={"conversations": BAD_CONVERSATIONS, **DECODING_STRATEGIES},
    )


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_scripted_logprobs(data):
    backend = _scripted(logprobs=lambda p, c: [-0.5] * len(PIECE.findall(c)))

    def check(result):
        kwargs, out = result
        assert isinstance(out, list) and len(out) == len(kwargs["prompts"])
        for lp, cont in zip(out, kwargs["continuations"], strict=True):
            assert isinstance(lp, TokenLogprobs) and "".join(lp.tokens) == cont
            assert lp.total == pytest.approx(-0.5 * len(lp.tokens))
        return True

    fuzz_call(
        data,
        _serving(backend.logprobs),
        {"prompts": ["a b", "c"], "continuations": [" d e", "f"]},
        check=check,
        related={"prompts": ["continuations"], "continuations": ["prompts"]},
        strategies={"prompts": BAD_PROMPTS, "continuations": BAD_PROMPTS},
    )


def test_scripted_protocol_results():
    backend = _scripted()
    out = backend.generate(["q"], max_new_tokens=3)
    assert (
        out[0].text == "The answer is" and out[0].finish_reason == "length" and out[0].completion_tokens == 3
    )
    out = backend.generate(["q"], max_new_tokens=64, stop=".")
    assert out[0].text == "The answer is forty two" and out[0].finish_reason == "stop"
    out = backend.generate(["q"], max_new_tokens=64)
    assert out[0].text == ANSWER and out[0].completion_tokens == len(PIECE.findall(ANSWER)) + 1  # + eos
    # a repeated prompt gets its own seed; the same call seed gives the same seeds whatever the batch
    backend.generate(["a", "a", "b"], temperature=1.0, seed=5)
    backend.generate(["b"], temperature=1.0, seed=5)
    seeds = [r.seed for r in backend.calls[-4:]]
    assert seeds[0] != seeds[1] and seeds[2] == seeds[3]
    assert backend.generate([]) == [] and backend.usage.requests == 7
    with pytest.raises(NotImplementedError):
        backend.logprobs(["a"], ["b"])


BAD_SCRIPTS = st.sampled_from(
    [
        None,
        3,
        "x",
        b"x",
        object(),
        [("a",)],
        [["a", "b"]],
        [("a", "b", "c")],
        [("a", [])],
        [("a", 3)],
        [("a", None)],
        [(3, "x")],
        [(None, "x")],
        [("a", ["x", 3])],
        {3: "x"},
        {"a": []},
        {"a": ("x", None)},
    ]
)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_scripted_backend_constructor(data):
    def check(b):
        assert isinstance(b, ScriptedBackend) and b.calls == []
        return b.cache_id.startswith("scripted:")

    script = data.draw(
        st.sampled_from(
            [
                [("hi", ["a", "b"]), (re.compile(r"\d"), "y")],
                {"hi": "a", re.compile("x"): ("b", "c")},
                lambda request: "z",
            ]
        ),
        label="valid script",
    )
    fuzz_call(
        data,
        ScriptedBackend,
        {"script": script, "name": "t"},
        check=check,
        mutate=["script"],
        strategies={"script": BAD_SCRIPTS},
    )


def test_scripted_backend_script_forms():
    b = ScriptedBackend([("hi", ["a", "b"]), (re.compile(r"\d"), "num")])
    assert [c.text for c in b.generate(["hi", "hi", "hi", "x1"])] == ["a", "b", "b", "num"]
    b = ScriptedBackend({"user: hi": "chat"})
    assert b.chat([[{"role": "user", "content": "hi"}]])[0].text == "chat"
    b = ScriptedBackend(lambda r: f"{r.max_new_tokens}")
    assert b.generate(["x"], max_new_tokens=5)[0].text == "5"
    rejects(ScriptedBackend(lambda r: 3).generate, ["x"], name="script")


def test_scripted_backend_uncallable_tokenizer():
    keeps_contract(lambda: ScriptedBackend({"": "hi"}, tokenizer=3).generate(["x"]), ["tokenizer"])


def test_scripted_backend_uncallable_logprobs():
    keeps_contract(lambda: ScriptedBackend({"": "hi"}, logprobs=3).logprobs(["x"], ["y"]), ["logprobs"])


# ---- HFLocalBackend --------------------------------------------------------------------------------------


@FUZZ.covers(HFLocalBackend)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_hf_constructor(data, tiny_model, smol_tokenizer):
    def check(b):
        assert isinstance(b, HFLocalBackend) and isinstance(b.batch_size, int) and b.batch_size >= 1
        return bool(b.eos_ids) and isinstance(b.pad_id, int)

    fuzz_call(
        data,
        HFLocalBackend,
        {"model": tiny_model, "tokenizer": smol_tokenizer, "batch_size": 2},
        check=check,
        strategies={
            "model": st.sampled_from([None, 3, "x", object(), torch.nn.Linear(2, 2), smol_tokenizer]),
            "tokenizer": st.sampled_from([None, 3, "x", object(), tiny_model, len]),
        },
    )


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_hf_generate_and_chat(data, tiny_model, smol_tokenizer):
    backend = HFLocalBackend(tiny_model, smol_tokenizer, batch_size=2)
    if data.draw(st.booleans(), label="chat"):
        method, items, bad = backend.chat, "conversations", BAD_CONVERSATIONS
        valid = {"conversations": CONVERSATIONS}
    else:
        method, items, bad = backend.generate, "prompts", BAD_PROMPTS
        valid = {"prompts": PROMPTS}
    fuzz_call(
        data,
        _serving(method),
        {**valid, **_valid_decoding(data)},
        check=lambda r: _completions_ok(*r, items=items, ids=True),
        strategies={items: bad, **DECODING_STRATEGIES},
    )


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_hf_logprobs(data, tiny_model, smol_tokenizer):
    backend = HFLocalBackend(tiny_model, smol_tokenizer, batch_size=2)

    def check(result):
        kwargs, out = result
        assert len(out) == len(kwargs["prompts"])
        for lp in out:
            assert len(lp.tokens) == len(lp.logprobs) == len(lp.token_ids) >= 1
            assert all(math.isfinite(v) and v <= 0 for v in lp.logprobs)
        return True

    fuzz_call(
        data,
        _serving(backend.logprobs),
        {"prompts": ["a b", "c", "d"], "continuations": [" d e", "f", " g"]},
        check=check,
        related={"prompts": ["continuations"], "continuations": ["prompts"]},
        strategies={"prompts": BAD_PROMPTS, "continuations": BAD_PROMPTS},
    )


def test_hf_results(tiny_model, smol_tokenizer):
    backend = HFLocalBackend(tiny_model, smol_tokenizer, batch_size=2)
    # a seeded sample does not depend on its batch; greedy decoding is deterministic
    batch = backend.generate(["a", "b c", "d"], max_new_tokens=3, temperature=1.0, seed=3)
    alone = backend.generate(["b c"], max_new_tokens=3, temperature=1.0, seed=3)
    assert batch[1].token_ids == alone[0].token_ids
    assert backend.generate(["x y"], max_new_tokens=2) == backend.generate(["x y"], max_new_tokens=2)
    assert backend.usage.calls == 4 and backend.usage.requests == 6
    assert backend.cache_id.startswith("hf:")


def test_hf_tiny_temperature(tiny_model, smol_tokenizer):
    backend = HFLocalBackend(tiny_model, smol_tokenizer, batch_size=2)
    keeps_contract(
        lambda: backend.generate(["hello"], max_new_tokens=1, temperature=1e-300, seed=1), ["temperature"]
    )


def test_hf_cache_id_not_a_string(tiny_model, smol_tokenizer):
    keeps_contract(
        lambda: HFLocalBackend(tiny_model, smol_tokenizer, cache_id=3).cache_id.upper(), ["cache_id"]
    )


# ---- OpenAICompatibleBackend -----------------------------------------------------------------------------

OPENAI_VALID = {
    "base_url": "http://127.0.0.1:9/v1",
    "model": "tiny",
    "api_key_env": "ICML_FUZZ_NO_SUCH_KEY",
    "timeout": 5.0,
    "max_retries": 2,
    "backoff": 0.1,
    "max_backoff": 1.0,
    "max_concurrency": 2,
}


@FUZZ.covers(OpenAICompatibleBackend)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_openai_constructor(data):
    def check(b):
        assert b.base_url.startswith(("http://", "https://")) and not b.base_url.endswith("/")
        assert isinstance(b.model, str) and b.model and isinstance(b.cache_id, str)
        assert b.timeout > 0 and b.backoff >= 0 and b.max_backoff >= 0
        assert isinstance(b.max_retries, int) and b.max_retries >= 0 and b.max_concurrency >= 1
        return all(math.isfinite(v) for v in (b.timeout, b.backoff, b.max_backoff))

    fuzz_call(
        data,
        OpenAICompatibleBackend,
        OPENAI_VALID,
        check=check,
        strategies={
            "base_url": st.sampled_from(
                [None, 3, "", " ", "127.0.0.1:9/v1", "ftp://x", "file:///etc", b"http://x", object()]
            ),
            "model": st.sampled_from([None, 3, "", b"x", object(), ["tiny"]]),
            "api_key_env": st.sampled_from([None, "", 3, b"X", object(), ["X"], "OTHER"]),
        },
    )


@settings(max_examples=25, deadline=None, suppress_health_check=FUNCTION_SCOPED)
@given(data=st.data())
def test_openai_generate_and_chat(data, stub_server):
    stub_server.backend = _scripted()
    backend = OpenAICompatibleBackend(stub_server.url, "tiny", None, timeout=10.0, max_concurrency=2)
    if data.draw(st.booleans(), label="chat"):
        method, items, bad, valid = backend.chat, "conversations", BAD_CONVERSATIONS, CONVERSATIONS
    else:
        method, items, bad, valid = backend.generate, "prompts", BAD_PROMPTS, PROMPTS
    fuzz_call(
        data,
        _serving(method),
        {items: valid, **_valid_decoding(data)},
        check=lambda r: _completions_ok(*r, items=items),
        strategies={items: bad, **DECODING_STRATEGIES},
    )


def test_openai_logprobs(stub_server):
    backend = OpenAICompatibleBackend(stub_server.url, "tiny", None, timeout=10.0)
    out = backend.logprobs(["Hello", "a b"], [" there world", " c"])
    assert len(out) == 2 and all(len(lp.tokens) == len(lp.logprobs) >= 1 for lp in out)
    assert all(math.isfinite(v) and v <= 0 for lp in out for v in lp.logprobs)
    rejects(backend.logprobs, ["a"], ["b", "c"], name="continuations")
    rejects(backend.logprobs, ["a"], [""], name="continuations")


def test_openai_huge_timeout(stub_server):
    keeps_contract(
        lambda: OpenAICompatibleBackend(stub_server.url, "tiny", None, timeout=1e300).generate(["x"]),
        ["timeout"],
    )


# ---- CachedBackend, ResponseCache, request_key -----------------------------------------------------------


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz_cache")


@FUZZ.covers(CachedBackend)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_cached_backend_constructor(data, cache_dir):
    def check(b):
        assert isinstance(b, CachedBackend) and isinstance(b.cache, ResponseCache)
        ok = b.cache_id == "scripted:scripted" and b.hits == b.misses == 0
        b.cache.close()
        return ok

    cache = data.draw(
        st.sampled_from([":memory:", str(cache_dir / "a" / "c.db"), cache_dir / "p.db"]), label="valid cache"
    )
    fuzz_call(
        data,
        CachedBackend,
        {"backend": _scripted(), "cache": cache},
        check=check,
        mutate=["backend"],  # a bad cache is named "path": see test_cached_backend_bad_cache
        strategies={
            "backend": st.sampled_from(
                [None, 3, "x", object(), ScriptedBackend, Completion("x", "stop", 1, 1)]
            )
        },
    )


def test_cached_backend_results():
    inner = _scripted()
    with ResponseCache(":memory:") as cache:
        b = CachedBackend(inner, cache)
        first = b.generate(["q", "r"], max_new_tokens=2)
        again = b.generate(["q", "r"], max_new_tokens=2)
        assert first == again and (b.hits, b.misses) == (2, 2) and inner.usage.requests == 2
        b.generate(["q"], max_new_tokens=2, temperature=1.0)  # unseeded sampling: never cached
        b.generate(["q"], max_new_tokens=2, temperature=1.0)
        assert b.misses == 4 and len(cache) == 2
        rejects(b.generate, ["q"], max_new_tokens=0, name="max_new_tokens")


def test_cached_backend_bad_cache():
    rejects(CachedBackend, _scripted(), 3, name="cache")


def test_cached_backend_negative_zero_temperature():
    b = CachedBackend(_scripted(), ":memory:")
    b.generate(["q"], temperature=0.0)
    b.generate(["q"], temperature=-0.0)
    assert b.hits == 1


@FUZZ.covers(ResponseCache)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_response_cache(data, cache_dir):
    def check(cache):
        try:
            assert isinstance(cache, ResponseCache)
            cache.put("k", "b", "generate", {"prompt": "x"}, {"text": "y"})
            return cache.get("k") == {"text": "y"} and cache.get("other") is None and len(cache) >= 1
        finally:
            cache.close()

    fuzz_call(
        data,
        ResponseCache,
        {"path": str(cache_dir / "r" / "cache.db")},
        check=check,
        strategies={
            "path": st.sampled_from(
                [None, 3, 0.5, b"x.db", object(), [None], ":memory:", cache_dir / "s" / "p.db"]
            )
        },
    )


@pytest.mark.parametrize("case", ["directory", "not sqlite", "parent is a file", "NUL byte"])
def test_response_cache_unusable_path(case, tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n" * 100)
    path = {
        "directory": tmp_path,
        "not sqlite": text,
        "parent is a file": text / "c.db",
        "NUL byte": str(tmp_path / "a\0b.db"),
    }[case]
    keeps_contract(lambda: ResponseCache(path).close(), ["path"])


REQUEST_JSON = Request("generate", "hello", 4, 0.0, 1.0, (".",), 7).to_json()
JSON_LEAF = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text()
)
JSON_ANY = st.recursive(
    JSON_LEAF,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(), kids, max_size=4),
    max_leaves=8,
)


@FUZZ.covers(request_key)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_request_key(data):
    def is_key(k):
        return isinstance(k, str) and re.fullmatch(r"[0-9a-f]{64}", k) is not None

    fuzz_call(
        data,
        request_key,
        {"backend_id": "scripted:t", "kind": "generate", "request": REQUEST_JSON},
        check=is_key,
        strategies={  # JSON values only: a value json cannot write breaks it (test_request_key_not_json)
            "backend_id": st.sampled_from([None, "", 3, math.nan, [], {}]),
            "kind": st.sampled_from([None, "", 3, "chat", "logprobs"]),
            "request": st.one_of(st.sampled_from([None, {}, [], "x", 3]), JSON_ANY),
        },
    )


REQUEST_FIELDS = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["generate", "chat"]),
        "prompt": st.text(min_size=1, max_size=20),
        "max_new_tokens": st.integers(1, 10**6),
        "temperature": st.floats(0, 1e6),
        "top_p": st.floats(1e-6, 1),
        "stop": st.lists(st.text(min_size=1, max_size=3), max_size=3).map(tuple),
        "seed": st.none() | st.integers(0, 2**63 - 1),
    }
)


@settings(max_examples=40, deadline=None)
@given(REQUEST_FIELDS, st.text(min_size=1, max_size=10), st.data())
def test_request_key_property(fields, backend_id, data):
    if fields["kind"] == "chat":
        fields = {**fields, "prompt": (("user", fields["prompt"]),)}
    request = Request(**fields)
    blob = request.to_json()
    key = request_key(backend_id, request.kind, blob)
    assert key == request_key(backend_id, request.kind, json.loads(json.dumps(blob)))  # equal inputs
    assert key == request_key(backend_id, request.kind, Request(**fields).to_json())
    # any one field changed gives another key
    name = data.draw(st.sampled_from(sorted(blob)), label="changed field")
    new = data.draw(JSON_ANY, label=f"new {name}")
    assume(json.dumps(new, sort_keys=True) != json.dumps(blob[name], sort_keys=True))
    assert request_key(backend_id, request.kind, {**blob, name: new}) != key
    assert request_key(backend_id + "x", request.kind, blob) != key
    assert request_key(backend_id, "logprobs", blob) != key


@pytest.mark.parametrize(
    "kwargs",
    [
        {"backend_id": object(), "kind": "generate", "request": {}},
        {"backend_id": "b", "kind": "generate", "request": {"x": object()}},
        {"backend_id": "b", "kind": "generate", "request": {1: "a", "b": 2}},
    ],
    ids=["backend_id object", "request object", "request mixed keys"],
)
def test_request_key_not_json(kwargs):
    keeps_contract(lambda: request_key(**kwargs), list(kwargs))


# ---- structured output ---------------------------------------------------------------------------------


@FUZZ.covers(parse_json)
@settings(max_examples=60, deadline=None)
@given(st.text(max_size=60) | st.text(alphabet='{}[]":,1a `json\n', max_size=40))
def test_parse_json_any_text(text):
    try:
        value = parse_json(text)
    except ValueError:
        return
    assert isinstance(value, dict | list)


# a JSON string holding ``` inside prose reads as a code fence; bare JSON with backticks has its own test
NO_TICKS = st.text(alphabet=st.characters(blacklist_characters="`"))
JSON_INNER = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), NO_TICKS
    ),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(NO_TICKS, kids, max_size=4),
    max_leaves=12,
)
JSON_TOP = st.lists(JSON_INNER, max_size=4) | st.dictionaries(NO_TICKS, JSON_INNER, max_size=4)


@settings(max_examples=40, deadline=None)
@given(JSON_TOP, st.sampled_from(["bare", "prose", "fence", "bare fence"]))
def test_parse_json_round_trip(obj, form):
    text = json.dumps(obj)
    wrapped = {
        "bare": text,
        "prose": f"Sure! Here it is: {text}\nHope that helps.",
        "fence": f"Here you go:\n```json\n{text}\n```\nAnything else?",
        "bare fence": f"```\n{text}```",
    }[form]
    assert parse_json(wrapped) == obj


@pytest.mark.parametrize("text", [None, b"[1]", 3], ids=["None", "bytes", "int"])
def test_parse_json_not_text(text):
    rejects(parse_json, text, name="text")


def test_parse_json_deep_nesting():
    with pytest.raises(ValueError):
        parse_json("[" * 1000)


def test_parse_json_backticks_in_strings():
    assert parse_json(json.dumps(["```", "```"])) == ["```", "```"]


PROMPT_FORMS = st.sampled_from(  # "" is refused; the conversations are valid
    [
        "",
        [{"role": "user", "content": "give json"}],
        ({"role": "system", "content": "x"}, {"role": "user", "content": "y"}),
    ]
)


@FUZZ.covers(complete_json)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_complete_json(data):
    backend = ScriptedBackend([("", 'Sure:{"a":1}')])  # one token: any budget holds the whole answer
    fuzz_call(
        data,
        complete_json,
        {
            "backend": backend,
            "prompt": "give json",
            "validate": None,
            "max_retries": 1,
            "max_new_tokens": 32,
            "temperature": 0.0,
            "seed": None,
        },
        check=lambda v: v == {"a": 1},
        mutate=["prompt", "validate", "max_retries", "max_new_tokens", "temperature", "seed"],
        strategies={"prompt": PROMPT_FORMS},
    )


def test_complete_json_results():
    backend = ScriptedBackend([("", ["no json here", '{"a": 2}'])])
    assert complete_json(backend, "q", validate=lambda v: v["a"]) == 2
    assert len(backend.calls) == 2 and "not valid" in backend.calls[1].prompt[-1][1]
    backend = ScriptedBackend([("", "never")])
    with pytest.raises(StructuredOutputError) as err:
        complete_json(backend, "q", max_retries=2)
    assert len(err.value.errors) == 3 and err.value.last_response == "never" and len(backend.calls) == 3
    backend = ScriptedBackend([("", '{"a": 1}')])

    def refuse(value):
        raise ValueError(f"not {value}")

    with pytest.raises(StructuredOutputError) as err:
        complete_json(backend, "q", max_retries=0, validate=refuse)
    assert err.value.errors == ["ValueError: not {'a': 1}"]


@pytest.mark.parametrize(
    ("backend", "prompt", "name"),
    [
        (3, "hi", "backend"),
        (None, "hi", "backend"),
        ("ok", 3, "prompt"),
        ("ok", [], "prompt"),
        ("ok", [None], "prompt"),
        ("ok", {"role": "user", "content": "x"}, "prompt"),
        ("ok", [{"role": "bot", "content": "x"}], "prompt"),
    ],
    ids=[
        "backend 3",
        "backend None",
        "prompt 3",
        "prompt []",
        "prompt [None]",
        "prompt dict",
        "prompt bad role",
    ],
)
def test_complete_json_unvalidated(backend, prompt, name):
    real = ScriptedBackend([("", "[1]")]) if backend == "ok" else backend
    keeps_contract(lambda: complete_json(real, prompt), [name])


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(icml_agents.backends)
