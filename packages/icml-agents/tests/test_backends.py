"""icml_agents.backends: one conformance suite for the three backends, the HF backend against transformers,
the response cache, the HTTP backend against a local stub, structured output and bad input."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch

from icml_agents.backends import (
    BackendError,
    BackendUnavailable,
    CachedBackend,
    HFLocalBackend,
    OpenAICompatibleBackend,
    Request,
    ResponseCache,
    ScriptedBackend,
    StructuredOutputError,
    complete_json,
    parse_json,
)

PROMPTS = ["Hello there", "The capital of France is", "a", "One two three four five six seven", "Hello there"]
WORDS = "river stone cloud maple orbit lantern copper meadow violet harbor signal ember".split()


def _script(request: Request) -> str:
    """Greedy: a fixed reply naming the prompt; sampled: words drawn with the request's own seed."""
    if request.temperature == 0:
        said = request.prompt if isinstance(request.prompt, str) else request.messages()[-1]["content"]
        return f" reply to [{said}] with some words after it"
    rng = np.random.default_rng(request.seed)
    return " " + " ".join(rng.choice(WORDS, size=20))


@pytest.fixture(params=["scripted", "hf", "http"])
def backend(request, smol_tokenizer, tiny_backend, stub_server):
    if request.param == "scripted":
        return ScriptedBackend(_script, tokenizer=smol_tokenizer)
    if request.param == "hf":
        return tiny_backend
    return OpenAICompatibleBackend(stub_server.url, "tiny", None, timeout=30, tokenizer=smol_tokenizer)


# the conformance suite ---------------------------------------------------------------------------------


def test_one_completion_per_prompt_in_order(backend):
    batched = backend.generate(PROMPTS, max_new_tokens=8)
    single = [backend.generate([p], max_new_tokens=8)[0] for p in PROMPTS]
    assert [c.text for c in batched] == [c.text for c in single]
    assert len({c.text for c in batched}) == len(set(PROMPTS))  # distinct prompts, distinct replies
    assert batched[0] == batched[-1]  # a repeated prompt, decoded greedily, repeats its reply
    assert backend.generate([], max_new_tokens=8) == []


def test_stop_sequences_are_honoured(backend):
    free = backend.generate(PROMPTS[:4], max_new_tokens=12, temperature=1.0, seed=5)
    for prompt, c in zip(PROMPTS[:4], free, strict=True):
        words = c.text.split()
        stop = " " + words[len(words) // 2]  # a word from the middle of the free-running sample
        cut = backend.generate(
            [prompt], max_new_tokens=12, temperature=1.0, seed=5, stop=[stop, "\x00never"]
        )[0]
        assert cut.finish_reason == "stop"
        assert stop not in cut.text
        assert cut.text == c.text[: c.text.find(stop)]
        assert cut.completion_tokens <= c.completion_tokens


def test_fixed_seed_reproduces_samples(backend):
    a = backend.generate(PROMPTS, max_new_tokens=8, temperature=1.0, seed=11)
    order = [2, 0, 3, 1, 4]  # shuffled, the repeated prompt's occurrences kept in order
    b = backend.generate([PROMPTS[i] for i in order], max_new_tokens=8, temperature=1.0, seed=11)
    assert [b[order.index(i)] for i in range(len(PROMPTS))] == a  # the same seed, whatever the batch
    assert backend.generate(PROMPTS[3:4], max_new_tokens=8, temperature=1.0, seed=11)[0] == a[3]
    c = backend.generate(PROMPTS, max_new_tokens=8, temperature=1.0, seed=12)
    assert [x.text for x in a] != [x.text for x in c]
    assert a[0].text != a[-1].text  # a repeated prompt gets its own sample


def test_token_counts_are_the_tokenizers(backend, smol_tokenizer):
    before = backend.usage.completion_tokens, backend.usage.prompt_tokens
    out = backend.generate(PROMPTS, max_new_tokens=6)
    for prompt, c in zip(PROMPTS, out, strict=True):
        assert c.prompt_tokens == len(smol_tokenizer(prompt)["input_ids"]) == backend.count_tokens(prompt)
        assert c.finish_reason == "length" and c.completion_tokens == 6
        if c.token_ids is not None:
            assert smol_tokenizer.decode(c.token_ids) == c.text
    assert backend.usage.completion_tokens - before[0] == 6 * len(PROMPTS)
    assert backend.usage.prompt_tokens - before[1] == sum(c.prompt_tokens for c in out)


def test_chat_renders_the_template(backend, smol_tokenizer):
    conversation = [{"role": "user", "content": "Name a colour."}]
    c = backend.chat([conversation], max_new_tokens=12)[0]
    if isinstance(backend, ScriptedBackend):
        assert "[Name a colour.]" in c.text
        assert c.prompt_tokens == backend.count_tokens("user: Name a colour.")  # the rendered conversation
    else:
        rendered = smol_tokenizer.apply_chat_template(
            conversation, add_generation_prompt=True, tokenize=False
        )
        assert c.prompt_tokens == len(smol_tokenizer(rendered, add_special_tokens=False)["input_ids"])


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"prompts": []}, None),
        ({"prompts": [""]}, "prompts[0]"),
        ({"max_new_tokens": -1}, "max_new_tokens"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"temperature": -0.5}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"seed": -3}, "seed"),
        ({"stop": [""]}, "stop"),
    ],
)
def test_bad_input_names_the_argument(backend, kwargs, name):
    call = {"prompts": ["hi"], "max_new_tokens": 4, **kwargs}
    if name is None:
        assert backend.generate(**call) == []
        return
    with pytest.raises(ValueError, match=name.replace("[", r"\[").replace("]", r"\]")):
        backend.generate(**call)


