"""SpeechCombine's merge: the formula on shared tensors, the CPT model's new vocabulary rows kept exactly
(where mergekit-style truncation loses them), tied embeddings, streaming = in memory, bad input."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from torch import nn

pytest.importorskip("transformers")

from icml_compress.merge import MergeSettings, combine, combine_checkpoints, module_kind, plan_merge
from icml_compress.merge.rules import merge_tensor, plan_tensor

BASE_VOCAB, NEW = 256, 40  # the CPT model adds 40 "unit" tokens, the instruct model 3 chat tokens


def tiny(seed=0, **kw):
    from icml_tools.assets import tiny_llama

    return tiny_llama(seed, **kw)


def perturbed(model: nn.Module, seed: int, scale: float = 0.02) -> nn.Module:
    """A copy of ``model`` with every floating tensor moved (a stand-in for fine-tuning)."""
    out = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in out.parameters():
            p.add_(scale * torch.randn(p.shape, generator=gen))
    return out


@pytest.fixture(scope="module")
def trio():
    base = tiny(0, vocab=BASE_VOCAB)
    instruct = perturbed(base, 1)
    instruct.resize_token_embeddings(BASE_VOCAB + 3)
    cpt = copy.deepcopy(base)
    cpt.resize_token_embeddings(BASE_VOCAB + NEW)
    cpt = perturbed(cpt, 2)
    return cpt, instruct, base


EMBED = "model.embed_tokens.weight"


def test_formula_new_rows_and_tied_embeddings(trio):
    cpt, instruct, base = trio
    merged = combine(cpt, instruct, base, lam=0.7)
    c, i, b, m = (x.state_dict() for x in (cpt, instruct, base, merged))
    for name, t in m.items():
        if name in (EMBED, "lm_head.weight"):
            continue
        if t.is_floating_point() and "rotary" not in name:
            torch.testing.assert_close(t, c[name] + 0.7 * (i[name] - b[name]), rtol=0, atol=1e-6)
    # the CPT model's new rows exactly; the shared rows get the delta; the instruct model's chat rows not used
    assert torch.equal(m[EMBED][BASE_VOCAB:], c[EMBED][BASE_VOCAB:])
    expected = c[EMBED][:BASE_VOCAB] + 0.7 * (i[EMBED][:BASE_VOCAB] - b[EMBED][:BASE_VOCAB])
    torch.testing.assert_close(m[EMBED][:BASE_VOCAB], expected, rtol=0, atol=1e-6)
    assert merged.lm_head.weight is merged.model.embed_tokens.weight  # still tied
    actions = {a["name"]: a for a in merged.icml_merge["actions"]}
    assert actions[EMBED]["action"] == "delta-shared-rows" and actions[EMBED]["shared_rows"] == BASE_VOCAB
    assert actions["lm_head.weight"]["action"] == "tied" and actions["lm_head.weight"]["source"] == EMBED
    assert "259" not in actions[EMBED]["reason"] and "256..258" in actions[EMBED]["reason"]
    assert torch.equal(cpt.model.embed_tokens.weight, trio[0].model.embed_tokens.weight)  # input untouched


def test_mergekit_style_truncation_loses_the_new_rows(trio):
    """mergekit's task vectors cut a mismatched embedding to the base's rows: the merged model then has no
    rows for the new tokens. Ours keeps them exactly."""
    cpt, instruct, base = trio
    c, i, b = (x.state_dict()[EMBED] for x in (cpt, instruct, base))
    truncated = (
        b + (c[: b.shape[0]] - b) + (i[: b.shape[0]] - b)
    )  # base + Σ task vectors, as mergekit forms them
    assert truncated.shape[0] == BASE_VOCAB < c.shape[0]
    ours = combine(cpt, instruct, base).state_dict()[EMBED]
    assert ours.shape == c.shape and torch.equal(ours[BASE_VOCAB:], c[BASE_VOCAB:])
    torch.testing.assert_close(ours[:BASE_VOCAB], truncated, rtol=0, atol=1e-6)  # the shared rows agree


def test_lambda_zero_returns_cpt_and_per_module_lambdas(trio):
    cpt, instruct, base = trio
    zero = combine(cpt, instruct, base, lam=0.0)
    assert all(
        torch.equal(a, b) for a, b in zip(zero.state_dict().values(), cpt.state_dict().values(), strict=True)
    )
    mixed = combine(cpt, instruct, base, lam=1.0, per_module={"attention": 0.0, "norms": 2.0})
    c, i, b, m = (x.state_dict() for x in (cpt, instruct, base, mixed))
    q, up, norm = (
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.mlp.up_proj.weight",
        "model.norm.weight",
    )
    assert torch.equal(m[q], c[q])
    torch.testing.assert_close(m[up], c[up] + (i[up] - b[up]), rtol=0, atol=1e-6)
    torch.testing.assert_close(m[norm], c[norm] + 2.0 * (i[norm] - b[norm]), rtol=0, atol=1e-6)
    assert [
        module_kind(n) for n in (q, up, norm, EMBED, "model.layers.0.post_attention_layernorm.weight")
    ] == [
        "attention",
        "mlp",
        "norms",
        "embeddings",
        "norms",
    ]


def test_inplace_changes_the_cpt_model_and_untied_models_merge_each_tensor(trio):
    cpt, instruct, base = (copy.deepcopy(m) for m in trio)
    expected = combine(cpt, instruct, base).state_dict()
    out = combine(cpt, instruct, base, inplace=True)
    assert out is cpt and all(torch.equal(expected[n], t) for n, t in cpt.state_dict().items())
    untied = [tiny(0, vocab=BASE_VOCAB) for _ in range(3)]
    for k, m in enumerate(untied):
        m.config.tie_word_embeddings = False
        m.lm_head.weight = nn.Parameter(m.model.embed_tokens.weight.detach().clone() + k)
    merged = combine(*untied, lam=1.0)
    assert merged.lm_head.weight is not merged.model.embed_tokens.weight
    torch.testing.assert_close(merged.lm_head.weight, untied[0].lm_head.weight + 1.0 - 2.0)


def test_a_failed_inplace_merge_leaves_the_cpt_model_unchanged(trio):
    cpt, instruct, base = (copy.deepcopy(m) for m in trio)
    before = {n: t.clone() for n, t in cpt.state_dict().items()}
    with torch.no_grad():  # the final norm comes after every layer: the layers merge fine before it raises
        instruct.model.norm.weight[0] = math.nan
    with pytest.raises(ValueError, match=r"model\.norm\.weight: the merge is not finite"):
        combine(cpt, instruct, base, inplace=True)
    assert all(torch.equal(before[n], t) for n, t in cpt.state_dict().items())
    assert not hasattr(cpt, "icml_merge")


def test_a_merge_that_overflows_the_weights_dtype_raises():
    c, i, b = (nn.Linear(4, 4).half() for _ in range(3))
    with torch.no_grad():  # finite in float32 (1.2e5), infinite in float16 (max 65504)
        i.weight[0, 0], b.weight[0, 0] = 60000.0, -60000.0
    with pytest.raises(ValueError, match=r"weight: the merge is not finite .*float16"):
        combine(c, i, b, lam=1.0)


def test_streaming_is_bit_identical_and_the_dry_run_lists_every_tensor(trio, tmp_path):
    from transformers import AutoModelForCausalLM

    cpt, instruct, base = trio
    dirs = {}
    for name, m in (("cpt", cpt), ("instruct", instruct), ("base", base)):
        m.save_pretrained(tmp_path / name)
        dirs[name] = tmp_path / name
    for method, kw in (
        ("task_arithmetic", {}),
        ("dare", {"density": 0.5, "seed": 3}),
        ("ties", {"density": 0.3}),
    ):
        memory = combine(cpt, instruct, base, lam=0.8, method=method, **kw)
        out = tmp_path / f"merged-{method}"
        report = combine_checkpoints(
            dirs["cpt"], dirs["instruct"], dirs["base"], out, lam=0.8, method=method, shard_bytes=40_000, **kw
        )
        assert (out / "model.safetensors.index.json").is_file()  # several shards
        loaded = AutoModelForCausalLM.from_pretrained(out)
        assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
        got, want = loaded.state_dict(), memory.state_dict()
        assert set(got) == set(want) and all(torch.equal(got[n], want[n]) for n in want), method
        assert {a.name for a in report.actions} == set(cpt.state_dict())
        assert json.loads((out / "icml_merge.json").read_text())["counts"] == report.counts()
    dry = combine_checkpoints(dirs["cpt"], dirs["instruct"], dirs["base"], tmp_path / "never", dry_run=True)
    assert not (tmp_path / "never").exists()
    assert [(a.name, a.action) for a in sorted(dry.actions, key=lambda a: a.name)] == [
        (a.name, a.action) for a in sorted(plan_merge(cpt, instruct, base).actions, key=lambda a: a.name)
    ]
    assert "| model.embed_tokens.weight | embeddings |" in dry.table() and "delta-shared-rows" in str(dry)


def test_merged_model_reloads_identically_and_generates(trio, tmp_path):
    from transformers import AutoModelForCausalLM

    merged = combine(*trio)
    merged.save_pretrained(tmp_path / "m")
    again = AutoModelForCausalLM.from_pretrained(tmp_path / "m")
    x = torch.randint(0, BASE_VOCAB + NEW, (1, 12))
    with torch.no_grad():
        assert torch.equal(merged(x).logits, again(x).logits)
        out = again.generate(x, max_new_tokens=5, do_sample=False, pad_token_id=0)
    assert out.shape == (1, 17)


def test_failed_write_leaves_the_previous_output(trio, tmp_path, monkeypatch):
    import safetensors.torch

    cpt, instruct, base = trio
    for name, m in (("cpt", cpt), ("instruct", instruct), ("base", base)):
        m.save_pretrained(tmp_path / name)
    out = tmp_path / "out"
    combine_checkpoints(tmp_path / "cpt", tmp_path / "instruct", tmp_path / "base", out, lam=0.0)
    before = (out / "model.safetensors").read_bytes()
    with pytest.raises(ValueError, match=r"out: .* exists"):
        combine_checkpoints(tmp_path / "cpt", tmp_path / "instruct", tmp_path / "base", out)

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(safetensors.torch, "save_file", broken)
    with pytest.raises(OSError, match="disk full"):
        combine_checkpoints(tmp_path / "cpt", tmp_path / "instruct", tmp_path / "base", out, overwrite=True)
    assert (out / "model.safetensors").read_bytes() == before
    with pytest.raises(ValueError, match="not an earlier combine_checkpoints directory"):
        combine_checkpoints(
            tmp_path / "cpt", tmp_path / "instruct", tmp_path / "base", tmp_path / "cpt", overwrite=True
        )
    assert (tmp_path / "cpt" / "config.json").is_file()  # another model's directory is never replaced
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base", "cpt", "instruct", "out"]  # no leftovers


def test_ties_and_dare_rules():
    s = MergeSettings(method="ties", density=1.0)
    act = plan_tensor("w", ((4,), torch.float32), ((4,), torch.float32), ((4,), torch.float32), s)
    base = torch.zeros(4)
    cpt = torch.tensor([1.0, 2.0, -1.0, 0.5])
    inst = torch.tensor([1.0, -3.0, -2.0, 0.0])
    # signs: agree, conflict (-3 wins), agree, only the CPT: summed where they agree with the elected sign
    assert merge_tensor(act, cpt, inst, base, s).tolist() == [2.0, -3.0, -3.0, 0.5]
    norm = MergeSettings(method="ties", density=1.0, normalize=True)
    assert merge_tensor(act, cpt, inst, base, norm).tolist() == [1.0, -3.0, -1.5, 0.5]
    # density 0.5: each task vector keeps its 2 largest magnitudes (ties at the threshold kept: the CPT's
    # 1 and -1 both), so the CPT keeps [1, 2, -1, 0] and the instruct model [0, -3, -2, 0]
    trimmed = MergeSettings(method="ties", density=0.5)
    assert merge_tensor(act, cpt, inst, base, trimmed).tolist() == [1.0, -3.0, -3.0, 0.0]
    # DARE: the delta's survivors rescaled by 1/density, reproducible from (seed, name); density 1 = TA
    big = plan_tensor("w", ((20000,), torch.float32), ((20000,), torch.float32), ((20000,), torch.float32), s)
    ones, zeros = torch.ones(20000), torch.zeros(20000)
    dare = MergeSettings(method="dare", density=0.25, seed=1)
    out = merge_tensor(big, zeros, ones, zeros, dare)
    assert set(out.unique().tolist()) == {0.0, 4.0} and abs(float((out > 0).float().mean()) - 0.25) < 0.02
    assert torch.equal(out, merge_tensor(big, zeros, ones, zeros, dare))
    assert torch.equal(merge_tensor(big, zeros, ones, zeros, MergeSettings(method="dare")), ones)


@pytest.mark.parametrize(
    ("density", "n", "kept"),
    [(0.07, 100, 7), (0.06, 100, 6), (0.14, 50, 7), (0.28, 50, 14), (0.55, 100, 55), (0.56, 100, 56),
     (0.14, 100, 14), (0.28, 100, 28), (0.56, 50, 28), (0.5, 7, 4), (0.001, 10, 1)],
)  # fmt: skip
def test_ties_keeps_the_ceiling_of_the_exact_density_product(density, n, kept):
    # ⌈density · numel⌉ (at least 1) of distinct magnitudes kept; before, the float product rounded up past
    # the integer (0.07 * 100 = 7.000000000000001): 8 of 100 kept at density 0.07 (6 at 0.06), 8 of 50 at 0.14
    s = MergeSettings(method="ties", density=density)
    act = plan_tensor("w", ((n,), torch.float32), ((n,), torch.float32), ((n,), torch.float32), s)
    cpt, zeros = torch.arange(1.0, n + 1), torch.zeros(n)
    out = merge_tensor(act, cpt, zeros, zeros, s)
    assert int((out != 0).sum()) == kept
    assert torch.equal(out[n - kept :], cpt[n - kept :])  # the largest magnitudes


def test_bad_input(trio):
    cpt, instruct, base = trio
    with pytest.raises(ValueError, match="architectures differ"):
        combine(cpt, instruct, tiny(0, layers=3, vocab=BASE_VOCAB))
    with pytest.raises(
        ValueError, match=r"model\.layers\.0\.mlp\.gate_proj\.weight: shapes cannot be aligned"
    ):
        combine(tiny(0, intermediate=96, vocab=BASE_VOCAB), instruct, base)
    small = tiny(0, vocab=BASE_VOCAB - 6)
    with pytest.raises(ValueError, match=r"model\.embed_tokens\.weight: shapes cannot be aligned"):
        combine(small, instruct, base)
    for lam in (math.nan, math.inf, 10**400):  # the right type, a value out of range
        with pytest.raises(ValueError, match="lam must be a finite float"):
            combine(cpt, instruct, base, lam=lam)
    for lam in ("1", None):
        with pytest.raises(TypeError, match="lam must be a finite float"):
            combine(cpt, instruct, base, lam=lam)
    with pytest.raises(ValueError, match="per_module key must be one of"):
        combine(cpt, instruct, base, per_module={"attn": 1.0})
    with pytest.raises(ValueError, match="density must be in"):
        combine(cpt, instruct, base, method="dare", density=0.0)
    with pytest.raises(ValueError, match="method must be one of"):
        combine(cpt, instruct, base, method="slerp")
    with pytest.raises(TypeError, match=r"instruct_model must be a torch\.nn\.Module"):
        combine(cpt, "instruct", base)
    broken = copy.deepcopy(instruct)
    with torch.no_grad():
        broken.model.norm.weight[0] = math.nan
    with pytest.raises(ValueError, match=r"model\.norm\.weight: the merge is not finite"):
        combine(cpt, broken, base)
