"""Tests of icml_agents.dlmr: a frozen Hugging Face causal LM decoded with latent memories in its key-value
cache. Forced "none" is greedy decoding; the inserted-token counts are the tokens written into the cache; the
cached run equals one forward over the recorded embeddings and an independent forward built here (with and
without a sliding window, with padded slots); the base stays bit-identical while the formers and the router
train; saved memories load with identical outputs; the formers' prefix and mask properties; the losses
against explicit formulas; bad input names the argument."""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from transformers import MistralConfig, MistralForCausalLM

from icml_agents.dlmr import (
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
    training,
)

V, D, WINDOW = 40, 32, 8
SIZES = (1, 3)
PER_LAYER = D * D + 2 * D * 16 + D * D + 3 * D * 64 + 2 * D  # q; k and v (2 kv heads of 8); o; mlp; 2 norms
BASE_PARAMETERS = V * D + 2 * PER_LAYER + D + V * D  # embeddings, 2 layers, final norm, untied lm head
ACTIONS = Router(D, sizes=SIZES)  # the action table of the routers below
ROUTER_PARAMETERS = 2 * D + (D * 16 + 16) + (16 * 7 + 7)  # LayerNorm, Linear(32, 16), Linear(16, 1 + 3 * 2)


def tiny_mistral(seed: int = 0, window: int | None = WINDOW) -> MistralForCausalLM:
    torch.manual_seed(seed)
    cfg = MistralConfig(
        vocab_size=V,
        hidden_size=D,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=256,
        sliding_window=window,
        attn_implementation="eager",
    )
    return MistralForCausalLM(cfg).eval()


# Tiny tensors: one thread is far faster than two fighting other processes for the cores.
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def model() -> MistralForCausalLM:
    return tiny_mistral()


def memories(model, seed: int = 1, max_tokens: int = 4):
    """A visual memory, a reasoning memory and a router for ``model``, their weights moved off their
    initialisation so that every token they write is distinct."""
    torch.manual_seed(seed)
    norm = float(model.get_input_embeddings().weight.detach().norm(dim=-1).mean())
    visual = VisualMemory(D, D, max_tokens, width=16, heads=2, target_norm=norm)
    reasoning = ReasoningMemory(D, D, max_tokens, slots=3, width=16, heads=2, target_norm=norm)
    router = Router(D, sizes=SIZES, width=16)
    with torch.no_grad():
        for m in (visual, reasoning, router):
            for p in m.parameters():
                p.add_(0.3 * torch.randn_like(p))
    return visual.eval(), reasoning.eval(), router.eval()


class ScriptedRouter(Router):
    """A router whose logits at its ``k``-th call put all the mass on ``plan[k]`` (one action index per row)."""

    def __init__(self, plan, **kw):
        super().__init__(D, sizes=SIZES, width=16, **kw)
        self.plan = [torch.as_tensor(p) for p in plan]
        self.calls = 0

    def forward(self, state):
        super().forward(state)  # the checks
        want = self.plan[self.calls]
        self.calls += 1
        return 20.0 * F.one_hot(want, len(self.actions)).float()


