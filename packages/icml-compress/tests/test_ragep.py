"""RaGEP (issue 30): routing against transformers' own routers, slicing against masked routing, planted
geometry, budgets, NAEE against brute force, save/load round trips on tiny Mixtral, Qwen2-MoE, OLMoE and
DeepSeek-V3 configs, and bad input."""

from __future__ import annotations

import copy
import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml_compress.ragep import (
    LayerStats,
    allocate_budgets,
    calibrate,
    effective_rank,
    find_moe_layers,
    load_pruned,
    naee_select,
    plan_pruning,
    prune_experts,
    prune_moe,
    reap_select,
    route,
    save_pruned,
    spectral_salience,
    uniform_budgets,
)
from icml_compress.ragep.layout import slice_experts
from icml_compress.ragep.select import extend_span

VOCAB, HIDDEN, E = 64, 32, 8
COMMON = dict(
    vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
)


def tiny_moe(kind: str, seed: int = 0, layers: int = 2):
    import transformers as tf

    torch.manual_seed(seed)
    common = {**COMMON, "num_hidden_layers": layers}
    if kind == "mixtral":
        cfg = tf.MixtralConfig(intermediate_size=48, num_local_experts=E, num_experts_per_tok=2, **common)
        return tf.MixtralForCausalLM(cfg).eval()
    if kind == "qwen2_moe":
        cfg = tf.Qwen2MoeConfig(
            intermediate_size=48,
            moe_intermediate_size=24,
            shared_expert_intermediate_size=48,
            num_experts=E,
            num_experts_per_tok=2,
            norm_topk_prob=False,  # the survivors' softmax weights are used as they are: the harder case
            **common,
        )
        return tf.Qwen2MoeForCausalLM(cfg).eval()
    if kind == "olmoe":
        cfg = tf.OlmoeConfig(intermediate_size=48, num_experts=E, num_experts_per_tok=2, **common)
        return tf.OlmoeForCausalLM(cfg).eval()
    cfg = tf.DeepseekV3Config(
        **{**common, "num_key_value_heads": 4},
        intermediate_size=48,
        moe_intermediate_size=24,
        n_routed_experts=E,
        num_experts_per_tok=2,
        n_group=1,
        topk_group=1,
        first_k_dense_replace=0,
        kv_lora_rank=16,
        q_lora_rank=None,
        qk_rope_head_dim=8,
        qk_nope_head_dim=8,
        v_head_dim=8,
        eos_token_id=None,
    )
    model = tf.DeepseekV3ForCausalLM(cfg).eval()
    for layer in find_moe_layers(model):  # a non-zero correction bias, so it takes part in the choice
        layer.router.e_score_correction_bias.normal_(0, 0.05)
    return model


