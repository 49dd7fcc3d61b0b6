from __future__ import annotations

import pytest

from icml_tools.changed import select
from icml_tools.workspace import dependants, find_root, members

ROOT = find_root()
ALL = {
    "icml-kernels",
    "icml-compress",
    "icml-generative",
    "icml-interp",
    "icml-stats",
    "icml-agents",
    "icml-theory",
}


def names(files):
    return {c["name"] for c in select(files, ROOT)}


EXPERIMENTS = {f"{n}-experiments" for n in ALL}


def test_members_are_the_seven_distributions_their_experiments_and_the_tools():
    found = members(ROOT)
    assert set(found) == ALL | EXPERIMENTS | {"icml-tools"}
    assert not any(found[n].published for n in EXPERIMENTS | {"icml-tools"})
    assert all(found[n].published for n in ALL)
    assert str(found["icml-kernels"].path) == "kernels-common"
    assert all(str(found[f"{n}-experiments"].path) == f"{found[n].path}/experiments" for n in ALL)


def test_a_package_change_selects_that_package():
    assert names(["packages/icml-stats/src/icml_stats/__init__.py"]) == {"icml-stats"}


def test_an_experiments_change_selects_its_package_only():
    assert names(["packages/icml-stats/experiments/icml_stats_experiments/seqci/repro.py"]) == {"icml-stats"}
    assert names(["kernels-common/experiments/icml_kernels_experiments/fwht/bench.py"]) == {"icml-kernels"}


def test_a_kernel_change_selects_every_dependant():
    found = members(ROOT)
    expected = {"icml-kernels"}
    # dependants of dependants too (icml-stats' dp extra needs icml-theory, which needs the kernels)
    while True:
        more = {n for n, m in found.items() if m.published and expected & set(m.dependencies)} - expected
        if not more:
            break
        expected |= more
    assert names(["kernels-common/src/icml_kernels/fwht/op.py"]) == expected
    assert {"icml-compress", "icml-theory", "icml-stats"} <= expected


@pytest.mark.parametrize(
    "shared",
    [
        "uv.lock",
        "pyproject.toml",
        ".ci/run",
        "tools/src/icml_tools/assets.py",
        ".github/workflows/ci.yml",
        "tests-integration/test_installed_alone.py",
    ],
)
def test_shared_files_select_everything(shared):
    assert names([shared]) == ALL


def test_docs_outside_members_select_nothing():
    assert names(["README.md"]) == set()
    assert select(["README.md"], ROOT) == []


def test_dependants_is_transitive():
    found = members(ROOT)
    assert dependants(found, {"icml-kernels"}) >= {"icml-kernels", "icml-compress", "icml-theory"}
    assert dependants(found, {"icml-stats"}) == {"icml-stats", "icml-stats-experiments"}