def test_bad_conversations_and_types(backend):
    with pytest.raises(TypeError, match="prompts"):
        backend.generate("a bare string")
    with pytest.raises(ValueError, match=r"conversations\[0\]\[0\]\['role'\]"):
        backend.chat([[{"role": "wizard", "content": "hi"}]])
    with pytest.raises(ValueError, match=r"conversations\[0\]"):
        backend.chat([[]])
    with pytest.raises(ValueError, match="continuations"):
        backend.logprobs(["a", "b"], ["c"])


# the HF backend against transformers -------------------------------------------------------------------


def _reference_greedy(model, tokenizer, ids: list[int], n: int) -> tuple[int, ...]:
    x = torch.tensor([ids])
    out = model.generate(
        x,
        attention_mask=torch.ones_like(x),
        do_sample=False,
        max_new_tokens=n,
        pad_token_id=tokenizer.pad_token_id,
    )
    return tuple(out[0, len(ids) :].tolist())


def test_hf_greedy_equals_transformers_generate(tiny_model, smol_tokenizer, tiny_backend):
    out = tiny_backend.generate(PROMPTS, max_new_tokens=10)
    for prompt, c in zip(PROMPTS, out, strict=True):
        ref = _reference_greedy(tiny_model, smol_tokenizer, smol_tokenizer(prompt)["input_ids"], 10)
        assert c.token_ids == ref


def _direct_logprobs(model, tokenizer, prompt: str, continuation: str) -> list[float]:
    head = tokenizer(prompt)["input_ids"]
    tail = tokenizer(continuation, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([head + tail])).logits[0].float()
    logp = torch.log_softmax(logits, -1)
    return [float(logp[len(head) + j - 1, t]) for j, t in enumerate(tail)]


def test_hf_logprobs_equal_a_direct_forward(tiny_model, smol_tokenizer, tiny_backend):
    prompts = ["The capital of France is", "a", "One two three four five six seven"]
    conts = [" Paris.", " b c d e f", " eight"]
    got = tiny_backend.logprobs(prompts, conts)
    for p, c, g in zip(prompts, conts, got, strict=True):
        ref = _direct_logprobs(tiny_model, smol_tokenizer, p, c)
        np.testing.assert_allclose(g.logprobs, ref, atol=1e-5, rtol=0)
        assert g.token_ids == tuple(smol_tokenizer(c, add_special_tokens=False)["input_ids"])


