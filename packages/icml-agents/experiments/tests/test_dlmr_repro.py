"""The dlmr-chains testbed, its training paths and (slow tier) one tiny run of the reproduction."""

import numpy as np
import pytest
import torch

from icml_agents.dlmr import freeze
from icml_agents_experiments.dlmr import bench, repro
from icml_agents_experiments.dlmr.tasks import (
    CELLS,
    IMAGE_LEN,
    MAX_STEPS,
    Chain,
    instruction,
    make_chain,
    patch,
    result,
    result_digit,
    tag,
    tag_positions,
)
from icml_agents_experiments.dlmr.train import (
    Sizes,
    build_base,
    build_memories,
    parallel_logits,
    rollout,
    window,
)
from icml_tools.repro import run_reproduction

TINY = Sizes(hidden=32, heads=4, former_width=32, memory_sizes=(1, 2), slots=4)


def test_chains_are_consistent_with_their_operands():
    rng = np.random.default_rng(0)
    for _ in range(200):
        chain = make_chain(int(rng.integers(1, MAX_STEPS + 1)), rng)
        facts = dict(chain.facts())
        ids = chain.ids()
        assert len(ids) == IMAGE_LEN + 3 * chain.length
        assert chain.types[0] == "visual"
        for t in range(1, chain.length + 1):
            a, r, f = chain.step(t)
            assert r == tag(t) and f == result(t, chain.results[t - 1])
            assert result_digit(facts[a]) == chain.results[t - 1] or facts[a] == patch(
                a - instruction("visual", 0), chain.results[t - 1]
            )
            assert (chain.types[t - 1] == "visual") == (a < instruction("visual", 0) + CELLS)
            if chain.types[t - 1] == "reasoning":  # cites a result at least two steps back
                assert t - (a - instruction("reasoning", 1) + 1) >= 2
        assert [ids[p] for p in tag_positions(chain.length)] == [tag(t) for t in range(1, chain.length + 1)]
    with pytest.raises(ValueError, match="length"):
        make_chain(MAX_STEPS + 1, rng)


def test_the_window_hides_the_image_from_late_steps_and_full_attention_does_not():
    base = freeze(build_base(TINY, 0))
    chain = make_chain(12, np.random.default_rng(1))
    other = Chain(tuple((d + 1) % 10 for d in chain.grid), chain.operands, chain.types, chain.results)
    ids = torch.tensor([chain.ids(), other.ids()])
    last = tag_positions(12)[-1]
    with torch.no_grad():
        windowed = base(input_ids=ids).logits[:, last]
        with window(base, None):
            full = base(input_ids=ids).logits[:, last]
    assert torch.equal(windowed[0], windowed[1])  # the image is more than 16 slots back
    assert (full[0] - full[1]).abs().max() > 1e-4


@pytest.mark.parametrize("mode", ["visual", "reasoning", "both"])
def test_parallel_training_logits_equal_the_session(mode):
    base = freeze(build_base(TINY, 0))
    visual, reasoning, _ = build_memories(base, TINY, 0)
    chains = [make_chain(7, np.random.default_rng(s)) for s in range(3)]
    with torch.no_grad():
        a = parallel_logits(base, chains, mode, 2, visual, reasoning)
        b = rollout(
            base, chains, visual=visual, reasoning=reasoning, action=(mode, 2), teacher_forcing=True, layer=0
        ).logits
    assert (a - b).abs().max() <= 1e-4 * max(1.0, float(b.abs().max()))


def test_router_rollout_counts_and_teacher_forcing():
    base = freeze(build_base(TINY, 0))
    visual, reasoning, router = build_memories(base, TINY, 0)
    chains = [make_chain(5, np.random.default_rng(s)) for s in range(4)]
    with torch.no_grad():
        r = rollout(base, chains, visual=visual, reasoning=reasoning, router=router, greedy=False)
    assert torch.equal(r.tokens, router.inserted_tokens(r.index))
    assert [len(m) for m in r.modes] == [5] * 4 and r.states.shape == (4, 5, TINY.hidden)


def test_benchmark_rows():
    rows = bench.run("quick")
    assert {r["method"] for r in rows} == {
        "base",
        "visual memory",
        "reasoning memory",
        "both memories",
        "router (dlmr)",
    }
    assert all(r["to_base"] == 1.0 for r in rows if r["method"] == "base")
    assert all(r["inserted_tokens_per_answer"] == 96 for r in rows if r["method"] == "both memories")


@pytest.mark.slow
def test_reproduction_follows_the_protocol(monkeypatch):
    tiny = {
        "seeds": [0],
        "n_test": 8,
        "sizes": {
            "base_steps": 30,
            "visual_steps": 4,
            "reasoning_steps": 4,
            "router_steps": 2,
            "batch": 16,
        },
    }
    monkeypatch.setitem(repro.BUDGETS, "quick", tiny)
    monkeypatch.setattr(repro, "BOOTSTRAP", 100)
    monkeypatch.setattr(repro, "PERMUTATIONS", 100)
    result = run_reproduction("dlmr-chains", "quick", 0)
    assert result["checks"]["base_frozen_all_stages"]
    assert result["passed"] == (result["headroom"]["holds"] and all(result["checks"].values()))
    rows = {r["method"]: r for r in result["rows"]}
    assert set(repro.ARMS) <= set(rows)
    assert rows["base"]["inserted_tokens_per_question"] == 0
    assert rows["both-always"]["inserted_tokens_per_question"] == pytest.approx(8 * np.mean(repro.LENGTHS))
    assert 0 < result["trainable_fraction"]
