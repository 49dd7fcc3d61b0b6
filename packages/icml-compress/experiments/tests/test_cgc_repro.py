"""The cgc-smollm2 reproduction's helpers (fast) and its quick run (heavy: SmolLM2, about 2 minutes)."""

import numpy as np
import pytest
import torch

from icml_compress_experiments.cgc.repro import (
    RATIOS,
    group_summary,
    headroom,
    method_config,
    paired_bootstrap,
)
from icml_tools.repro import run_reproduction


def test_headroom_counts_far_partners_and_matches_exactly():
    inf = 9.0
    # layers in blocks 0..3: 0 pairs best with 2, 1 with 3 (both non-adjacent), 2 with 0, 3 with 1
    c = np.array([[0, 5, -2, inf], [5, 0, inf, -3], [-2, inf, 0, 4], [inf, -3, 4, 0]], dtype=float)
    alone = np.array([1.0, 2.0, 3.0, 4.0])
    fams = {
        "m.*.q": {"layers": [f"m.{i}.q" for i in range(4)], "costs": c.tolist(), "alone": alone.tolist()},
        "m.*.o": {"layers": ["m.0.o"]},  # not shared: ignored
    }
    h = headroom(fams)
    assert h["nonadjacent_fraction"] == 1.0 and h["layers"] == 4
    assert h["adjacent_pairing_cost"] == pytest.approx((5 + 1 + 2) + (4 + 3 + 4))  # (0,1) and (2,3)
    assert h["min_matching_cost"] == pytest.approx((-2 + 1 + 3) + (-3 + 2 + 4))  # (0,2) and (1,3)
    assert h["matching_gain"] == pytest.approx(1 - 5 / 19)


def test_group_summary_flags_groups_that_are_not_runs():
    model = torch.nn.Module()
    model.icml_sharing = {
        "groups": [
            {"layers": ["m.0.q", "m.1.q"]},
            {"layers": ["m.2.q", "m.5.q", "m.9.q"]},
            {"layers": ["m.3.q"]},
        ]
    }
    assert group_summary(model) == {"shared_groups": 2, "nonadjacent_groups": 1, "sizes": [2, 3]}


def test_bootstrap_interval_and_configs():
    lo, hi = paired_bootstrap(np.array([-1.0, -1.2, -0.8, -1.1, -0.9]))
    assert -1.2 <= lo < -1.0 < hi <= -0.8
    assert RATIOS == (0.2, 0.3)
    assert method_config("basis-sharing", 0.2, "full").max_group == 2
    assert (
        method_config("cgc", 0.3, "quick", 2).seed == 2 and method_config("cgc", 0.3, "quick").max_blocks == 6
    )


@pytest.mark.heavy
def test_quick_run_follows_the_protocol():
    result = run_reproduction("cgc-smollm2", "quick", 0)
    removed = {(r["ratio"], r["method"]): r["removed"] for r in result["rows"]}
    assert all(abs(v - k[0]) < 0.005 for k, v in removed.items())
    assert set(result["headroom"]) == set(RATIOS)