def test_hf_batched_equals_one_at_a_time(tiny_backend):
    for kwargs in ({}, {"temperature": 0.8, "top_p": 0.9, "seed": 3}):
        batched = tiny_backend.generate(PROMPTS, max_new_tokens=8, **kwargs)
        single = [tiny_backend.generate([p], max_new_tokens=8, **kwargs)[0] for p in PROMPTS]
        if "seed" in kwargs:  # a repeated prompt's second sample is its second occurrence's seed
            single[-1] = tiny_backend.generate(PROMPTS[-1:] * 2, max_new_tokens=8, **kwargs)[1]
        assert batched == single


def test_hf_chat_without_template_is_refused(tiny_model, smol_tokenizer):
    import copy

    bare = copy.deepcopy(smol_tokenizer)
    bare.chat_template = None
    with pytest.raises(ValueError, match="chat template"):
        HFLocalBackend(tiny_model, bare).chat([[{"role": "user", "content": "hi"}]])


def test_hf_text_leaves_out_an_ordinary_end_of_sequence_token(tiny_model, smol_tokenizer):
    """A generation config may list an ordinary token among its end-of-sequence ids. The text kept that
    token's text (' there') without a stop sequence and dropped it with one; now both drop it, as the
    Completion contract and vLLM do."""
    import copy

    model = copy.deepcopy(tiny_model)
    first = HFLocalBackend(model, smol_tokenizer).generate(["Hello there"], max_new_tokens=4)[0].token_ids[0]
    assert first not in smol_tokenizer.all_special_ids  # 665, ' there': an ordinary token
    model.generation_config.eos_token_id = [smol_tokenizer.eos_token_id, first]
    backend = HFLocalBackend(model, smol_tokenizer)
    plain = backend.generate(["Hello there"], max_new_tokens=8)[0]
    with_stop = backend.generate(["Hello there"], max_new_tokens=8, stop=["@@never"])[0]
    assert plain.finish_reason == "stop" and plain.token_ids == (first,)
    assert plain.text == with_stop.text == ""  # the old code: ' there' without the stop sequence


def test_hf_backend_and_its_usage_copy_and_pickle(tiny_backend):
    """The usage counter held a threading.Lock as a dataclass field: dataclasses.asdict(backend.usage),
    copy.deepcopy(backend) and pickle raised "cannot pickle '_thread.lock' object". Now the copies answer as
    the original and count on their own (each with its own lock)."""
    import copy
    import dataclasses
    import pickle

    first = tiny_backend.generate(PROMPTS[:2], max_new_tokens=4)
    prompt_tokens = sum(c.prompt_tokens for c in first)
    assert dataclasses.asdict(tiny_backend.usage) == {
        "calls": 1,
        "requests": 2,
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 8,
    }
    for clone in (copy.deepcopy(tiny_backend), pickle.loads(pickle.dumps(tiny_backend))):
        assert clone.generate(PROMPTS[:2], max_new_tokens=4) == first
        assert clone.usage.calls == 2 and tiny_backend.usage.calls == 1
        assert clone.usage._lock is not tiny_backend.usage._lock


