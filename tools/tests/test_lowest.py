"""What the lowest-versions job installs for each distribution (the resolution itself runs on GitHub)."""

from __future__ import annotations

from pathlib import Path

from icml_tools.lowest import plan
from icml_tools.workspace import find_root, members

ROOT = find_root()


def test_each_plan_holds_every_declared_floor_and_the_test_stack():
    for name, member in members(ROOT).items():
        if not member.published:
            continue
        spec = plan(ROOT, name)
        assert spec["local"][0] == member.path
        assert any(r.startswith("pytest") for r in spec["requirements"])
        assert not any(r.startswith("icml-") for r in spec["requirements"])  # workspace members go --no-deps
        assert spec["tests"] == member.path / "tests"


def test_dependencies_on_the_workspace_become_local_folders():
    compress = plan(ROOT, "icml-compress")
    assert Path("kernels-common") in compress["local"]
    assert any(r.startswith("triton") for r in compress["requirements"])  # icml-kernels' own floors
    stats = plan(ROOT, "icml-stats")
    # its tests use the tools' fuzz helper alone, which needs neither torch nor the tools' assets; torch comes
    # from icml-stats' own `deep` extra (DeSI), at that extra's floor
    # icml-theory (the `dp` extra's accountant) is a workspace distribution: installed from its folder
    assert stats["local"] == [Path("packages/icml-stats"), Path("packages/icml-theory"), Path("tools")]
    assert "torch>=2.6" in stats["requirements"]
    assert not any(r.startswith("transformers") for r in stats["requirements"])
    assert "scikit-learn>=1.7" in stats["requirements"]
    interp = plan(ROOT, "icml-interp")
    assert Path("tools") in interp["local"]  # its tests use the tiny Llama asset