def greedy_reference(model, prompt: torch.Tensor, n: int) -> torch.Tensor:
    """Greedy decoding without a cache: one full forward per token."""
    seq = prompt
    with torch.no_grad():
        for _ in range(n):
            seq = torch.cat([seq, model(seq).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return seq[:, prompt.shape[1] :]


def prompt_and_image(batch: int = 2, length: int = 6, seed: int = 5):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, V, (batch, length), generator=g)
    image = torch.zeros(batch, length, dtype=torch.bool)
    image[:, 1:4] = True
    if batch > 1:
        image[1, 3] = False  # rows with different image-token counts: a padded image context
    return ids, image


# ---- the base -------------------------------------------------------------------------------------------------


def test_session_runs_on_a_hf_causal_lm(model):
    visual, reasoning, router = memories(model)
    session = MemorySession(model, visual, reasoning, router)
    ids, image = prompt_and_image()
    with torch.no_grad():
        logits = session.start(ids, image)
        torch.testing.assert_close(logits, model(ids).logits[:, -1], atol=1e-5, rtol=0)
        fed = torch.tensor([[7, 8], [9, 10]])
        logits = session.feed(fed)
        torch.testing.assert_close(logits, model(torch.cat([ids, fed], 1)).logits[:, -1], atol=1e-5, rtol=0)
        b = session.boundary(("visual", 3))
        assert b.tokens.tolist() == [3, 3] and b.modes == ["visual", "visual"]
        assert b.index.tolist() == [router.action_index("visual", 3)] * 2
        assert session.image_mask.tolist() == [[True, True, True], [True, True, False]]
        # the memory changed the prediction
        assert (session.logits - model(torch.cat([ids, fed], 1)).logits[:, -1]).abs().max() > 1e-3
        first = session.logits.argmax(-1)
        out = session.decode(5, boundary_ids=range(V))  # a boundary after every token: the router decides
    assert out.shape == (2, 5) and out.dtype == torch.long and out[:, 0].tolist() == first.tolist()
    assert len(session.boundaries) == 1 + 5  # one after every generated token, the last included
    assert all(bd.index is not None and bd.logp is not None for bd in session.boundaries[1:])
    assert session.cache_tokens.tolist() == (6 + 2 + 5 + session.inserted).tolist()


def test_a_forced_boundary_index_is_on_the_session_device(fake_cuda):
    # on a faked CUDA device (the root conftest's fixture): a forced action's index was built on the CPU
    model = tiny_mistral()
    visual, reasoning, router = memories(model)
    ids, image = prompt_and_image()
    with fake_cuda():
        model, visual, reasoning, router = (m.to("cuda") for m in (model, visual, reasoning, router))
        session = MemorySession(model, visual, reasoning, router)
        session.start(ids.to("cuda"), image.to("cuda"))
        forced = session.boundary(("both", SIZES[0]))
        chosen = session.boundary()
        assert forced.index.device.type == "cuda" and chosen.index.device.type == "cuda"
        assert torch.stack([forced.index, chosen.index], 1).shape == (2, 2)


def test_layer_picks_the_hidden_states_the_memories_read(model):
    visual, _, router = memories(model)
    ids, image = prompt_and_image()
    with torch.no_grad():
        full = model(ids, output_hidden_states=True).hidden_states
        for layer in (-1, 0, 1):
            session = MemorySession(model, visual, None, router, layer=layer)
            session.start(ids, image)
            torch.testing.assert_close(session.state, full[layer][:, -1], atol=1e-5, rtol=0)
            torch.testing.assert_close(session.image_hidden[0], full[layer][0, 1:4], atol=1e-5, rtol=0)


# ---- forced "none" is greedy decoding -------------------------------------------------------------------------


@pytest.mark.parametrize("window", [WINDOW, None])
def test_forced_none_equals_greedy_decoding(window):
    model = tiny_mistral(window=window)
    ids, image = prompt_and_image()
    n = 14  # 6 + 14 positions: past the window of 8
    ref = greedy_reference(model, ids, n)
    marks = sorted(set(ref[:, :6].flatten().tolist()))[:3]  # tokens the decoding writes: boundaries happen
    visual, reasoning, _ = memories(model)
    forced = ScriptedRouter([])  # never asked: the action is forced
    session = MemorySession(model, visual, reasoning, forced)
    with torch.no_grad():
        session.start(ids, image)
        out = session.decode(n, boundary_ids=marks, action="none")
    assert out.tolist() == ref.tolist()
    assert len(session.boundaries) > 0 and forced.calls == 0
    assert all(b.tokens.tolist() == [0, 0] and b.index.tolist() == [0, 0] for b in session.boundaries)
    assert session.inserted.tolist() == [0, 0] and session.cache_tokens.tolist() == [6 + n] * 2

    # a router whose logits always pick action 0 ("none")
    visual, reasoning, router = memories(model)
    with torch.no_grad():
        router.net[-1].weight.zero_()
        router.net[-1].bias.copy_(torch.tensor([5.0] + [0.0] * (len(router.actions) - 1)))
    session = MemorySession(model, visual, reasoning, router)
    with torch.no_grad():
        session.start(ids, image)
        out = session.decode(n, boundary_ids=marks)
    assert out.tolist() == ref.tolist()
    assert len(session.boundaries) > 0
    assert all(b.index.tolist() == [0, 0] and b.modes == ["none", "none"] for b in session.boundaries)
    assert session.inserted.tolist() == [0, 0]


def test_greedy_reference_agrees_with_generate_without_eos(model):
    ids, _ = prompt_and_image()
    ref = greedy_reference(model, ids, 10)
    with torch.no_grad():
        gen = model.generate(ids, max_new_tokens=10, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert gen[:, ids.shape[1] :].tolist() == ref.tolist()


def test_decode_stops_rows_at_eos(model):
    ids, _ = prompt_and_image()
    ref = greedy_reference(model, ids, 8)
    eos = int(ref[0, 2])
    session = MemorySession(model)
    with torch.no_grad():
        session.start(ids)
        out = session.decode(8, eos_token_id=eos)
    for row in range(2):
        r = ref[row].tolist()
        stop = r.index(eos) if eos in r else None
        got = out[row].tolist()
        if stop is None:
            assert got == r[: len(got)]
        else:
            assert got[: stop + 1] == r[: stop + 1] and set(got[stop:]) == {eos}


# ---- counts -------------------------------------------------------------------------------------------------


def test_inserted_tokens_are_the_tokens_written_into_the_cache(model):
    visual, reasoning, _ = memories(model)
    a = ACTIONS.action_index
    plan = [
        [a("none"), a("visual", 3), a("both", 1)],
        [a("reasoning", 1), a("none"), a("both", 3)],
        [a("both", 3), a("visual", 1), a("reasoning", 3)],
    ]
    router = ScriptedRouter(plan)
    session = MemorySession(model, visual, reasoning, router)
    ids, image = prompt_and_image(batch=3)
    fed = 0
    slots = ids.shape[1]
    with torch.no_grad():
        session.start(ids, image)
        for step in range(5):
            session.feed(torch.full((3, step + 1), 5 + step))
            fed += step + 1
            slots += step + 1
            if step < 3:
                b = session.boundary()
                assert b.index.tolist() == plan[step]
            elif step == 3:  # forced, with rows that insert nothing
                b = session.boundary(("reasoning", 3), rows=torch.tensor([True, False, True]))
                assert b.index.tolist() == [a("reasoning", 3), 0, a("reasoning", 3)]
            else:  # forced to a size the router does not know: no index
                b = session.boundary(("visual", 2))
                assert b.index is None
            if b.index is not None:
                assert b.tokens.tolist() == router.inserted_tokens(b.index).tolist()
            slots += int(b.tokens.max())
            assert (session.inserted + ids.shape[1] + fed).tolist() == session.cache_tokens.tolist()
    assert [b.tokens.tolist() for b in session.boundaries] == [
        [0, 3, 2],
        [1, 0, 6],
        [6, 1, 3],
        [3, 0, 3],
        [2, 2, 2],
    ]
    assert session.inserted.tolist() == [12, 6, 16]
    assert session.mask.shape[1] == slots  # padded slots take cache slots, not cache tokens
    assert session.mask.shape[1] - session.cache_tokens.tolist()[1] == 20 - 6
    assert router.inserted_tokens(torch.arange(len(router.actions))).tolist() == [0, 1, 3, 1, 3, 2, 6]


# ---- the cache against recomputation --------------------------------------------------------------------------


@pytest.mark.parametrize("window", [WINDOW, None])
def test_kv_cache_reuse_equals_replay_with_padded_slots(window):
    model = tiny_mistral(window=window)
    visual, reasoning, _ = memories(model)
    a = ACTIONS.action_index
    router = ScriptedRouter(
        [[a("visual", 3), a("none"), a("both", 1)], [a("reasoning", 1), a("both", 3), a("none")]]
    )
    session = MemorySession(model, visual, reasoning, router)
    ids, image = prompt_and_image(batch=3)
    g = torch.Generator().manual_seed(0)

    def last_real_slots():
        return session.mask.shape[1] - 1 - session.mask.flip(1).argmax(1)

    recorded = []  # (each row's last real slot, the logits the cached run returned there)
    with torch.no_grad():
        session.start(ids, image)
        recorded.append((last_real_slots(), session.logits.clone()))
        for step, n in enumerate((3, 2, 4, 1, 2)):
            for _ in range(n):  # one token a call: every fed position is recorded
                session.feed(torch.randint(3, V, (3, 1), generator=g))
                recorded.append((last_real_slots(), session.logits.clone()))
            if step < 2:
                session.boundary()
            elif step == 2:
                session.boundary(("both", 2), rows=torch.tensor([False, True, True]))
            recorded.append((last_real_slots(), session.logits.clone()))  # after the memories: padded rows
        replay = session.replay()
    # past the window, with padded slots
    assert session.mask.shape[1] == 6 + 12 + 3 + 6 + 4 > 3 * WINDOW and not bool(session.mask.all())
    assert len(recorded) == 1 + 12 + 5
    rows = torch.arange(3)
    for slots, logits in recorded:
        assert (replay[rows, slots] - logits).abs().max() <= 1e-5
    assert replay.shape == (3, session.mask.shape[1], V) and bool(torch.isfinite(replay).all())


@pytest.mark.parametrize("window", [WINDOW, None])
def test_cached_run_equals_an_independent_forward(window):
    """One row, no padding: the cached run against a forward over inputs_embeds built here, the memory tokens
    computed by calling the formers on the hidden states of that forward."""
    model = tiny_mistral(window=None)
    model.config.sliding_window = window
    visual, reasoning, router = memories(model)
    session = MemorySession(model, visual, reasoning, router)
    ids, image = prompt_and_image(batch=1)
    emb = model.get_input_embeddings()
    g = torch.Generator().manual_seed(9)
    plan = [(3, ("visual", 3)), (2, ("both", 2)), (4, ("reasoning", 4)), (3, ("both", 3)), (2, None)]
    recorded = []  # (slot, the logits the cached run returned there)
    with torch.no_grad():
        recorded.append((ids.shape[1] - 1, session.start(ids, image).clone()))
        x = emb(ids)
        h = model(inputs_embeds=x, output_hidden_states=True).hidden_states[-1]
        image_hidden = h[:, 1:4]
        slots = reasoning.init_state(1)
        for n, action in plan:
            for _ in range(n):
                token = torch.randint(3, V, (1, 1), generator=g)
                x = torch.cat([x, emb(token)], dim=1)
                recorded.append((x.shape[1] - 1, session.feed(token).clone()))
            if action is None:
                continue
            session.boundary(action)
            h = model(inputs_embeds=x, output_hidden_states=True).hidden_states[-1]
            state, segment = h[:, -1], h[:, -n:]
            slots = reasoning.write(slots, segment)
            mode, size = action
            parts = []
            if mode in ("visual", "both"):
                parts.append(visual(image_hidden, state, n_tokens=size))
            if mode in ("reasoning", "both"):
                parts.append(reasoning(slots, state, n_tokens=size))
            mem = torch.cat(parts, dim=1)
            assert (session.embeds[-1] - mem).abs().max() <= 1e-5  # the session inserted these tokens
            x = torch.cat([x, mem], dim=1)
        full = model(inputs_embeds=x).logits
        replay = session.replay()
    assert x.shape[1] == 6 + 14 + 3 + 4 + 4 + 6 and session.mask.shape[1] == x.shape[1]
    assert session.cache_tokens.tolist() == [x.shape[1]] and session.inserted.tolist() == [17]
    assert (replay - full).abs().max() <= 1e-5
    assert len(recorded) == 1 + 14
    for slot, logits in recorded:
        assert (full[:, slot] - logits).abs().max() <= 1e-5
    # the window is live: the same embeddings read differently without it (or with it)
    model.config.sliding_window = WINDOW if window is None else None
    with torch.no_grad():
        assert (model(inputs_embeds=x).logits[:, -1] - full[:, -1]).abs().max() > 1e-4


def test_memories_follow_a_base_in_another_dtype():
    model = tiny_mistral().to(torch.float64)
    visual, reasoning, router = memories(tiny_mistral())  # float32 memories
    session = MemorySession(model, visual, reasoning, router)
    ids, image = prompt_and_image()
    with torch.no_grad():
        session.start(ids, image)
        session.feed(torch.tensor([[7], [8]]))
        b = session.boundary(("both", 2))
        assert session.embeds[-1].dtype == torch.float64 and b.tokens.tolist() == [4, 4]
        session.boundary()
        out = session.decode(3, boundary_ids=[7])
        replay = session.replay()
    assert out.shape == (2, 3) and bool(torch.isfinite(replay).all())


# ---- the frozen base ------------------------------------------------------------------------------------------


def test_base_stays_frozen_while_memories_train(model):
    freeze(model)
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    before = parameter_hash(model)
    visual, reasoning, router = memories(model)
    modules = [visual.train(), reasoning.train(), router.train()]
    start = [p.detach().clone() for m in modules for p in m.parameters()]
    opt = torch.optim.Adam([p for m in modules for p in m.parameters()], lr=1e-2)
    ids, image = prompt_and_image()
    teacher = torch.randn(2, V, generator=torch.Generator().manual_seed(3))
    for step in range(3):
        session = MemorySession(model, visual, reasoning, router)
        session.start(ids, image)
        session.feed(torch.tensor([[7, 8], [9, 10]]))
        forced = session.boundary(("both", 2))
        b = session.boundary(greedy=False, generator=torch.Generator().manual_seed(step))
        session.feed(torch.tensor([[11], [12]]))
        reward = token_cost_reward(torch.ones(2), b.tokens, 0.05)
        loss = distillation_loss(session.logits, teacher) - (reward * b.logp).mean()
        opt.zero_grad()
        loss.backward()
        assert forced.tokens.tolist() == [4, 4]
        for m in modules:
            assert sum(float(p.grad.abs().sum()) for p in m.parameters() if p.grad is not None) > 0
        assert all(p.grad is None for p in model.parameters())
        opt.step()
    after = [p.detach() for m in modules for p in m.parameters()]
    assert any(not torch.equal(a, b) for a, b in zip(start, after, strict=True))
    assert parameter_hash(model) == before
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight[0, 0] += 1e-3
    assert parameter_hash(model) != before


def test_parameter_hash_sees_every_tensor():
    a, b = tiny_mistral(), tiny_mistral()
    assert parameter_hash(a) == parameter_hash(b) and len(parameter_hash(a)) == 64
    assert parameter_hash(a) != parameter_hash(tiny_mistral(seed=1))
    assert parameter_hash(a) != parameter_hash(b.to(torch.float64))  # same values, another dtype
    norm = nn.BatchNorm1d(3)  # a 0-d buffer (num_batches_tracked)
    before = parameter_hash(norm)
    norm.num_batches_tracked += 1
    assert parameter_hash(norm) != before


def test_trainable_fraction_is_the_parameter_ratio(model):
    visual, reasoning, router = memories(model)
    assert sum(p.numel() for p in model.parameters()) == BASE_PARAMETERS == 21152
    assert sum(p.numel() for p in router.parameters()) == ROUTER_PARAMETERS == 711
    n_vis = sum(p.numel() for p in visual.parameters())
    n_rea = sum(p.numel() for p in reasoning.parameters())
    want = (n_vis + n_rea + ROUTER_PARAMETERS) / BASE_PARAMETERS
    assert trainable_fraction([visual, reasoning, router], model) == pytest.approx(want, rel=1e-12)
    assert trainable_fraction(router, model) == pytest.approx(711 / 21152, rel=1e-12)
    assert trainable_fraction([], model) == 0.0


# ---- saving ---------------------------------------------------------------------------------------------------


def former_inputs(seed: int = 4):
    g = torch.Generator().manual_seed(seed)
    image_hidden = torch.randn(2, 5, D, generator=g)
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    state = torch.randn(2, D, generator=g)
    segment = torch.randn(2, 4, D, generator=g)
    return image_hidden, mask, state, segment


def outputs(visual, reasoning, router):
    image_hidden, mask, state, segment = former_inputs()
    with torch.no_grad():
        slots = reasoning.write(reasoning.init_state(2), segment)
        return [
            visual(image_hidden, state, mask),
            visual(image_hidden, state, mask, n_tokens=2),
            slots,
            reasoning(slots, state),
            router(state),
        ]


def test_save_and_load_give_identical_outputs(model, tmp_path):
    visual, reasoning, router = memories(model)
    path = save_memories(tmp_path / "dlmr.pt", visual=visual, reasoning=reasoning, router=router)
    assert path == tmp_path / "dlmr.pt" and os.listdir(tmp_path) == ["dlmr.pt"]
    loaded = load_memories(path)
    assert sorted(loaded) == ["reasoning", "router", "visual"]
    assert type(loaded["visual"]) is VisualMemory and type(loaded["reasoning"]) is ReasoningMemory
    assert type(loaded["router"]) is Router and not any(m.training for m in loaded.values())
    assert loaded["reasoning"].config() == reasoning.config() and loaded["router"].sizes == SIZES
    for a, b in zip(
        outputs(visual, reasoning, router),
        outputs(loaded["visual"], loaded["reasoning"], loaded["router"]),
        strict=True,
    ):
        assert torch.equal(a, b)


def test_a_failed_save_leaves_the_file_as_it_was(model, tmp_path, monkeypatch):
    visual, reasoning, router = memories(model)
    path = save_memories(tmp_path / "dlmr.pt", visual=visual)
    before = path.read_bytes()
    broken = VisualMemory(D, D, 2, width=16, heads=2)

    def on_fire(*args, **kwargs):
        raise RuntimeError("disk on fire")

    broken.state_dict = on_fire  # a module whose state dict raises
    with pytest.raises(RuntimeError, match="disk on fire"):
        save_memories(path, router=router, visual=broken)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["dlmr.pt"]

    real_save = torch.save

    def half_then_fail(obj, f, *args, **kwargs):
        real_save({"half": torch.zeros(3)}, f)  # something written, then the failure
        raise OSError("no space left on device")

    monkeypatch.setattr(torch, "save", half_then_fail)
    with pytest.raises(OSError, match="no space"):
        save_memories(path, visual=visual, reasoning=reasoning, router=router)
    monkeypatch.undo()
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["dlmr.pt"]
    assert list(load_memories(path)) == ["visual"]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_save_and_load_keep_half_precision(model, tmp_path, dtype):
    visual, reasoning, router = (m.to(dtype) for m in memories(model))
    path = save_memories(tmp_path / "dlmr.pt", visual=visual, reasoning=reasoning, router=router)
    loaded = load_memories(path)
    for name, saved in (("visual", visual), ("reasoning", reasoning), ("router", router)):
        state, back = saved.state_dict(), loaded[name].state_dict()
        assert list(back) == list(state)
        for key, tensor in state.items():
            assert back[key].dtype == tensor.dtype == dtype and torch.equal(back[key], tensor), (name, key)


def test_files_without_a_dtype_load_in_float32(model, tmp_path):
    """Files written before the dtype was recorded hold float32 modules and still load."""
    visual, _, router = memories(model)
    path = save_memories(tmp_path / "dlmr.pt", visual=visual, router=router)
    payload = torch.load(path, weights_only=True)
    for entry in payload.values():
        assert entry.pop("dtype") == "float32"
    torch.save(payload, path)
    loaded = load_memories(path)
    for name, saved in (("visual", visual), ("router", router)):
        for key, tensor in saved.state_dict().items():
            back = loaded[name].state_dict()[key]
            assert back.dtype == torch.float32 and torch.equal(back, tensor)


def test_save_refuses_mixed_dtypes(model, tmp_path):
    visual, reasoning, _ = memories(model)
    reasoning.reader_state.to(torch.bfloat16)  # one layer in bfloat16, the rest in float32
    with pytest.raises(ValueError, match="reasoning must have its parameters in one dtype"):
        save_memories(tmp_path / "dlmr.pt", visual=visual, reasoning=reasoning)
    assert not os.listdir(tmp_path)


# ---- the formers ----------------------------------------------------------------------------------------------


def former(n_tokens: int = 5, target_norm: float | None = 2.0) -> MemoryFormer:
    torch.manual_seed(6)
    f = MemoryFormer(8, 6, n_tokens, width=16, heads=2, layers=2, target_norm=target_norm)
    with torch.no_grad():
        for p in f.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return f.eval()


@pytest.mark.parametrize("with_state", [False, True])
def test_memory_former_prefix_is_a_smaller_memory(with_state):
    f = former()
    g = torch.Generator().manual_seed(0)
    ctx, state = torch.randn(2, 7, 8, generator=g), torch.randn(2, 8, generator=g)
    state = state if with_state else None
    with torch.no_grad():
        full = f(ctx, state=state)
        assert full.shape == (2, 5, 6)
        torch.testing.assert_close(full.norm(dim=-1), torch.full((2, 5), 2.0))  # the target norm
        for k in range(1, 6):
            torch.testing.assert_close(f(ctx, state=state, n_tokens=k), full[:, :k], atol=1e-6, rtol=0)


@pytest.mark.parametrize("with_state", [False, True])
def test_memory_former_padded_context_equals_the_truncated_one(with_state):
    f = former(target_norm=None)
    g = torch.Generator().manual_seed(1)
    ctx, state = torch.randn(2, 7, 8, generator=g), torch.randn(2, 8, generator=g)
    mask = torch.ones(2, 7, dtype=torch.bool)
    mask[1, 4:] = False
    padded = ctx.clone()
    padded[1, 4:] = 1e3 * torch.randn(3, 8, generator=g)  # garbage under the mask
    with torch.no_grad():
        out = f(padded, mask, state if with_state else None)
        row0 = f(ctx[:1], state=state[:1] if with_state else None)
        row1 = f(ctx[1:, :4], state=state[1:] if with_state else None)
    torch.testing.assert_close(out[:1], row0, atol=1e-5, rtol=0)
    torch.testing.assert_close(out[1:], row1, atol=1e-5, rtol=0)


def test_context_positions_do_not_attend_to_the_queries():
    f = former()
    seen = []
    f.encoder.register_forward_hook(lambda m, i, o: seen.append(o.detach().clone()))
    g = torch.Generator().manual_seed(2)
    ctx, state = torch.randn(2, 7, 8, generator=g), torch.randn(2, 8, generator=g)
    with torch.no_grad():
        f(ctx, state=state)
        f.queries.add_(torch.randn(f.queries.shape, generator=g))
        f(ctx, state=state)
    before, after = seen
    assert torch.equal(before[:, :8], after[:, :8])  # context and state positions: unchanged
    assert (before[:, 8:] - after[:, 8:]).abs().max() > 1e-3  # the queries read them


def test_reasoning_write_keeps_rows_with_an_empty_segment():
    _, reasoning, _ = memories(tiny_mistral())
    g = torch.Generator().manual_seed(3)
    slots = torch.randn(3, 3, 16, generator=g)
    segment = torch.randn(3, 5, D, generator=g)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False
    mask[2, 2:] = False
    with torch.no_grad():
        new = reasoning.write(slots, segment, mask)
        alone = reasoning.write(slots[2:], segment[2:, :2])
    assert torch.equal(new[1], slots[1])
    assert (new[0] - slots[0]).abs().max() > 1e-3 and (new[2] - slots[2]).abs().max() > 1e-3
    torch.testing.assert_close(new[2:], alone, atol=1e-5, rtol=0)  # a padded segment: its real tokens only
    assert bool(torch.isfinite(new).all())


# ---- losses ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [1.0, 2.5])
def test_distillation_loss_is_the_kl_divergence(temperature):
    g = torch.Generator().manual_seed(0)
    s = torch.randn(4, 7, generator=g, requires_grad=True)
    t = torch.randn(4, 7, generator=g, requires_grad=True)
    want = (
        F.kl_div(
            F.log_softmax(s / temperature, -1),
            F.log_softmax(t / temperature, -1),
            log_target=True,
            reduction="batchmean",
        )
        * temperature**2
    )
    p, q = torch.softmax(t / temperature, -1), torch.softmax(s / temperature, -1)
    manual = (p * (p.log() - q.log())).sum() / 4 * temperature**2
    loss = distillation_loss(s, t, temperature=temperature)
    torch.testing.assert_close(loss, want)
    torch.testing.assert_close(loss, manual)
    assert float(loss.detach()) > 0
    loss.backward()
    assert t.grad is None and s.grad.abs().sum() > 0  # the teacher is a target
    assert distillation_loss(t, t, temperature=temperature).item() == 0.0


def test_distillation_loss_adds_the_cross_entropy():
    g = torch.Generator().manual_seed(1)
    s, t = torch.randn(4, 7, generator=g), torch.randn(4, 7, generator=g)
    targets = torch.tensor([2, -100, 6, 0])
    kl = distillation_loss(s, t)
    logp = F.log_softmax(s, -1)
    ce = -(logp[0, 2] + logp[2, 6] + logp[3, 0]) / 3
    torch.testing.assert_close(distillation_loss(s, t, targets, ce_weight=0.3), kl + 0.3 * ce)
    torch.testing.assert_close(distillation_loss(s, s, targets), ce)
    assert distillation_loss(s, t, torch.full((4,), -100)) == kl  # nothing to learn from
    assert distillation_loss(s, t, targets, ce_weight=0.0) == kl


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_distillation_loss_in_half_precision_is_computed_in_float32(dtype, temperature):
    """Half-precision logits give the float32 loss of the same (rounded) logits, in their dtype: computed
    in bfloat16, the KL of these close distributions was off by a factor of three."""
    g = torch.Generator().manual_seed(0)
    t = torch.randn(8, 4096, generator=g) * 3
    s = (t + 0.1 * torch.randn(8, 4096, generator=g)).to(dtype).requires_grad_()
    t = t.to(dtype)
    targets = torch.randint(0, 4096, (8,), generator=g)
    for tg in (None, targets):
        want = distillation_loss(s.detach().float(), t.float(), tg, temperature=temperature)
        loss = distillation_loss(s, t, tg, temperature=temperature)
        assert loss.dtype == dtype and torch.equal(loss.detach(), want.to(dtype))
        exact = distillation_loss(s.detach().double(), t.double(), tg, temperature=temperature)
        torch.testing.assert_close(loss.detach().double(), exact, rtol=1e-2, atol=0.0)
    loss.backward()
    assert s.grad is not None and s.grad.dtype == dtype and bool(torch.isfinite(s.grad).all())


def test_distillation_loss_of_near_identical_distributions_is_accurate_in_float32():
    """Teacher and student logits over 32k tokens differing by 1e-3 (1e-4) noise: the float32 loss and its
    gradient against float64 ``F.kl_div`` of the same float32 logits. ``sum p (log p - log q)`` in float32
    was up to 0.11 (42) off in value, and 1.0e-3 (1.0e-2) of the largest entry off in gradient, here."""
    g = torch.Generator().manual_seed(0)
    t = torch.randn(16, 32000, generator=g) * 3
    noise = torch.randn(16, 32000, generator=g)
    for scale in (1e-3, 1e-4):
        for temperature in (1.0, 2.0):
            s = (t + scale * noise).requires_grad_()
            loss = distillation_loss(s, t, temperature=temperature)
            loss.backward()
            exact = s.detach().double().requires_grad_()
            want = F.kl_div(
                F.log_softmax(exact / temperature, -1),
                F.log_softmax(t.double() / temperature, -1),
                log_target=True,
                reduction="batchmean",
            )
            want = want * temperature**2
            want.backward()
            rel = abs(float(loss.detach()) - float(want.detach())) / float(want.detach())
            assert rel < 1e-6  # measured at most 1.8e-7 (the float64 reference's own rounding at 1e-4)
            err = (s.grad.double() - exact.grad).abs().max() / exact.grad.abs().max()
            assert err < 5e-7  # measured at most 8.2e-8


def test_distillation_loss_gradient_and_far_apart_rows(monkeypatch):
    """gradcheck in float64 with one row per block, on rows where the student gives e^30 times the
    teacher's weight to one token (``p exp(e)`` taken in one ``exp``) and e^800 (a KL beyond float64's
    ``exp``, taken as a log-sum-exp); the float32 rows against float64."""
    monkeypatch.setattr(training, "_BLOCK", 16)  # 16 // 11: one row per block
    g = torch.Generator().manual_seed(0)
    t = torch.randn(5, 11, generator=g, dtype=torch.float64) * 2
    s = t + 1e-2 * torch.randn(5, 11, generator=g, dtype=torch.float64)
    s[1] = torch.randn(11, generator=g, dtype=torch.float64) * 3
    s[2, 3] += 30.0
    s[3, 5] += 800.0
    targets = torch.tensor([1, -100, 3, 0, 10])
    for temperature in (1.0, 2.5):
        for tg in (None, targets):
            torch.autograd.gradcheck(
                lambda x, tg=tg, temperature=temperature: distillation_loss(
                    x, t, tg, ce_weight=0.3, temperature=temperature
                ),
                (s.clone().requires_grad_(),),
            )
        for i in range(5):
            x, y = s[i : i + 1].float(), t[i : i + 1].float()
            want = F.kl_div(
                F.log_softmax(x.double() / temperature, -1),
                F.log_softmax(y.double() / temperature, -1),
                log_target=True,
                reduction="batchmean",
            )
            loss = distillation_loss(x, y, temperature=temperature)
            want = want * temperature**2
            torch.testing.assert_close(loss.double(), want, rtol=1e-6, atol=0.0)  # measured 2.6e-7
    huge = torch.full((2, 4), 0.9 * torch.finfo(torch.float32).max)
    assert distillation_loss(huge, -huge).item() == 0.0  # s - t overflows: the rows less their maxima


def test_token_cost_reward():
    out = token_cost_reward([1.0, 0.0, 1.0, 0.5], [0, 3, 8, 2], 0.05)
    torch.testing.assert_close(out, torch.tensor([1.0, -0.15, 0.6, 0.4]))
    assert token_cost_reward(torch.tensor([1, 0]), torch.tensor([4, 6]), 0.0).tolist() == [1.0, 0.0]
    assert token_cost_reward(1.0, 10, 0.01).item() == pytest.approx(0.9)
    with pytest.raises(ValueError, match="correct and tokens"):
        token_cost_reward([1.0], [1, 2], 0.1)


def test_router_sampling_and_gumbel():
    router = memories(tiny_mistral())[2]
    state = torch.randn(6, D, generator=torch.Generator().manual_seed(0))
    logits = router(state)
    index, logp = router.sample(state, greedy=True)
    assert index.tolist() == logits.argmax(-1).tolist()
    torch.testing.assert_close(logp, F.log_softmax(logits, -1).gather(1, index[:, None])[:, 0])
    index, logp = router.sample(state, temperature=2.0, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(logp, F.log_softmax(logits / 2.0, -1).gather(1, index[:, None])[:, 0])
    w = router.gumbel(state, tau=0.5)
    assert w.shape == (6, 7) and w.sum(-1).tolist() == [1.0] * 6 and set(w.flatten().tolist()) == {0.0, 1.0}
    assert router.actions[0] == ("none", 0) and router.action_index("both", 3) == 6


# ---- bad input ------------------------------------------------------------------------------------------------


def test_bad_input_names_the_argument(model):
    visual, reasoning, router = memories(model)
    with pytest.raises(ValueError, match="sizes"):
        Router(D, sizes=(0,))
    with pytest.raises(ValueError, match="sizes"):
        Router(D, sizes=())
    with pytest.raises(ValueError, match="sizes"):
        Router(D, sizes=(2, 2))
    with pytest.raises(ValueError, match="n_tokens"):
        MemoryFormer(8, 8, n_tokens=0)
    with pytest.raises(ValueError, match="max_tokens"):
        VisualMemory(D, D, max_tokens=0)
    with pytest.raises(ValueError, match="max_tokens"):
        ReasoningMemory(D, D, max_tokens=0)
    with pytest.raises(ValueError, match="width"):
        MemoryFormer(8, 8, 2, width=10, heads=4)
    with pytest.raises(ValueError, match="mode"):
        router.action_index("foo")
    with pytest.raises(ValueError, match="size"):
        router.action_index("visual", 2)
    with pytest.raises(ValueError, match="n_tokens"):
        visual(torch.randn(1, 3, D), torch.randn(1, D), n_tokens=5)
    session = MemorySession(model, visual, reasoning, router)
    with pytest.raises(RuntimeError, match="start"):
        session.feed(torch.tensor([[3]]))
    with pytest.raises(RuntimeError, match="start"):
        session.boundary("none")
    ids, image = prompt_and_image()
    with torch.no_grad():
        session.start(ids)
        with pytest.raises(ValueError, match="image_mask"):
            session.boundary("visual")
        session.start(ids, image)
        with pytest.raises(ValueError, match="action"):
            session.boundary("foo")
        with pytest.raises(ValueError, match="action"):
            session.boundary(("visual", 0))
        with pytest.raises(ValueError, match="action"):
            session.boundary(("visual", 5))  # more than the memory holds
        with pytest.raises(ValueError, match="action"):
            session.boundary(["visual", 2])
        with pytest.raises(ValueError, match="action"):
            session.decode(2, boundary_ids=range(V), action="foo")
        with pytest.raises(ValueError, match="rows"):
            session.boundary("visual", rows=torch.tensor([True]))
        with pytest.raises(ValueError, match="ids"):
            session.feed(torch.tensor([[3]]))  # one row of two
        with pytest.raises(ValueError, match="ids"):
            session.feed(torch.tensor([[3], [V]]))
        with pytest.raises(ValueError, match="image_mask"):
            session.start(ids, torch.zeros_like(image))
    no_router = MemorySession(model, visual=visual)
    no_router.start(ids, image)
    with pytest.raises(ValueError, match="action"):
        no_router.boundary()
    with pytest.raises(ValueError, match="reasoning"):
        no_router.boundary("reasoning")
    with pytest.raises(TypeError, match="router"):
        MemorySession(model, router=nn.Linear(2, 2))
    with pytest.raises(ValueError, match="layer"):
        MemorySession(model, layer=3)
    with pytest.raises(ValueError, match="cost"):
        token_cost_reward([1.0], [1], -0.1)
    with pytest.raises(ValueError, match="teacher_logits"):
        distillation_loss(torch.randn(2, 3), torch.tensor([[0.0, float("nan"), 1.0]] * 2))
    with pytest.raises(ValueError, match="temperature"):
        distillation_loss(torch.randn(2, 3), torch.randn(2, 3), temperature=0.0)
    with pytest.raises(ValueError, match="temperature"):
        distillation_loss(torch.randn(2, 3), torch.randn(2, 3), temperature=1e4)  # float32 rounding * 1e8
    with pytest.raises(ValueError, match="targets"):
        distillation_loss(torch.randn(2, 3), torch.randn(2, 3), torch.tensor([0, 3]))
    with pytest.raises(TypeError, match="targets"):
        distillation_loss(torch.randn(2, 3), torch.randn(2, 3), torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="context_mask"):  # nothing to attend to in row 1
        MemoryFormer(8, 8, 2, width=16, heads=2)(
            torch.randn(2, 3, 8), torch.tensor([[True] * 3, [False] * 3])
        )
    with pytest.raises(ValueError, match="image_hidden"):
        visual(torch.randn(2, 3, 8), torch.randn(2, D))


def test_sessions_refuse_memories_that_do_not_fit(model):
    visual, reasoning, router = memories(model)
    with pytest.raises(ValueError, match="visual"):
        MemorySession(model, VisualMemory(16, D, 4, width=16, heads=2))
    with pytest.raises(ValueError, match="reasoning"):
        MemorySession(model, None, ReasoningMemory(D, 16, 4, width=16, heads=2))
    with pytest.raises(ValueError, match="router"):
        MemorySession(model, visual, reasoning, Router(16, sizes=SIZES))
    with pytest.raises(ValueError, match=r"router.*visual"):  # the router's size 3 does not fit 2 tokens
        MemorySession(model, VisualMemory(D, D, 2, width=16, heads=2), reasoning, router)
    # a router that picks a memory the session lacks
    session = MemorySession(model, visual, None, ScriptedRouter([[ACTIONS.action_index("reasoning", 1)] * 2]))
    ids, image = prompt_and_image()
    with torch.no_grad():
        session.start(ids, image)
        with pytest.raises(ValueError, match="router chose a reasoning memory"):
            session.boundary()