@pytest.mark.usefixtures("one_torch_thread")
def test_hf_backend_leaves_the_models_mode_to_its_owner(smol_tokenizer):
    """The backend put the model in eval mode for good when built, and decoded and scored in whatever mode the
    model was in at call time (with dropout drawing from the global RNG once the owner trained it again).
    Now calls run in eval mode and restore every submodule's ``training`` flag, even when they raise."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(smol_tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=128,
        attention_dropout=0.5,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)  # in training mode, as its owner trains it
    model.model.norm.eval()  # a mixed mode, restored module by module
    flags = {name: m.training for name, m in model.named_modules()}
    backend = HFLocalBackend(model, smol_tokenizer, batch_size=2)
    assert {name: m.training for name, m in model.named_modules()} == flags
    in_training = []
    hook = model.register_forward_pre_hook(
        lambda *_: in_training.append(any(m.training for m in model.modules()))
    )
    samples, scores = [], []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        state = torch.get_rng_state()
        samples.append(backend.generate(PROMPTS[:2], max_new_tokens=6, temperature=1.0, seed=7))
        scores.append(backend.logprobs(["Hello there"], [" my friend"]))
        assert torch.equal(torch.get_rng_state(), state)  # no dropout draws from the global RNG
        assert {name: m.training for name, m in model.named_modules()} == flags
    hook.remove()
    assert len(in_training) == 2 * (6 + 1) and not any(in_training)
    assert samples[0] == samples[1] and scores[0] == scores[1]

    def fail(*_):
        raise RuntimeError("forward failed")

    hook = model.register_forward_pre_hook(fail)
    for call in (
        lambda: backend.generate(["Hello"], max_new_tokens=2),
        lambda: backend.logprobs(["a"], [" b"]),
    ):
        with pytest.raises(RuntimeError, match="forward failed"):
            call()
        assert {name: m.training for name, m in model.named_modules()} == flags
    hook.remove()


@pytest.mark.usefixtures("one_torch_thread")
def test_cached_hf_backend_follows_the_weights_as_they_train(smol_tokenizer):
    """``cache_id`` hashed the weights once, on first use: after the model trained, a CachedBackend served
    the earlier weights' answers (2 hits for 2 prompts; "The capital of" answered " of of of..." where the
    trained model says " friend friend..."). The id now follows the weights: in-place writes (SGD),
    fused optimizers (transformers' Trainer default, whose writes bump no version counter) and
    load_state_dict; an unrelated optimizer's step and plain calls keep it."""
    from icml_tools.assets import tiny_llama

    prompts = ["Hello there", "The capital of"]
    ids = smol_tokenizer(["Hello there friend"], return_tensors="pt").input_ids

    def sgd(model):
        torch.optim.SGD(model.parameters(), lr=5.0).step()

    def fused_adamw(model):
        torch.optim.AdamW(model.parameters(), lr=0.05, fused=True).step()

    def load(model):
        model.load_state_dict({k: v * 1.5 for k, v in model.state_dict().items()})

    for change in (sgd, fused_adamw, load):
        model = tiny_llama(vocab=len(smol_tokenizer))
        backend = HFLocalBackend(model, smol_tokenizer, batch_size=2)
        cached = CachedBackend(backend, ":memory:")
        first = cached.generate(prompts, max_new_tokens=6)
        assert cached.generate(prompts, max_new_tokens=6) == first and cached.hits == 2
        before = backend.cache_id
        other = torch.nn.Linear(2, 2)  # another model's optimizer steps: the id is kept, not recomputed
        other(torch.ones(1, 2)).sum().backward()
        torch.optim.SGD(other.parameters(), lr=1.0).step()
        assert backend.cache_id == before
        model(input_ids=ids, labels=ids).loss.backward()
        change(model)
        fresh = HFLocalBackend(model, smol_tokenizer, batch_size=2)
        assert backend.cache_id == fresh.cache_id != before, change.__name__
        again = cached.generate(prompts, max_new_tokens=6)
        assert again == fresh.generate(prompts, max_new_tokens=6) != first, change.__name__
        assert cached.hits == 2 and cached.misses == 4, change.__name__


@pytest.mark.usefixtures("one_torch_thread")
def test_cached_hf_backend_sees_writes_through_data_and_numpy(smol_tokenizer):
    """Writes through ``.data`` or NumPy bump no version counter: ``cache_id`` kept the earlier weights' hash
    and a CachedBackend served their answers (2 hits for 2 prompts, stale, for each route below). A sample of
    the values (every value of a tensor of up to 256, else 256 spread over it and one in every row of a
    matrix) is now compared on each call.
    A write missing every sampled value is the documented limit: ``rehash()`` is the way out."""
    import icml_agents.backends.hf as hf
    from icml_tools.assets import tiny_llama

    prompts = ["Hello there", "The capital of"]

    def copy_through_data(model, first):  # weight surgery: another model's weights copied in
        donor = tiny_llama(seed=7, vocab=len(smol_tokenizer))
        for p, q in zip(model.parameters(), donor.parameters(), strict=True):
            p.data.copy_(q.data)

    def scale_through_data(model, first):  # a hand-written EMA or decay step
        for p in model.parameters():
            p.data.mul_(1.5)

    def scale_through_numpy(model, first):
        for p in model.parameters():
            p.detach().numpy()[...] *= 1.5

    def one_row_through_data(model, first):  # one row of the output embedding: another token wins
        w = model.get_output_embeddings().weight
        w.data[first + 1] = 100 * w.data[first]

    for change in (copy_through_data, scale_through_data, scale_through_numpy, one_row_through_data):
        model = tiny_llama(vocab=len(smol_tokenizer))
        backend = HFLocalBackend(model, smol_tokenizer, batch_size=2)
        cached = CachedBackend(backend, ":memory:")
        first = cached.generate(prompts, max_new_tokens=6)
        before = backend.cache_id
        change(model, first[0].token_ids[0])
        fresh = HFLocalBackend(model, smol_tokenizer, batch_size=2)
        assert backend.cache_id == fresh.cache_id != before, change.__name__
        again = cached.generate(prompts, max_new_tokens=6)
        assert again == fresh.generate(prompts, max_new_tokens=6) != first, change.__name__
        assert cached.hits == 0 and cached.misses == 4, change.__name__

    # one element that no sample reads: unseen until rehash(), which hashes the weights again
    model = tiny_llama(vocab=len(smol_tokenizer))
    backend = HFLocalBackend(model, smol_tokenizer, batch_size=2)
    cached = CachedBackend(backend, ":memory:")
    first = cached.generate(prompts, max_new_tokens=6)
    before = backend.cache_id
    w = model.get_input_embeddings().weight
    row = smol_tokenizer(prompts[0])["input_ids"][0]
    read = set(hf._sample_positions(w.shape, w.device).tolist())
    col = next(c for c in range(w.shape[1]) if row * w.shape[1] + c not in read)
    w.data[row, col] = 1e4
    assert backend.cache_id == before  # the limit the docs state
    backend.rehash()
    assert backend.cache_id == HFLocalBackend(model, smol_tokenizer).cache_id != before
    again = cached.generate(prompts, max_new_tokens=6)
    assert (
        again
        == HFLocalBackend(model, smol_tokenizer, batch_size=2).generate(prompts, max_new_tokens=6)
        != first
    )
    assert cached.hits == 0 and cached.misses == 4
    named = HFLocalBackend(model, smol_tokenizer, cache_id="mine")
    named.rehash()
    assert named.cache_id == "mine"  # a given id is the caller's: kept


@pytest.mark.usefixtures("one_torch_thread")
def test_hf_from_pretrained_honours_dtype_and_torch_dtype(tiny_model, smol_tokenizer, tmp_path):
    """``torch_dtype`` (transformers' older name of ``dtype``) was dropped for float32."""
    tiny_model.save_pretrained(tmp_path)
    smol_tokenizer.save_pretrained(tmp_path)

    def dtypes(backend):
        return {p.dtype for p in backend.model.parameters()}

    assert dtypes(HFLocalBackend.from_pretrained(tmp_path)) == {torch.float32}
    for dtype in (torch.bfloat16, torch.float16):
        by_dtype = HFLocalBackend.from_pretrained(tmp_path, dtype=dtype)
        by_torch_dtype = HFLocalBackend.from_pretrained(tmp_path, torch_dtype=dtype, batch_size=2)
        assert dtypes(by_dtype) == dtypes(by_torch_dtype) == {dtype} and by_torch_dtype.batch_size == 2
        for name, tensor in tiny_model.state_dict().items():
            assert torch.equal(by_torch_dtype.model.state_dict()[name], tensor.to(dtype)), name
    with pytest.raises(ValueError, match="dtype or torch_dtype"):
        HFLocalBackend.from_pretrained(tmp_path, dtype=torch.float16, torch_dtype=torch.bfloat16)


@pytest.fixture(scope="module")
def smollm2_backend():
    from icml_tools.assets import smollm2

    model, tokenizer = smollm2()
    return HFLocalBackend(model, tokenizer, batch_size=4)


def test_smollm2_answers_and_matches_transformers(smollm2_backend):
    backend = smollm2_backend
    tokenizer = backend.tokenizer
    questions = ["What is the capital of France?", "What is 2 + 2?", "Name a primary colour."]
    conversations = [[{"role": "user", "content": q}] for q in questions]
    out = backend.chat(conversations, max_new_tokens=24)
    assert "Paris" in out[0].text
    for conversation, c in zip(conversations, out, strict=True):
        ids = tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=True)
        ids = list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
        ref = _reference_greedy(backend.model, tokenizer, ids, 24)
        cut = ref.index(2) + 1 if 2 in ref else len(ref)  # generate pads a finished row; ours stops
        assert c.token_ids == ref[:cut]
        assert c.prompt_tokens == len(ids)
    single = [backend.chat([conv], max_new_tokens=24)[0] for conv in conversations]
    assert single == out
    scored = backend.logprobs(["The capital of France is"], [" Paris."])[0]
    ref = _direct_logprobs(backend.model, tokenizer, "The capital of France is", " Paris.")
    np.testing.assert_allclose(scored.logprobs, ref, atol=1e-5, rtol=0)
    wrong = backend.logprobs(["The capital of France is"], [" Berlin."])[0]
    assert scored.total > wrong.total


