"""The proteus-smollm2 reproduction (heavy: quantizes the first SmolLM2 block eight ways, about 2 minutes on a
fresh cache) and its helpers (fast)."""

import math

import pytest

from icml_compress_experiments.quantize.repro import (
    method_configs,
    noninferior,
    paired_difference,
    recorded_seeds,
    run,
    seeds_noninferior,
    t_quantile_975,
)
from icml_tools.repro import run_reproduction


def test_the_full_budget_refuses_a_seed_outside_the_record_before_quantizing_anything():
    with pytest.raises(ValueError, match=r"seed: .*seeds \[0, 1, 2, 3, 4, 5, 6, 7, 8, 9\].*got 11"):
        run("full", 11)


def test_methods_share_bits_and_L():
    cfgs = method_configs("full", 0)
    assert list(cfgs) == [
        "rtn-2bit-g64",
        "proteus",
        "proteus+comp",
        "proteus+comp+distill",
        "trellis-1mad",
        "trellis-1mad+comp",
        "trellis-1mad+comp+distill",
        "trellis-hyb",
    ]
    assert {(c.bits, c.L) for c in cfgs.values()} == {(2, 10)}
    # the fair pair: the baseline gets the same compensation and distillation, and keeps its cache key
    for x, y in (
        ("proteus+comp+distill", "trellis-1mad+comp+distill"),
        ("proteus+comp", "trellis-1mad+comp"),
    ):
        a, b = cfgs[x].to_dict(), cfgs[y].to_dict()
        assert {k for k in a if a[k] != b[k]} == {"method", "code"}
    assert (
        method_configs("full", 0)["trellis-1mad"].digest() == "3a26466e0dcf"
    )  # unchanged by the new methods
    assert method_configs("quick", 0)["proteus"].max_blocks == 1 and cfgs["proteus"].max_blocks is None
    # the quick diagnostic over seeds keeps the configs (and cache keys) of its protocol: 4 blocks
    four = method_configs("quick-4-blocks", 3)
    assert four["proteus"].max_blocks == 4
    assert four["trellis-1mad"].to_dict() == {
        **method_configs("quick", 3)["trellis-1mad"].to_dict(),
        "max_blocks": 4,
    }


@pytest.mark.parametrize(("df", "q"), [(1, 12.7062), (4, 2.7764), (11, 2.2010), (60, 2.0003)])
def test_t_quantile_matches_tables(df, q):
    assert t_quantile_975(df) == pytest.approx(q, abs=2e-4)


def test_paired_difference():
    out = paired_difference([1.0, 2.0, 3.0, 4.0], [1.5, 2.5, 2.5, 4.5])  # differences -0.5, -0.5, 0.5, -0.5
    assert out["mean"] == pytest.approx(-0.25) and out["a_lower"] == 3 and out["n"] == 4
    assert out["ci95_half"] == pytest.approx(3.1824 * 0.5 / 2, abs=1e-3)  # t(3) * sd / sqrt(4)
    with pytest.raises(ValueError, match="2 sequences"):
        paired_difference([1.0], [2.0])


def test_noninferiority_on_a_planted_case():
    """KL(a) = 1.02 KL(b) per sequence: non-inferior at margin 1.05, not at 1.0; 1.10 x is not."""
    b = [1.0, 1.2, 0.9, 1.1, 1.05, 0.95]
    assert noninferior([1.02 * x for x in b], b)["noninferior"]
    assert not noninferior([1.02 * x for x in b], b, margin=1.0)["noninferior"]
    assert not noninferior([1.10 * x for x in b], b)["noninferior"]


def test_seeds_noninferiority_is_the_mean_of_each_seeds_sequence_mean():
    """The seed statistic m_s = KL_s(P) - 1.05 KL_s(1mad) computed from the record by hand, and the
    record's rows are the ten seeds of the protocol."""
    rows = recorded_seeds()["rows"]
    assert [r["seed"] for r in rows] == list(range(10)) and {r["paired"]["n"] for r in rows} == {87}
    ni = seeds_noninferior(rows)
    m = [r["kl_proteus"] - 1.05 * r["kl_1mad"] for r in rows]
    mean = sum(m) / 10
    sd = math.sqrt(sum((x - mean) ** 2 for x in m) / 9)
    assert ni["mean"] == pytest.approx(mean, abs=1e-12)
    assert ni["ci95_half"] == pytest.approx(2.2622 * sd / math.sqrt(10), rel=1e-4)
    assert ni["upper_with_sequence_error"] >= ni["upper"]
    with pytest.raises(ValueError, match="at least 2 seeds"):
        seeds_noninferior(rows[:1])


@pytest.mark.heavy
def test_quick_run_follows_the_protocol():
    result = run_reproduction("proteus-smollm2", "quick", 0)
    rows = {r["method"]: r for r in result["rows"]}
    assert rows["proteus"]["bytes_per_token"] < rows["trellis-hyb"]["bytes_per_token"]
    assert rows["proteus"]["packed_hash"] == rows["proteus+comp+distill"]["packed_hash"]
    assert rows["trellis-1mad"]["packed_hash"] == rows["trellis-1mad+comp+distill"]["packed_hash"]
    assert rows["trellis-1mad"]["kl"] < rows["rtn-2bit-g64"]["kl"]
    assert result["baseline"] == rows["trellis-1mad+comp+distill"]["kl"]