KINDS = ("mixtral", "qwen2_moe", "olmoe", "deepseek_v3")
IDS = torch.randint(0, VOCAB, (6, 16), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("kind", KINDS)
def test_route_matches_the_models_own_router(kind):
    model = tiny_moe(kind)
    x = torch.randn(40, HIDDEN, generator=torch.Generator().manual_seed(2))
    for layer in find_moe_layers(model):
        _, ref_w, ref_i = layer.router(x)
        _, i, w = route(layer, x)
        order, ref_order = i.argsort(-1), ref_i.argsort(-1)
        assert torch.equal(i.gather(1, order), ref_i.gather(1, ref_order))
        torch.testing.assert_close(w.gather(1, order), ref_w.to(w.dtype).gather(1, ref_order))


@pytest.mark.parametrize("kind", KINDS)
def test_route_matches_the_models_own_router_in_bfloat16(kind):
    # the softmax families' gates compute their logits in the model's dtype: route() computed them in float32,
    # so near ties went to other experts than the model's (5, 3 and 5 of 2048 token-layers for Mixtral,
    # Qwen2-MoE and OLMoE here, measured)
    model = tiny_moe(kind).to(torch.bfloat16)
    x = torch.randn(1024, HIDDEN, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    for layer in find_moe_layers(model):
        _, _, ref_i = layer.router(x)
        _, i, _ = route(layer, x)
        assert torch.equal(i.sort(-1).values, ref_i.sort(-1).values)


@pytest.mark.parametrize("kind", KINDS)
def test_slicing_equals_masked_routing_and_keeping_all_changes_nothing(kind):
    model = tiny_moe(kind)
    x = torch.randn(50, HIDDEN, generator=torch.Generator().manual_seed(3))
    layer = find_moe_layers(model)[0]
    f = layer.expert_outputs(x)
    keep = [0, 2, 5, 6]
    alive = torch.zeros(E, dtype=torch.bool)
    alive[keep] = True
    _, index, weights = route(layer, x, alive)
    expected = (weights[..., None] * f[index, torch.arange(50)[:, None]]).sum(1)
    pruned = copy.deepcopy(layer)
    pruned.block = copy.deepcopy(layer.block)
    slice_experts(pruned, keep)
    assert pruned.n_experts == 4 and pruned.experts.num_experts == 4
    _, i2, w2 = route(pruned, x)
    got = pruned.experts(x, i2, w2)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)

    full = copy.deepcopy(model)
    prune_experts(full, {ly.index: list(range(E)) for ly in find_moe_layers(full)})
    assert torch.equal(full(IDS).logits, model(IDS).logits)


def planted_stats(energies, bases, k_top=1) -> LayerStats:
    """A layer whose expert ``e`` has output energy ``energies[e]`` spread evenly over the columns of ``bases[e]``."""
    hidden = bases[0].shape[0]
    n = len(energies)
    gram = torch.zeros(n, hidden, hidden, dtype=torch.float64)
    for e, (energy, basis) in enumerate(zip(energies, bases, strict=True)):
        gram[e] = energy * basis @ basis.T / basis.shape[1]
    energies_t = torch.tensor(energies, dtype=torch.float64)
    return LayerStats(
        index=0,
        name="planted",
        n_experts=n,
        top_k=k_top,
        tokens=1,
        counts=torch.ones(n, dtype=torch.float64),
        measured=torch.ones(n, dtype=torch.float64),
        reap_sum=energies_t.sqrt(),
        energy_sum=energies_t,
        gram=gram,
        z_sum=torch.zeros(hidden, dtype=torch.float64),
        z_gram=torch.eye(hidden, dtype=torch.float64),
    )


def test_planted_geometry_spectral_salience_drops_a_duplicate_reap_keeps_both():
    eye = torch.eye(8, dtype=torch.float64)
    # experts 0 and 1: identical, high energy (4); expert 2: unique, low energy (1); expert 3: unique, energy 2
    stats = planted_stats([4.0, 4.0, 1.0, 2.0], [eye[:, :2], eye[:, :2], eye[:, 2:3], eye[:, 3:5]])
    kept, trace = spectral_salience(stats, 3, return_scores=True)
    assert kept == [0, 2, 3]  # one duplicate dropped, the low-energy unique expert kept
    assert trace[-1]["expert"] == 2 and trace[0]["expert"] == 0
    assert reap_select(stats, 3) == [0, 1, 3]  # REAP keeps both duplicates and drops the unique expert
    assert spectral_salience(stats, 2) == [0, 3]
    # when every remaining expert is already spanned, energy decides
    same = planted_stats([3.0, 2.0, 1.0], [eye[:, :2]] * 3)
    assert spectral_salience(same, 2) == [0, 1]


def test_the_kept_span_grows_only_by_new_directions():
    eye = torch.eye(6, dtype=torch.float64)
    span = extend_span(torch.zeros(6, 0, dtype=torch.float64), eye[:, :2])
    assert extend_span(span, eye[:, :2]).shape == (6, 2)  # a duplicate adds nothing
    mixed = torch.stack([eye[:, 0] + eye[:, 1], eye[:, 2]], dim=1) / torch.tensor([2**0.5, 1.0])
    grown = extend_span(span, mixed)  # one old direction, one new
    assert grown.shape == (6, 3)
    torch.testing.assert_close(grown.T @ grown, torch.eye(3, dtype=torch.float64))
    torch.testing.assert_close(grown @ grown.T @ eye[:, 2], eye[:, 2])


def test_effective_rank_of_planted_ranks_and_budgets_follow_them():
    gen = torch.Generator().manual_seed(0)
    eranks = []
    for r in (2, 4, 8, 16):
        q, _ = torch.linalg.qr(torch.randn(200, r, generator=gen, dtype=torch.float64))
        v, _ = torch.linalg.qr(torch.randn(32, r, generator=gen, dtype=torch.float64))
        eranks.append(effective_rank(q @ v.T, center=False))  # equal singular values: erank = r exactly
    assert eranks == pytest.approx([2, 4, 8, 16], rel=1e-9)
    budgets = allocate_budgets(eranks, [8] * 4, 0.5, [2] * 4)
    assert sum(budgets) == 16 and budgets == sorted(budgets) and min(budgets) >= 2
    assert allocate_budgets([1, 1, 1, 1], [8] * 4, 0.5, [2] * 4) == [4, 4, 4, 4]
    assert uniform_budgets([8] * 4, 0.75, [2] * 4) == [6] * 4
    assert effective_rank(torch.zeros(5, 3)) == 0.0


@settings(max_examples=200, deadline=None)
@given(
    scores=st.lists(st.floats(0, 100, allow_nan=False), min_size=1, max_size=12),
    keep=st.floats(0.05, 1.0),
    e=st.integers(2, 16),
    k=st.integers(1, 4),
)
def test_budgets_sum_exactly_stay_in_bounds_and_are_monotone(scores, keep, e, k):
    n = len(scores)
    k = min(k, e)
    if round(keep * e * n) < k * n:
        with pytest.raises(ValueError, match="keep_ratio"):
            allocate_budgets(scores, [e] * n, keep, [k] * n)
        return
    b = allocate_budgets(scores, [e] * n, keep, [k] * n)
    assert sum(b) == round(keep * e * n) and all(k <= x <= e for x in b)
    for i, j in itertools.permutations(range(n), 2):
        if scores[i] > scores[j]:
            assert b[i] >= b[j]


def test_naee_is_the_best_subset_by_brute_force_on_the_pruned_block():
    model = tiny_moe("mixtral", layers=1)
    cal = calibrate(model, IDS, keep_inputs=64)
    layer, stats = find_moe_layers(model)[0], cal.layers[0]
    x = stats.inputs
    _, i0, w0 = route(layer, x)
    with torch.no_grad():
        full = layer.experts(x, i0, w0)
    losses = {}
    for subset in itertools.combinations(range(E), 4):  # every pruned block, built by slicing, not masking
        pruned = copy.deepcopy(layer)
        pruned.block = copy.deepcopy(layer.block)
        slice_experts(pruned, list(subset))
        _, i, w = route(pruned, x)
        with torch.no_grad():
            losses[subset] = float((pruned.experts(x, i, w).double() - full.double()).square().sum())
    best = min(losses, key=lambda s: (losses[s], s))
    assert len(losses) == math.comb(8, 4) == 70
    assert naee_select(layer, stats, 4) == list(best)


@pytest.mark.parametrize("kind", KINDS)
def test_pruned_models_reload_with_identical_logits_and_generate(kind, tmp_path):
    from transformers import AutoModelForCausalLM

    model = tiny_moe(kind)
    cal = calibrate(model, IDS)
    # uniform budgets: an ordinary checkpoint that from_pretrained loads
    uniform = prune_experts(copy.deepcopy(model), plan_pruning(cal, 0.5, method="reap"))
    save_pruned(uniform, tmp_path / "uniform")
    for loaded in (
        AutoModelForCausalLM.from_pretrained(tmp_path / "uniform"),
        load_pruned(tmp_path / "uniform"),
    ):
        assert torch.equal(loaded.eval()(IDS).logits, uniform(IDS).logits)
    # per-layer budgets: recorded in the config, rebuilt by load_pruned
    ragged = prune_experts(copy.deepcopy(model), {0: [1, 3, 4, 6, 7], 1: [0, 5, 2]})
    assert [ly.n_experts for ly in find_moe_layers(ragged)] == [5, 3]
    assert ragged.config.ragep_kept_experts == {"0": [1, 3, 4, 6, 7], "1": [0, 2, 5]}
    save_pruned(ragged, tmp_path / "ragged")
    loaded = load_pruned(tmp_path / "ragged")
    assert [ly.n_experts for ly in find_moe_layers(loaded)] == [5, 3]
    assert torch.equal(loaded(IDS).logits, ragged(IDS).logits)
    out = loaded.generate(IDS[:1, :4], max_new_tokens=5, do_sample=False, pad_token_id=0)
    assert out.shape == (1, 9)
    # pruning again composes: the config keeps the original indices
    prune_experts(loaded, {0: [0, 2, 4]})
    assert loaded.config.ragep_kept_experts["0"] == [1, 4, 7]


def test_load_pruned_with_per_layer_budgets_keeps_the_generation_config(tmp_path):
    """``save_pruned`` writes ``generation_config.json`` (``save_pretrained``); with per-layer budgets
    ``load_pruned`` builds the model with ``from_config``, which does not read it: before, the reloaded model
    generated 12 new tokens where the saved one (and the uniform-budget route, ``from_pretrained``) stopped
    after 3, with ``max_new_tokens`` None and ``eos_token_id`` 2 from config.json instead of 3 and [7, 9]."""
    from transformers import GenerationConfig

    ragged = prune_experts(tiny_moe("mixtral"), {0: [1, 3, 4, 6, 7], 1: [0, 5, 2]})
    ragged.generation_config = GenerationConfig(max_new_tokens=3, eos_token_id=[7, 9], pad_token_id=0)
    expected = ragged.generate(IDS[:1, :4])
    assert expected.shape == (1, 7)
    loaded = load_pruned(save_pruned(ragged, tmp_path / "ragged"))
    assert loaded.generation_config.to_diff_dict() == ragged.generation_config.to_diff_dict()
    assert torch.equal(loaded.generate(IDS[:1, :4]), expected)


def test_load_pruned_applies_from_pretrained_arguments_on_both_routes(tmp_path):
    """``load_pruned(path, **kwargs)`` takes ``from_pretrained``'s arguments on both routes. Before, with
    per-layer budgets they went to ``from_config`` and on to the model's ``__init__``: ``device_map="cpu"``
    raised ``TypeError: MixtralForCausalLM.__init__() got an unexpected keyword argument 'device_map'`` and
    ``dtype="auto"`` an AttributeError, where the uniform route (``from_pretrained``) loaded the model. Each
    route's model, with or without each argument, must give the logits of the in-memory pruned model, bit for
    bit (the uniform and per-layer models differ, so they are compared to their own references)."""
    from transformers import AutoModelForCausalLM

    base = tiny_moe("mixtral")
    base.save_pretrained(tmp_path / "full")
    plans = {"uniform": {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}, "ragged": {0: [1, 3, 4, 6, 7], 1: [0, 5, 2]}}
    for name, plan in plans.items():
        in_float32 = save_pruned(prune_experts(copy.deepcopy(base), plan), tmp_path / f"{name}-float32")
        for dtype in (torch.float32, torch.bfloat16):
            # the reference: built in dtype by from_pretrained (so its buffers are as a load makes them), pruned
            ref = prune_experts(
                AutoModelForCausalLM.from_pretrained(tmp_path / "full", dtype=dtype).eval(), plan
            )
            expected = ref(IDS).logits
            saved = save_pruned(ref, tmp_path / f"{name}-{dtype}")
            for kwargs in (
                {},
                {"dtype": dtype},
                {"dtype": str(dtype).removeprefix("torch.")},
                {"dtype": "auto"},
                {"torch_dtype": dtype},
                {"device_map": "cpu"},
                {"device_map": torch.device("cpu")},
                {"device_map": {"": "cpu"}},
                {"device_map": {"model": "cpu", "lm_head": "cpu"}},
                {"low_cpu_mem_usage": True},
                {"attn_implementation": "sdpa"},
                {
                    "dtype": dtype,
                    "device_map": "cpu",
                    "low_cpu_mem_usage": True,
                    "attn_implementation": "sdpa",
                },
            ):
                loaded = load_pruned(saved, **kwargs)
                assert (loaded.dtype, loaded.device.type, loaded.training) == (dtype, "cpu", False), kwargs
                assert torch.equal(loaded(IDS).logits, expected), (name, dtype, kwargs)
            # a float32 save read in dtype, as from_pretrained reads it
            assert torch.equal(load_pruned(in_float32, dtype=dtype)(IDS).logits, expected)
        # the bfloat16 reference's implementations, switched one after the other (eager attention changes
        # its logits by up to 2e-3, eager experts by up to 2e-3 more: an ignored argument would be seen)
        chosen: dict[str, str] = {}
        for key, value in (("attn_implementation", "eager"), ("experts_implementation", "eager")):
            getattr(ref, f"set_{key}")(value)
            chosen[key] = value
            loaded = load_pruned(saved, **chosen)
            assert getattr(loaded.config, f"_{key}") == value
            assert torch.equal(loaded(IDS).logits, ref(IDS).logits), (name, key)
    # the per-layer route refuses what it cannot apply, naming it (the uniform route is from_pretrained's)
    ragged = tmp_path / "ragged-float32"
    with pytest.raises(TypeError, match=r"output_attentions.*revision"):
        load_pruned(ragged, revision="main", output_attentions=True)
    for device_map in ("disk", "meta", -1, "autox", {"model": "cpu", "lm_head": "disk"}):
        with pytest.raises(ValueError, match=r"device_map for a checkpoint with per-layer expert counts"):
            load_pruned(ragged, device_map=device_map)
    # "float" names torch.float (float32), as from_pretrained reads it
    assert load_pruned(ragged, dtype="float").dtype == torch.float32
    for dtype in (torch.int8, "nn", {"": torch.float32}):
        with pytest.raises(ValueError, match=r"dtype must be a floating torch\.dtype"):
            load_pruned(ragged, dtype=dtype)


def test_load_pruned_resolves_device_map_strategies_as_from_pretrained(tmp_path, one_torch_thread):
    """``device_map="auto"`` (and the other strategies, with ``max_memory``) is the usual way to call
    ``from_pretrained``; on this CPU-only machine ``from_pretrained`` puts the uniform checkpoint on the CPU and
    its logits equal the in-memory pruned model's. The per-layer route raised ``ValueError: device_map must
    name one device ...`` for each of them, so a RaGEP checkpoint (rank budgets) failed where the uniform one
    loaded. Both routes must now give their in-memory model's logits bit for bit."""
    from transformers import AutoModelForCausalLM

    base = tiny_moe("mixtral")
    plans = {"uniform": {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}, "ragged": {0: [1, 3, 4, 6, 7], 1: [0, 5, 2]}}
    for name, plan in plans.items():
        pruned = prune_experts(copy.deepcopy(base), plan)
        expected = pruned(IDS).logits
        saved = save_pruned(pruned, tmp_path / name)
        for kwargs in (
            {"device_map": "auto"},
            {"device_map": "balanced"},
            {"device_map": "balanced_low_0"},
            {"device_map": "sequential"},
            {"device_map": "auto", "max_memory": {"cpu": "1GiB"}},
        ):
            if name == "uniform":  # what from_pretrained itself does with the argument
                reference = AutoModelForCausalLM.from_pretrained(saved, **kwargs)
                assert reference.device.type == "cpu" and torch.equal(reference(IDS).logits, expected)
            loaded = load_pruned(saved, **kwargs)
            assert (loaded.device.type, loaded.training) == ("cpu", False), (name, kwargs)
            assert torch.equal(loaded(IDS).logits, expected), (name, kwargs)


def test_a_failed_save_leaves_the_earlier_save_and_a_file_path_is_refused(tmp_path, monkeypatch):
    import transformers.modeling_utils as mu

    base = tiny_moe("mixtral", layers=2)
    first = prune_experts(copy.deepcopy(base), {0: [0, 1, 2, 3], 1: [0, 1, 2, 3]})
    second = prune_experts(copy.deepcopy(base), {0: [0, 1, 2, 3, 4], 1: [0, 1, 2]})
    target = tmp_path / "ckpt"
    assert save_pruned(first, target) == target

    def full_disk(*args, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(mu, "safe_save_file", full_disk)
    with pytest.raises(OSError, match="No space"):
        save_pruned(second, target)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no temporary directory left behind
    assert torch.equal(load_pruned(target)(IDS).logits, first(IDS).logits)
    # a path that is a file is refused before anything is written; the file is untouched
    f = tmp_path / "file"
    f.write_text("precious")
    with pytest.raises(ValueError, match="path"):
        save_pruned(first, f)
    assert f.read_text() == "precious"


def _tiny_tokenizer():
    """A word-level fast tokenizer over the tiny models' vocabulary, built offline."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel({f"w{i}": i for i in range(VOCAB)}, unk_token="w0"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="w0")


def test_a_save_over_an_earlier_one_keeps_what_save_pretrained_keeps(tmp_path, one_torch_thread):
    """Saving over an earlier checkpoint keeps the files saved beside it, as ``save_pretrained`` does when it
    overwrites a directory: the tokenizer (``save_pruned`` takes none, so users save it with
    ``tokenizer.save_pretrained(path)``), a model card, a ``.git`` folder (a Hub clone). Before, the directory
    was replaced whole: ``save_pruned`` over ``save_pretrained`` + tokenizer + README + ``.git`` lost
    ``.git``, ``README.md``, ``tokenizer.json`` and ``tokenizer_config.json`` (``AutoTokenizer.from_pretrained``
    then raised), where ``save_pretrained`` lost none. Stale weights (the earlier save's shards and index) are
    not carried over: the new save loads alone and exactly."""
    from transformers import AutoTokenizer

    base = tiny_moe("mixtral", layers=2)
    first = prune_experts(copy.deepcopy(base), {0: [0, 1, 2, 3], 1: [0, 1, 2, 3]})
    second = prune_experts(copy.deepcopy(base), {0: [0, 1, 2, 3, 4], 1: [0, 1, 2]})
    dirs = {}
    for name in ("save_pretrained", "save_pruned"):
        d = tmp_path / name
        first.save_pretrained(d, max_shard_size="40KB")  # sharded: model-0000k-of-0000n + index
        assert (d / "model.safetensors.index.json").is_file()
        _tiny_tokenizer().save_pretrained(d)
        (d / "README.md").write_text("model card")
        (d / ".git").mkdir()
        (d / ".git" / "HEAD").write_text("ref: refs/heads/main")
        if name == "save_pretrained":  # the reference: transformers overwriting the directory
            second.save_pretrained(d)
        else:
            save_pruned(second, d)
        dirs[name] = d
    kept = {n: {p.name for p in d.iterdir()} for n, d in dirs.items()}
    user_files = {".git", "README.md", "tokenizer.json", "tokenizer_config.json"}
    assert user_files <= kept["save_pretrained"]
    assert user_files <= kept["save_pruned"], sorted(user_files - kept["save_pruned"])
    d = dirs["save_pruned"]
    assert (d / ".git" / "HEAD").read_text() == "ref: refs/heads/main"
    assert (d / "README.md").read_text() == "model card"
    assert AutoTokenizer.from_pretrained(d)("w3 w5")["input_ids"] == [3, 5]
    # no stale shard or index: only the new weights, which load exactly
    assert sorted(p.name for p in d.glob("*.safetensors*")) == ["model.safetensors"]
    assert torch.equal(load_pruned(d)(IDS).logits, second(IDS).logits)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["save_pretrained", "save_pruned"]  # no leftovers


def test_every_method_plans_and_ragep_budgets_differ_by_layer():
    model = tiny_moe("mixtral", layers=2)
    cal = calibrate(model, IDS, keep_inputs=32, route_all=True)
    assert cal.route_all and all(float(s.measured.min()) == IDS.numel() for s in cal.layers)
    for method in ("ragep", "spectral-salience", "reap", "frequency", "naee", "random"):
        plan = plan_pruning(cal, 0.5, method=method, model=model)
        assert sum(plan.budgets.values()) == 8 and all(
            len(v) == plan.budgets[i] for i, v in plan.kept.items()
        )
    plan = plan_pruning(cal, 0.5, method="ragep", budgets="rank")
    assert set(plan.effective_ranks) == {0, 1} and plan.to_dict()["method"] == "ragep"


def test_bad_input_names_the_argument():
    from icml_tools.assets import tiny_llama

    dense = tiny_llama(0, layers=1, hidden=32, heads=2, kv_heads=1, intermediate=64, vocab=VOCAB)
    with pytest.raises(ValueError, match="model"):
        find_moe_layers(dense)
    model = tiny_moe("mixtral", layers=1)
    cal = calibrate(model, IDS)
    for ratio in (0, -0.5, 1.5):
        with pytest.raises(ValueError, match="keep_ratio"):
            plan_pruning(cal, ratio)
    with pytest.raises(ValueError, match="keep_ratio"):  # 1 expert per layer is below top-k = 2
        plan_pruning(cal, 0.1)
    with pytest.raises(ValueError, match="method"):
        plan_pruning(cal, 0.5, method="magnitude")
    with pytest.raises(ValueError, match="top_k"):
        prune_experts(copy.deepcopy(model), {0: [3]})
    with pytest.raises(ValueError, match="keep_inputs"):
        naee_select(find_moe_layers(model)[0], cal.layers[0], 4)
    with pytest.raises(ValueError, match="sequences"):
        calibrate(model, torch.full((2, 4), VOCAB))
    with pytest.raises(ValueError, match="min_experts"):
        allocate_budgets([1.0, 2.0], [4, 4], 0.5, [5, 1])
    with pytest.raises(ValueError, match="scores"):
        allocate_budgets([1.0, np.nan], [4, 4], 0.5, [1, 1])


def test_calibrate_and_prune_moe_give_back_every_submodules_training_flag():
    def flags(model):
        return {n: m.training for n, m in model.named_modules()}

    model = tiny_moe("mixtral", layers=2).train()
    model.model.embed_tokens.eval()  # a user's frozen parts, kept in eval in a model in train mode
    model.model.layers[0].eval()
    before = flags(model)
    assert set(before.values()) == {True, False}
    calibrate(model, IDS, batch_size=2)
    assert flags(model) == before

    calls = {"n": 0}

    def boom(module, args):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("user error")

    handle = model.model.register_forward_pre_hook(boom)
    with pytest.raises(RuntimeError, match="user error"):
        calibrate(model, IDS, batch_size=2)
    handle.remove()
    assert calls["n"] == 2 and flags(model) == before

    prune_moe(model, IDS, 0.5, batch_size=2)
    after = flags(model)
    assert after["model.embed_tokens"] is False and after["model.layers.0.self_attn"] is False
    assert after[""] is True and after["model.layers.1.self_attn"] is True