# the response cache ------------------------------------------------------------------------------------


def test_cache_rerun_is_identical_with_zero_backend_calls(tmp_path, smol_tokenizer):
    path = tmp_path / "cache.sqlite"
    scripted = ScriptedBackend(
        _script, tokenizer=smol_tokenizer, logprobs=lambda p, c: [-1.5] * len(c.split())
    )
    first = CachedBackend(scripted, path)
    greedy = first.generate(PROMPTS, max_new_tokens=6)
    sampled = first.generate(PROMPTS, max_new_tokens=6, temperature=1.0, seed=4)
    chat = first.chat([[{"role": "user", "content": "hi"}]], max_new_tokens=6)
    calls = len(scripted.calls)
    assert calls == 2 * len(PROMPTS)  # the repeated greedy prompt was computed once
    first.cache.close()

    fresh = ScriptedBackend(_script, tokenizer=smol_tokenizer)
    again = CachedBackend(fresh, ResponseCache(path))  # a new process would see the same file
    assert again.generate(PROMPTS, max_new_tokens=6) == greedy
    assert again.generate(PROMPTS, max_new_tokens=6, temperature=1.0, seed=4) == sampled
    assert again.chat([[{"role": "user", "content": "hi"}]], max_new_tokens=6) == chat
    assert fresh.calls == [] and again.misses == 0 and again.hits == 2 * len(PROMPTS) + 1
    assert again.usage.completion_tokens == sum(c.completion_tokens for c in greedy + sampled + chat)
    # a changed parameter misses
    again.generate(PROMPTS[:1], max_new_tokens=7)
    assert len(fresh.calls) == 1
    # unseeded samples are never cached
    again.generate(PROMPTS[:1], max_new_tokens=6, temperature=1.0)
    again.generate(PROMPTS[:1], max_new_tokens=6, temperature=1.0)
    assert len(fresh.calls) == 3


