"""The causal induction toy (:mod:`icml_interp_experiments.repeats.induction`) and the ``induction-toy``
reproduction (slow: trains the toy on an empty cache)."""

from __future__ import annotations

import pytest
import torch

from icml_interp_experiments.repeats import induction as ind

TINY = ind.ToyConfig(seed=3, steps=3, batch=4, log_every=1, monitor=4)
REV2 = ind.ToyConfig(seed=3, steps=3, batch=4, log_every=1, monitor=4, n_heads=4, last_layer_heads=1)


def test_repeated_sequences_layout():
    ids = ind.repeated_sequences(16, torch.Generator().manual_seed(0))
    assert ids.shape == (16, ind.SEQ) == (16, 65) and ids.dtype == torch.long
    assert (ids[:, 0] == ind.BOS).all()
    assert torch.equal(ids[:, 1 : 1 + ind.HALF], ids[:, 1 + ind.HALF :])
    assert 0 <= int(ids[:, 1:].min()) and int(ids[:, 1:].max()) < ind.VOCAB
    assert torch.equal(ind.held_out(4, 7), ind.held_out(4, 7)) and not torch.equal(
        ind.held_out(4, 7), ind.held_out(4, 8)
    )


def test_training_sequences_vary_the_period_behind_a_prefix():
    ids = ind.training_sequences(200, torch.Generator().manual_seed(1), min_half=8)
    assert ids.shape == (200, ind.SEQ) and (ids[:, 0] == ind.BOS).all()
    assert 0 <= int(ids[:, 1:].min()) and int(ids[:, 1:].max()) < ind.VOCAB
    body = ids[:, 1:]
    periods = []
    for row in body:
        fits = [t for t in range(8, ind.HALF + 1) if torch.equal(row[64 - 2 * t : 64 - t], row[64 - t :])]
        assert fits  # the row ends in two copies of some period t in 8..32
        periods.append(max(fits))
    assert min(periods) <= 12 and max(periods) == ind.HALF and len(set(periods)) > 15
    with pytest.raises(ValueError, match="min_half"):
        ind.training_sequences(2, torch.Generator(), min_half=0)


def test_split_halves_takes_targets_r2_to_rT_of_each_copy():
    losses = torch.arange(ind.SEQ - 1, dtype=torch.float32).expand(3, -1)  # column j predicts position j + 1
    first, second = ind.split_halves(losses)
    assert first == pytest.approx(sum(range(1, 32)) / 31)  # targets at positions 2..32
    assert second == pytest.approx(sum(range(33, 64)) / 31)  # targets at positions 34..64
    logits = torch.zeros(2, ind.SEQ, ind.VOCAB + 1)
    uniform = ind.token_losses(logits, ind.held_out(2, 0))
    assert torch.allclose(uniform, torch.full_like(uniform, float(torch.log(torch.tensor(65.0)))))


def test_the_model_is_attention_only_and_stays_so_under_training():
    model, info = ind.train(TINY, progress=False)
    assert model.config.tie_word_embeddings is False and model.config.vocab_size == ind.VOCAB + 1
    for layer in model.model.layers:
        assert not layer.mlp.down_proj.weight.requires_grad
        assert bool((layer.mlp.down_proj.weight == 0).all())
    outs = ind.mlp_outputs(model, ind.held_out(4, 1))
    assert len(outs) == 2 and all(bool((o == 0).all()) for o in outs)
    log = info["log"]
    assert log["step"] == [0, 1, 2, 3] and len(log["first_half"]) == len(log["second_half"]) == 4
    trained = [p for p in model.parameters() if p.requires_grad]
    assert sum(p.numel() for p in trained) < sum(p.numel() for p in model.parameters())
    assert TINY.live_heads(0) == TINY.live_heads(1) == [0] and TINY.silenced_heads() == []


def test_silenced_heads_stay_exactly_zero_under_training():
    # revision 2: the last layer's heads 1..3 start at zero and stay exactly zero; the live head moves
    model, _ = ind.train(REV2, progress=False)
    assert (
        REV2.live_heads(0) == [0, 1, 2, 3]
        and REV2.live_heads(1) == [0]
        and REV2.silenced_heads() == [1, 2, 3]
    )
    assert [ind.silenced(model, 1, h) for h in range(4)] == [False, True, True, True]
    assert not any(ind.silenced(model, 0, h) for h in range(4))
    fresh = ind.build_model(REV2)
    live = model.model.layers[1].self_attn.o_proj.weight[:, :16]
    assert not torch.equal(live, fresh.model.layers[1].self_attn.o_proj.weight[:, :16])


