"""A fuzz test per public API of icml_agents.dlmr, checked with :mod:`icml_tools.fuzz` against the bad-input
contract of GUIDE "Bad input": a result its check accepts, or ValueError/TypeError naming the argument; never
NaN/inf from finite input without a warning."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from transformers import MistralConfig, MistralForCausalLM

from icml_agents import dlmr
from icml_agents.dlmr import (
    Boundary,
    MemoryFormer,
    MemorySession,
    ReasoningMemory,
    Router,
    VisualMemory,
    distillation_loss,
    freeze,
    load_memories,
    parameter_hash,
    save_memories,
    token_cost_reward,
    trainable_fraction,
)
from icml_tools.fuzz import Coverage, fuzz_call, hostile

FUZZ = Coverage()
FUZZ.exempt(Boundary, "the record MemorySession.boundary returns (fuzzed through MemorySession)")

V, D, W = 40, 32, 16  # vocabulary, the base's width, the formers' width


def tiny_mistral() -> MistralForCausalLM:
    torch.manual_seed(0)
    cfg = MistralConfig(
        vocab_size=V,
        hidden_size=D,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=256,
        sliding_window=8,
        attn_implementation="eager",
    )
    return MistralForCausalLM(cfg).eval()


MODEL = freeze(tiny_mistral())
torch.manual_seed(1)
VISUAL = VisualMemory(D, D, 4, width=W, heads=2).eval()
REASONING = ReasoningMemory(D, D, 4, slots=3, width=W, heads=2).eval()
ROUTER = Router(D, sizes=(1, 3), width=W).eval()
FORMER = MemoryFormer(8, 6, 5, width=W, heads=2, target_norm=1.5).eval()
CONTEXT = torch.randn(2, 7, 8)  # (B, N, d_in)
CONTEXT_MASK = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
STATE8 = torch.randn(2, 8)
STATE = torch.randn(2, D)  # a boundary state (B, hidden)
IMAGE_HIDDEN = torch.randn(2, 5, D)
IMAGE_MASK = torch.tensor([[True] * 5, [True, True, False, False, False]])
SEGMENT = torch.randn(2, 4, D)
SLOTS = REASONING.write(REASONING.init_state(2), SEGMENT).detach()
IDS = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 15, 16]])
PROMPT_IMAGE = torch.tensor(
    [[False, True, True, True, False, False], [False, True, False, False, False, False]]
)
NOT_MODELS = st.sampled_from([None, "mistral", nn.Linear, nn.Linear(2, 2), MistralForCausalLM, 3])
NOT_MODULES = st.sampled_from([None, "x", 3, object(), nn.Linear(2, 2), FORMER, MODEL, VisualMemory])
NOT_MEMORIES = NOT_MODULES.filter(lambda m: m is not None)  # None is a valid memory: a session without it
ACTIONS = st.sampled_from(
    [
        "foo",
        "VISUAL",
        ("visual", 0),
        ("visual", 5),
        ("visual", 2.5),
        ("visual", True),
        ("visual", math.nan),
        ("both",),
        ("both", 2, 3),
        ["visual", 2],
        ("x", 1),
        ("none", 3),
        3,
        b"visual",
        object(),
        "reasoning",
        ("both", 4),
    ]
)


# Tiny tensors: one thread is far faster than two fighting other processes for the cores.
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def memory_tokens(n: int, width: int = D, batch: int = 2, at_most: bool = False):
    """The check of a memory read: ``(batch, n, width)`` finite tokens (``1..n`` tokens with ``at_most``: a
    fuzzed ``n_tokens`` may be another valid count)."""

    def check(out):
        count = 1 <= out.shape[1] <= n if at_most else out.shape[1] == n
        return out.shape[::2] == (batch, width) and count and bool(torch.isfinite(out).all())

    return check


# ---- formers --------------------------------------------------------------------------------------------------


@FUZZ.covers(MemoryFormer)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_memory_former(data):
    def build_and_call(d_in, d_out, n_tokens, width, layers, heads, target_norm):
        torch.manual_seed(0)
        f = MemoryFormer(
            d_in, d_out, n_tokens, width=width, layers=layers, heads=heads, target_norm=target_norm
        )
        with torch.no_grad():
            return n_tokens, d_out, target_norm, f(CONTEXT, CONTEXT_MASK, STATE8)

    def built(out):
        n, d_out, norm, tokens = out
        ok = tuple(tokens.shape) == (2, n, d_out) and bool(torch.isfinite(tokens).all())
        return ok and (
            norm is None or bool(torch.allclose(tokens.norm(dim=-1), torch.tensor(norm), rtol=1e-3))
        )

    fuzz_call(
        data,
        build_and_call,
        {"d_in": 8, "d_out": 6, "n_tokens": 3, "width": W, "layers": 1, "heads": 2, "target_norm": 1.5},
        check=built,
        strategies={
            "width": st.sampled_from([0, -1, 15, 2**40, 1.0, True, None, "16", 8, 48]),
            "heads": st.sampled_from([0, -1, 3, 32, 2**40, 1.0, None, 1, 4]),
            "n_tokens": hostile(3).filter(lambda v: not isinstance(v, int) or v < 200),
            "d_out": hostile(6).filter(lambda v: not isinstance(v, int) or v < 200),
            "layers": hostile(1).filter(lambda v: not isinstance(v, int) or v < 5),
        },
        related={"d_in": ["context"], "width": ["heads"], "heads": ["width"]},
    )
    k = data.draw(st.sampled_from([None, 1, 5]))
    with torch.no_grad():
        fuzz_call(
            data,
            FORMER,
            {"context": CONTEXT, "context_mask": CONTEXT_MASK, "state": STATE8, "n_tokens": k},
            check=memory_tokens(5, 6, at_most=True),
            strategies={
                "context_mask": hostile(CONTEXT_MASK)
                | st.sampled_from([None, CONTEXT_MASK.float(), torch.zeros(2, 7, dtype=torch.bool)]),
                "state": hostile(STATE8)
                | st.sampled_from([None, STATE8.double(), STATE8.half(), STATE8[:, :4]]),
                "context": hostile(CONTEXT)
                | st.sampled_from([CONTEXT.double(), CONTEXT[:, :0], 1e30 * CONTEXT]),
            },
            related={"context": ["context_mask", "state"], "state": ["context"]},
        )


@FUZZ.covers(VisualMemory)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_visual_memory(data):
    def build_and_call(hidden, embed_dim, max_tokens, width, target_norm):
        torch.manual_seed(0)
        m = VisualMemory(hidden, embed_dim, max_tokens, width=width, heads=2, target_norm=target_norm)
        with torch.no_grad():
            return max_tokens, embed_dim, m(IMAGE_HIDDEN, STATE, IMAGE_MASK)

    fuzz_call(
        data,
        build_and_call,
        {"hidden": D, "embed_dim": 12, "max_tokens": 3, "width": W, "target_norm": 2.0},
        check=lambda out: memory_tokens(out[0], out[1])(out[2]),
        strategies={
            "embed_dim": hostile(12).filter(lambda v: not isinstance(v, int) or v < 200),
            "max_tokens": hostile(3).filter(lambda v: not isinstance(v, int) or v < 200),
            "width": st.sampled_from([0, 3, 2**40, 1.0, None, 8, 32]),
        },
        related={"hidden": ["image_hidden", "context", "state"]},
    )
    with torch.no_grad():
        fuzz_call(
            data,
            VISUAL,
            {"image_hidden": IMAGE_HIDDEN, "state": STATE, "image_mask": IMAGE_MASK, "n_tokens": 2},
            check=memory_tokens(4, at_most=True),
            strategies={
                "image_mask": hostile(IMAGE_MASK) | st.sampled_from([None, IMAGE_MASK.long()]),
                "image_hidden": hostile(IMAGE_HIDDEN)
                | st.sampled_from([IMAGE_HIDDEN.bfloat16(), 1e30 * IMAGE_HIDDEN]),
            },
            related={"image_hidden": ["image_mask", "state"], "state": ["image_hidden"]},
        )


@FUZZ.covers(ReasoningMemory)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_reasoning_memory(data):
    def build_and_call(hidden, embed_dim, max_tokens, slots, width):
        torch.manual_seed(0)
        m = ReasoningMemory(hidden, embed_dim, max_tokens, slots, width=width, heads=2)
        with torch.no_grad():
            state = m.write(m.init_state(2), SEGMENT)
            return (slots, width, state), (max_tokens, embed_dim, m(state, STATE))

    fuzz_call(
        data,
        build_and_call,
        {"hidden": D, "embed_dim": 12, "max_tokens": 3, "slots": 2, "width": W},
        check=lambda out: (
            tuple(out[0][2].shape) == (2, out[0][0], out[0][1])
            and memory_tokens(out[1][0], out[1][1])(out[1][2])
        ),
        strategies={
            "embed_dim": hostile(12).filter(lambda v: not isinstance(v, int) or v < 200),
            "max_tokens": hostile(3).filter(lambda v: not isinstance(v, int) or v < 200),
            "slots": hostile(2).filter(lambda v: not isinstance(v, int) or v < 200),
            "width": st.sampled_from([0, 3, 2**40, 1.0, None, 8, 32]),
        },
        related={"hidden": ["segment_hidden", "state"]},
    )

    def write_and_read(slots, segment_hidden, segment_mask, state, n_tokens):
        with torch.no_grad():
            new = REASONING.write(slots, segment_hidden, segment_mask)
            return new, REASONING(new, state, n_tokens)

    mask = torch.tensor([[True] * 4, [False] * 4])
    fuzz_call(
        data,
        write_and_read,
        {"slots": SLOTS, "segment_hidden": SEGMENT, "segment_mask": mask, "state": STATE, "n_tokens": 3},
        check=lambda out: tuple(out[0].shape) == (2, 3, W) and memory_tokens(4, at_most=True)(out[1]),
        strategies={
            "segment_mask": hostile(mask) | st.sampled_from([None, mask.long(), torch.ones(2, 4).bool()]),
            "slots": hostile(SLOTS) | st.sampled_from([SLOTS.double(), 1e30 * SLOTS, SLOTS[:, :2]]),
        },
        related={"slots": ["segment_hidden", "state"], "segment_hidden": ["segment_mask", "slots"]},
    )


# ---- router ---------------------------------------------------------------------------------------------------


@FUZZ.covers(Router)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_router(data):
    sizes = data.draw(st.lists(st.integers(1, 64), min_size=1, max_size=4, unique=True), label="sizes")
    r = Router(D, sizes=sizes, width=4)
    assert r.actions == [("none", 0)] + [(m, s) for m in ("visual", "reasoning", "both") for s in sizes]
    assert r.inserted_tokens(torch.arange(len(r.actions))).tolist() == [
        0,
        *sizes,
        *sizes,
        *(2 * s for s in sizes),
    ]
    assert all(r.actions[r.action_index(m, s)] == (m, s) for m, s in r.actions)

    def build_and_call(hidden, sizes, width, state):
        r = Router(hidden, sizes=sizes, width=width)
        with torch.no_grad():
            return len(r.actions), r.sizes, r(state)

    fuzz_call(
        data,
        build_and_call,
        {"hidden": D, "sizes": (1, 3), "width": W, "state": STATE},
        check=lambda out: (
            out[0] == 1 + 3 * len(out[1])
            and out[2].shape[1] == out[0]  # one row per state row: a fuzzed state may have one
            and bool(torch.isfinite(out[2]).all())
        ),
        strategies={
            "sizes": hostile((1, 3))
            | st.sampled_from([(0,), (-1, 2), (2, 2), (2.0,), (True,), (1, 5000), [4, 2]]),
            "width": hostile(W).filter(lambda v: not isinstance(v, int) or v < 300),
            "state": hostile(STATE) | st.sampled_from([STATE.double(), STATE.bfloat16(), 1e30 * STATE]),
        },
        related={"hidden": ["state"], "state": ["hidden"]},
    )
    n = len(ROUTER.actions)
    fuzz_call(
        data,
        ROUTER.action_index,
        {"mode": "both", "size": 3},
        check=lambda i: isinstance(i, int) and 0 <= i < n,
        strategies={"size": hostile(3) | st.sampled_from([0, 2, 4, 3.0])},
        related={"mode": ["size"]},
    )
    index = torch.tensor([0, 2, 6])
    fuzz_call(
        data,
        ROUTER.inserted_tokens,
        {"index": index},
        check=lambda t: t.dtype == torch.long and bool(((t >= 0) & (t <= 6)).all()),
        strategies={
            "index": hostile(index) | st.sampled_from([index + n, index - 1, index.float(), [0, 1], 3, n, -1])
        },
    )
    with torch.no_grad():
        fuzz_call(
            data,
            ROUTER.sample,
            {
                "state": STATE,
                "greedy": False,
                "temperature": 0.7,
                "generator": torch.Generator().manual_seed(0),
            },
            check=lambda out: (
                out[0].dtype == torch.long
                and bool(((out[0] >= 0) & (out[0] < n)).all())
                and bool((out[1] <= 0).all())
                and bool(torch.isfinite(out[1]).all())
            ),
            strategies={
                "generator": st.sampled_from(
                    [None, "x", 3, object(), torch.Generator(), torch.Generator().manual_seed(1)]
                ),
                "temperature": hostile(0.7) | st.sampled_from([1e-30, 1e-300, 1e30]),
                "state": hostile(STATE) | st.sampled_from([1e30 * STATE, STATE.double()]),
            },
        )
        fuzz_call(
            data,
            ROUTER.gumbel,
            {"state": STATE, "tau": 0.5, "hard": True},
            check=lambda w: (
                w.shape[1] == n
                and bool(torch.isfinite(w).all())
                and torch.allclose(w.sum(-1), torch.ones(len(w)))
            ),
            strategies={"tau": hostile(0.5) | st.sampled_from([1e-30, 1e-300])},
        )


@FUZZ.covers(token_cost_reward)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_token_cost_reward(data):
    correct = data.draw(st.lists(st.floats(0, 1), min_size=1, max_size=5))
    tokens = data.draw(st.lists(st.integers(0, 64), min_size=len(correct), max_size=len(correct)))
    cost = data.draw(st.floats(0, 1))
    out = token_cost_reward(correct, tokens, cost)
    want = [c - cost * t for c, t in zip(correct, tokens, strict=True)]
    assert out.tolist() == pytest.approx(want, rel=1e-5, abs=1e-5)
    fuzz_call(
        data,
        token_cost_reward,
        {"correct": torch.tensor([1.0, 0.0, 1.0]), "tokens": torch.tensor([0, 3, 8]), "cost": 0.05},
        check=lambda r: r.shape == (3,) and r.dtype == torch.float32,
        strategies={
            "correct": hostile(torch.tensor([1.0, 0.0, 1.0]))
            | st.sampled_from([[1.0, math.nan, 0.0], "x", [None] * 3, [1e300] * 3]),
            "tokens": hostile(torch.tensor([0, 3, 8]))
            | st.sampled_from([[0, math.inf, 1], "abc", [1e300] * 3]),
            "cost": hostile(0.05) | st.sampled_from([1e300, 1e38, -1e-9]),
        },
        related={"correct": ["tokens"], "tokens": ["correct", "cost"], "cost": ["tokens"]},
    )


# ---- session --------------------------------------------------------------------------------------------------


def session(visual=VISUAL, reasoning=REASONING, router=ROUTER, **kw) -> MemorySession:
    s = MemorySession(MODEL, visual, reasoning, router, **kw)
    s.start(IDS, PROMPT_IMAGE)
    return s


@FUZZ.covers(MemorySession)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_memory_session(data):
    def build(model, visual, reasoning, router, layer):
        s = MemorySession(model, visual, reasoning, router, layer=layer)
        with torch.no_grad():
            s.start(IDS, PROMPT_IMAGE)
            s.feed(IDS[:, :2])
            b = s.boundary(("both", 3))
        return s, b

    fuzz_call(
        data,
        build,
        {"model": MODEL, "visual": VISUAL, "reasoning": REASONING, "router": ROUTER, "layer": -1},
        check=lambda out: out[1].tokens.tolist() == [6, 6] and out[0].cache_tokens.tolist() == [14, 14],
        strategies={
            "model": NOT_MODELS,
            "visual": NOT_MEMORIES
            | st.sampled_from(
                [REASONING, VisualMemory(16, D, 4), VisualMemory(D, 16, 4), VisualMemory(D, D, 2)]
            ),
            "reasoning": NOT_MEMORIES
            | st.sampled_from(
                [VISUAL, ReasoningMemory(16, D, 4), ReasoningMemory(D, 16, 4), ReasoningMemory(D, D, 2)]
            ),
            "router": NOT_MODULES | st.sampled_from([Router(16), Router(D, sizes=(8,)), None]),
            "layer": hostile(-1) | st.sampled_from([-3, -4, 2, 3, 0]),
        },
    )

    def start(ids, image_mask):
        s = MemorySession(MODEL, VISUAL, REASONING, ROUTER)
        with torch.no_grad():
            return s, s.start(ids, image_mask)

    fuzz_call(
        data,
        start,
        {"ids": IDS, "image_mask": PROMPT_IMAGE},
        check=lambda out: (
            tuple(out[1].shape) == (out[0].mask.shape[0], V) and bool(torch.isfinite(out[1]).all())
        ),
        strategies={
            "ids": hostile(IDS) | st.sampled_from([IDS + V, IDS - 6, IDS.float(), IDS[:, :0], IDS.int()]),
            "image_mask": hostile(PROMPT_IMAGE)
            | st.sampled_from([None, PROMPT_IMAGE.long(), PROMPT_IMAGE[:, :3]]),
        },
        related={"ids": ["image_mask"]},
    )

    def feed(ids):
        with torch.no_grad():
            return session().feed(ids)

    fuzz_call(
        data,
        feed,
        {"ids": IDS[:, :3]},
        check=lambda z: tuple(z.shape) == (2, V) and bool(torch.isfinite(z).all()),
        strategies={"ids": hostile(IDS[:, :3]) | st.sampled_from([IDS[:1], IDS + V, IDS.float()])},
    )

    def boundary(action, rows, greedy, generator):
        s = session()
        with torch.no_grad():
            s.feed(IDS[:, :2])
            b = s.boundary(action, rows=rows, greedy=greedy, generator=generator)
        return s, b

    def bounded(out):
        s, b = out
        counted = b.index is None or b.tokens.tolist() == ROUTER.inserted_tokens(b.index).tolist()
        return counted and (s.inserted + 8).tolist() == s.cache_tokens.tolist() and len(b.modes) == 2

    rows = torch.tensor([True, False])
    fuzz_call(
        data,
        boundary,
        {"action": ("both", 3), "rows": rows, "greedy": True, "generator": None},
        check=bounded,
        strategies={
            "action": ACTIONS | st.sampled_from([None, "none", "visual", ("reasoning", 1)]),
            "rows": hostile(rows) | st.sampled_from([None, rows.long(), torch.ones(3, dtype=torch.bool)]),
            "generator": st.sampled_from([None, "x", 3, torch.Generator().manual_seed(0)]),
        },
        related={"greedy": ["generator"]},
    )

    def decode(max_new_tokens, boundary_ids, eos_token_id, action):
        with torch.no_grad():
            s = session()
            return max_new_tokens, s.decode(max_new_tokens, boundary_ids, eos_token_id, action)

    fuzz_call(
        data,
        decode,
        {"max_new_tokens": 4, "boundary_ids": list(range(V)), "eos_token_id": 2, "action": ("visual", 1)},
        check=lambda out: (
            out[1].dtype == torch.long and out[1].shape[0] == 2 and 1 <= out[1].shape[1] <= out[0]
        ),
        strategies={
            "max_new_tokens": hostile(4).filter(lambda v: not isinstance(v, int) or v < 20),
            "boundary_ids": hostile([1, 2])
            | st.sampled_from([None, 3, [V], [-1], [1.5], torch.arange(3), range(V)]),
            "action": ACTIONS | st.sampled_from([None, "none"]),
        },
    )


# ---- training -------------------------------------------------------------------------------------------------


@FUZZ.covers(distillation_loss)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_distillation_loss(data):
    g = torch.Generator().manual_seed(0)
    s, t = torch.randn(3, 6, generator=g), torch.randn(3, 6, generator=g)
    targets = torch.tensor([1, -100, 5])

    def check(loss):
        return loss.ndim == 0 and (not bool(torch.isfinite(loss)) or float(loss) >= -1e-5)

    fuzz_call(
        data,
        distillation_loss,
        {"student_logits": s, "teacher_logits": t, "targets": targets, "ce_weight": 0.5, "temperature": 2.0},
        check=check,
        strategies={
            "targets": hostile(targets)
            | st.sampled_from(
                [None, targets + 6, targets.float(), targets - 1, torch.full((3,), -100), [1, 2, 3]]
            ),
            "temperature": hostile(2.0) | st.sampled_from([1e-30, 1e-300, 100.0, 100.5, 1e300]),
            "ce_weight": hostile(0.5) | st.sampled_from([1e300, 0.0]),
        },
        related={
            "student_logits": ["teacher_logits", "targets"],
            "teacher_logits": ["student_logits"],
            "targets": ["student_logits"],
        },
    )


@FUZZ.covers(freeze)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_freeze(data):
    fuzz_call(
        data,
        freeze,
        {"model": nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.1)).train()},
        check=lambda m: not m.training and not any(p.requires_grad for p in m.parameters()),
        strategies={"model": NOT_MODELS},
    )


@FUZZ.covers(parameter_hash)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_parameter_hash(data):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    want = parameter_hash(net)
    fuzz_call(
        data,
        parameter_hash,
        {"model": net},
        check=lambda h: h == want and len(h) == 64,
        strategies={"model": st.sampled_from([None, "net", nn.Linear, 3, net.state_dict(), [net]])},
    )
    other = data.draw(st.sampled_from([torch.bfloat16, torch.float16, torch.float64, torch.int8]))
    twin = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    twin.load_state_dict(net.state_dict())
    assert parameter_hash(twin) == want
    with torch.no_grad():
        twin[0].bias[1] = torch.nextafter(twin[0].bias[1], torch.tensor(math.inf))  # one ulp
    assert parameter_hash(twin) != want
    if other.is_floating_point:
        assert parameter_hash(nn.Linear(3, 4).to(other)) != parameter_hash(nn.Linear(3, 4))
    assert len(parameter_hash(nn.Identity())) == 64  # no tensors at all


@FUZZ.covers(trainable_fraction)
@settings(max_examples=50, deadline=None)
@given(st.data())
def test_trainable_fraction(data):
    a, b, base = nn.Linear(3, 4), nn.Linear(4, 1), nn.Linear(10, 10)
    fuzz_call(
        data,
        trainable_fraction,
        {"trainable": [a, b], "base": base},
        check=lambda f: isinstance(f, float) and 0 <= f < math.inf,
        strategies={
            "trainable": NOT_MODULES | st.sampled_from([[a, "x"], (a, None), [], {"a": a}, a, (a, b)]),
            "base": NOT_MODULES | st.sampled_from([nn.Identity(), nn.ReLU()]),
        },
        related={"trainable": ["base"], "base": ["trainable"]},
    )


# ---- saving ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("dlmr_fuzz")
    (path / "notes.txt").write_text("not a checkpoint")
    torch.save({"x": torch.zeros(2)}, path / "other.pt")
    torch.save({"visual": {"class": "Nope", "config": {}, "state": {}}}, path / "unknown.pt")
    torch.save({"router": {"class": "Router", "config": {"hidden": 8}, "state": {}}}, path / "mismatch.pt")
    (path / "folder.pt").mkdir()
    save_memories(path / "memories.pt", visual=VISUAL, reasoning=REASONING, router=ROUTER)
    return path


def same_outputs(loaded) -> bool:
    with torch.no_grad():
        return (
            sorted(loaded) == ["reasoning", "router", "visual"]
            and torch.equal(
                loaded["visual"](IMAGE_HIDDEN, STATE, IMAGE_MASK), VISUAL(IMAGE_HIDDEN, STATE, IMAGE_MASK)
            )
            and torch.equal(loaded["reasoning"](SLOTS, STATE), REASONING(SLOTS, STATE))
            and torch.equal(loaded["router"](STATE), ROUTER(STATE))
        )


@FUZZ.covers(save_memories)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_save_memories(folder, data):
    fuzz_call(
        data,
        save_memories,
        {"path": folder / "saved.pt", "visual": VISUAL, "reasoning": REASONING, "router": ROUTER},
        check=lambda p: same_outputs(load_memories(p)),
        strategies={
            "path": st.sampled_from(
                [None, 3, b"x.pt", folder, folder / "folder.pt", str(folder / "missing" / "x.pt")]
            ),
            "visual": NOT_MODULES,
            "reasoning": NOT_MODULES,
            "router": NOT_MODULES,
        },
    )
    assert not any(p.name.endswith(".tmp") for p in folder.iterdir())


@FUZZ.covers(load_memories)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_load_memories(folder, data):
    fuzz_call(
        data,
        load_memories,
        {"path": folder / "memories.pt"},
        check=same_outputs,
        strategies={
            "path": st.sampled_from(
                [
                    None,
                    3,
                    b"x",
                    folder,
                    folder / "notes.txt",
                    folder / "other.pt",
                    folder / "unknown.pt",
                    folder / "mismatch.pt",
                    folder / "folder.pt",
                    str(folder / "none.pt"),
                ]
            )
        },
    )


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(dlmr)