def test_cache_round_trips_hf_completions_and_logprobs(tmp_path, tiny_backend):
    cached = CachedBackend(tiny_backend, tmp_path / "c.sqlite")
    out = cached.generate(PROMPTS, max_new_tokens=5)
    lp = cached.logprobs(PROMPTS[:2], [" x", " y z"])
    computed = tiny_backend.usage.requests
    reread = CachedBackend(tiny_backend, tmp_path / "c.sqlite")
    assert reread.generate(PROMPTS, max_new_tokens=5) == out  # token ids included
    assert reread.logprobs(PROMPTS[:2], [" x", " y z"]) == lp  # floats to the bit
    assert tiny_backend.usage.requests == computed and reread.misses == 0
    assert reread.cache_id == tiny_backend.cache_id and reread.cache_id.startswith("hf:")


_WRITER = textwrap.dedent(
    """
    import sys
    from icml_agents.backends import ResponseCache
    cache = ResponseCache(sys.argv[1])
    i = 0
    while True:
        key = f"k{i:06d}"
        cache.put(key, "writer", "generate", {"i": i}, {"text": "x" * 2000, "i": i})
        print(key, flush=True)
        i += 1
    """
)


def test_cache_survives_a_kill_mid_write(tmp_path):
    path = tmp_path / "killed.sqlite"
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    committed = []
    assert proc.stdout is not None
    while len(committed) < 300:
        committed.append(proc.stdout.readline().strip())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    committed += [line.strip() for line in proc.stdout if line.strip()]  # printed before the kill
    with ResponseCache(path) as cache:
        assert cache._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert len(cache) >= len(committed)
        for key in committed:
            assert cache.get(key)["i"] == int(key[1:])