def test_silence_heads_zeroes_exactly_one_head_and_load_checks_it(tmp_path):
    model = ind.build_model(ind.ToyConfig(seed=0, n_heads=4))
    assert not any(ind.silenced(model, 1, h) for h in range(4))
    ind.silence_heads(model, 0, [2])
    assert [ind.silenced(model, 0, h) for h in range(4)] == [False, False, True, False]
    attn = model.model.layers[0].self_attn
    assert bool(attn.q_proj.weight[32:48].eq(0).all()) and bool(attn.o_proj.weight[:, 32:48].eq(0).all())
    assert bool(attn.q_proj.weight[16:32].ne(0).any()) and bool(attn.o_proj.weight[:, 48:].ne(0).any())
    # the silenced head's output is zero: its hook_z vanishes, the others do not
    from icml_interp.hooks import act_name, wrap

    _, cache = wrap(model).run_with_cache(ind.held_out(2, 0), [act_name("z", 0)])
    z = cache[act_name("z", 0)]  # (batch, pos, heads, d_head)
    assert bool((z[:, :, 2] == 0).all()) and bool(z[:, :, 1].ne(0).any())
    model.save_pretrained(tmp_path / "unsilenced")
    with pytest.raises(ValueError, match="head 1 of layer 1 should be silenced"):
        ind.load(tmp_path / "unsilenced", REV2)
    assert isinstance(ind.load(tmp_path / "unsilenced", ind.ToyConfig(n_heads=4)), type(model))
    for bad in (0, 5):
        with pytest.raises(ValueError, match="last_layer_heads"):
            ind.ToyConfig(n_heads=4, last_layer_heads=bad)


def test_head_scores_of_an_untrained_toy():
    from icml_interp.heads import attention_patterns, head_scores, repeated_sequence_induction_score

    model = ind.build_model(ind.ToyConfig(seed=0))
    ids = ind.held_out(8, 2)
    scores = head_scores(model, ids, scores=["previous_token", "duplicate_token", "entropy"])
    h = ind.ToyConfig().n_heads
    assert scores["previous_token"].shape == (2, h)
    patterns = attention_patterns(model, ids)  # (layers, batch, heads, q, k)
    assert patterns.shape == (2, 8, h, ind.SEQ, ind.SEQ)
    induction = torch.stack([repeated_sequence_induction_score(p, ind.HALF, offset=1) for p in patterns])
    # untrained attention is near uniform: ~1/(i+1) on any one key, far from an induction head
    assert induction.shape == (2, h) and float(induction.max()) < 0.1
    assert float(scores["previous_token"].max()) < 0.2 and float(scores["entropy"].min()) > 0.8
    first, second = ind.half_losses(model, ids)
    assert second / first == pytest.approx(1.0, abs=0.05)  # no copying before training


def test_cache_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("ICML_CACHE_DIR", str(tmp_path))
    assert ind.ToyConfig(seed=2).key() == "v2-seed2" and TINY.key().startswith("v2-seed3-")
    assert REV2.key() != TINY.key()
    model, info = ind.pretrained(TINY, progress=False)
    assert info["trained now"]
    folder = tmp_path / "induction_toy" / TINY.key()
    assert (folder / "config.json").is_file() and (folder / "train_log.json").is_file()
    assert [p.name for p in (tmp_path / "induction_toy").iterdir()] == [TINY.key()]  # no temp folder left
    again, info2 = ind.pretrained(TINY, progress=False)
    assert not info2["trained now"] and info2["log"] == info["log"] and info2["config"] == info["config"]
    state, state2 = model.state_dict(), again.state_dict()
    assert state.keys() == state2.keys() and all(torch.equal(state[k], state2[k]) for k in state)
    ids = ind.held_out(4, 5)
    assert ind.half_losses(model, ids) == ind.half_losses(again, ids)


def test_phase_step():
    from icml_interp_experiments.repeats.induction_repro import _phase_step

    log = {"step": [0, 10, 20, 30], "first_half": [4.0, 4.0, 4.0, 4.0], "second_half": [4.0, 2.5, 1.9, 0.1]}
    assert _phase_step(log) == 20
    assert _phase_step({**log, "second_half": [4.0] * 4}) is None


@pytest.mark.slow
def test_quick_reproduction_follows_the_protocol():
    from icml_interp_experiments.repeats.induction_repro import THRESHOLDS
    from icml_tools.protocol import validate_result
    from icml_tools.repro import run_reproduction

    result = validate_result(run_reproduction("induction-toy", "quick", 0))
    n_rows = 2 * ind.ToyConfig().n_heads  # one row per head of the 2-layer toy
    assert result["system"] == "induction-toy" and len(result["rows"]) == n_rows
    (seed,) = result["seeds"]
    assert result["ours"] == pytest.approx(seed["ratio"]) and result["baseline"] == pytest.approx(
        seed["ablated ratio"]
    )
    expected = (
        seed["ratio"] < THRESHOLDS["ratio"]
        and seed["previous-token score"] > THRESHOLDS["previous_token"]
        and seed["induction score"] > THRESHOLDS["induction"]
        and seed["ablated ratio"] >= THRESHOLDS["ablated_ratio"]
    )
    assert result["passed"] == expected
    assert seed["first-copy loss"] == pytest.approx(float(torch.log(torch.tensor(64.0))), abs=0.1)
    assert {f["name"] for f in result["figures"]} == {"induction-toy-loss", "induction-toy-ablation"}