# the HTTP backend against the local stub ---------------------------------------------------------------


def _http(stub, **kwargs) -> OpenAICompatibleBackend:
    kwargs.setdefault("timeout", 10)
    return OpenAICompatibleBackend(stub.url, "tiny", kwargs.pop("api_key_env", None), **kwargs)


def test_http_timeout_is_honoured(stub_server):
    stub_server.delay = 3.0
    backend = _http(stub_server, timeout=0.4)
    start = time.perf_counter()
    with pytest.raises(BackendUnavailable, match=r"timeout=0.4"):
        backend.generate(["hi"], max_new_tokens=2)
    assert time.perf_counter() - start < 2.0


@pytest.mark.parametrize("code", [429, 500, 503])
def test_http_retries_with_backoff_then_succeeds(stub_server, code, caplog):
    stub_server.fail = [code, code]
    backend = _http(stub_server, max_retries=2, backoff=0.1)
    start = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="icml_agents.backends"):
        out = backend.generate(["hi"], max_new_tokens=3)
    assert time.perf_counter() - start >= 0.1 + 0.2  # backoff 0.1, then 0.2
    assert len(stub_server.log) == 3 and out[0].completion_tokens == 3
    assert caplog.text.count(f"HTTP {code}") == 2


def test_http_retry_after_is_honoured_up_to_the_cap(stub_server):
    stub_server.fail, stub_server.retry_after = [429], "0.5"
    start = time.perf_counter()
    _http(stub_server, backoff=0.0, max_backoff=0.3).generate(["hi"], max_new_tokens=2)
    assert 0.3 <= time.perf_counter() - start < 2.0  # Retry-After 0.5 capped at max_backoff 0.3


def test_http_gives_up_after_the_limit(stub_server):
    stub_server.fail = [500] * 10
    with pytest.raises(BackendError, match=r"HTTP 500 after 3 attempts"):
        _http(stub_server, max_retries=2, backoff=0.01).generate(["hi"], max_new_tokens=2)
    assert len(stub_server.log) == 3
    stub_server.fail = [400]  # a client error is not retried
    stub_server.log.clear()
    with pytest.raises(BackendError, match="HTTP 400"):
        _http(stub_server, max_retries=2, backoff=0.01).generate(["hi"], max_new_tokens=2)
    assert len(stub_server.log) == 1


def test_http_malformed_json_is_a_clear_error(stub_server):
    stub_server.malformed = True
    with pytest.raises(BackendError, match="malformed JSON"):
        _http(stub_server).generate(["hi"], max_new_tokens=2)


def test_http_api_key_never_shows(stub_server, monkeypatch, caplog):
    secret = "sk-test-0123456789abcdef-never-show-me"
    monkeypatch.setenv("ICML_TEST_KEY", secret)
    backend = _http(stub_server, api_key_env="ICML_TEST_KEY", max_retries=1, backoff=0.01)
    assert backend.generate(["hi"], max_new_tokens=2)[0].completion_tokens == 2
    assert stub_server.log[-1][2]["Authorization"] == f"Bearer {secret}"  # the key was sent
    stub_server.echo_auth, stub_server.fail = True, [500, 500, 401]
    texts = [repr(backend), str(vars(backend))]
    with caplog.at_level(logging.DEBUG):
        for _ in range(2):
            with pytest.raises(BackendError) as err:
                backend.generate(["hi"], max_new_tokens=2)
            texts.append(str(err.value))
    assert "Bearer ***" in texts[-1]  # the server quoted it back; we blanked it
    for text in [*texts, caplog.text]:
        assert secret not in text


def test_http_unreachable_server_errors_within_the_timeout():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    start = time.perf_counter()
    with pytest.raises(BackendUnavailable, match="no answer within"):
        OpenAICompatibleBackend(f"http://127.0.0.1:{port}/v1", "m", None, timeout=1.0).generate(["hi"])
    assert time.perf_counter() - start < 1.5


def test_http_chat_and_logprobs_match_the_model_behind(stub_server, tiny_backend):
    backend = _http(stub_server)
    conv = [{"role": "user", "content": "Name a colour."}]
    assert (
        backend.chat([conv], max_new_tokens=5)[0].text == tiny_backend.chat([conv], max_new_tokens=5)[0].text
    )
    got = backend.logprobs(["The capital of France is"], [" Paris."])[0]
    ref = tiny_backend.logprobs(["The capital of France is"], [" Paris."])[0]
    assert got.tokens == ref.tokens
    np.testing.assert_allclose(got.logprobs, ref.logprobs, atol=1e-5)


# structured output -------------------------------------------------------------------------------------


def test_structured_output_retries_then_succeeds():
    backend = ScriptedBackend([("", ["not json at all", '{"a": 1,', 'Sure: ```json\n{"a": 1}\n```'])])
    assert complete_json(backend, "Give me a", max_retries=2) == {"a": 1}
    assert len(backend.calls) == 3
    assert "not valid" in backend.calls[1].prompt[-1][1]  # the error was shown to the model


def test_structured_output_gives_up_showing_the_last_reply():
    backend = ScriptedBackend([("", ["nope", "{still bad", '{"a": 1}'])])
    with pytest.raises(StructuredOutputError, match="still bad") as err:
        complete_json(backend, "Give me a", max_retries=1)
    assert len(backend.calls) == 2 and err.value.last_response == "{still bad" and len(err.value.errors) == 2


def test_structured_output_validation_is_retried():
    def positive(value):
        if not isinstance(value, dict) or value.get("n", 0) <= 0:
            raise ValueError("n must be positive")
        return value["n"]

    backend = ScriptedBackend([("", ['{"n": -2}', '{"n": 3}'])])
    assert complete_json(backend, "a number", validate=positive, max_retries=1) == 3
    assert "n must be positive" in backend.calls[1].prompt[-1][1]
    with pytest.raises(ValueError, match="max_retries"):
        complete_json(backend, "x", max_retries=-1)


def test_parse_json_finds_the_first_value():
    assert parse_json('The answer: {"x": [1, 2]} and more {"y": 0}') == {"x": [1, 2]}
    assert parse_json("[1, 2] {") == [1, 2]
    with pytest.raises(ValueError, match="no JSON"):
        parse_json("{not json")
    # a fence without JSON does not hide JSON elsewhere; fences come first, in order
    assert parse_json('Run ```pip install x``` first, then: {"a": 1}') == {"a": 1}
    assert parse_json('```json\n{"a": 1,}\n```\nCorrected: {"a": 2}') == {"a": 2}
    assert parse_json('{"outside": 0} ```json\n{"fenced": 1}\n```') == {"fenced": 1}


def test_hf_cache_id_covers_zero_dim_tensors_and_the_tokenizer(tiny_model, smol_tokenizer):
    import copy

    base = HFLocalBackend(tiny_model, smol_tokenizer).cache_id
    with_scalar = copy.deepcopy(tiny_model)
    with_scalar.register_buffer("logit_scale", torch.tensor(1.0))  # a 0-d tensor in the state dict
    scalar_id = HFLocalBackend(with_scalar, smol_tokenizer).cache_id
    assert scalar_id.startswith("hf:") and scalar_id != base
    # the same weights with another chat template (or vocabulary) answer differently: another id
    retemplated = copy.deepcopy(smol_tokenizer)
    retemplated.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    assert HFLocalBackend(tiny_model, retemplated).cache_id != base
    assert HFLocalBackend(tiny_model, copy.deepcopy(smol_tokenizer)).cache_id == base
