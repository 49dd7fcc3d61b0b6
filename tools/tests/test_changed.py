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
    # written out: compress and generative need the kernels, theory[torch] needs them, stats[dp] needs
    # theory (a dependant of a dependant); agents and interp use no kernel
    assert names(["kernels-common/src/icml_kernels/fwht/op.py"]) == {
        "icml-kernels",
        "icml-compress",
        "icml-generative",
        "icml-theory",
        "icml-stats",
    }


def test_a_library_change_selects_the_packages_whose_experiments_use_it():
    # icml-agents-experiments (similarity-cooperation) and icml-theory-experiments (markov-stages) depend on
    # icml-interp[hf]; their tests run with icml-agents and icml-theory
    assert names(["packages/icml-interp/src/icml_interp/__init__.py"]) == {
        "icml-interp",
        "icml-agents",
        "icml-theory",
    }
    # icml-theory: stats[dp] depends on the library; no experiments area of another package does
    assert names(["packages/icml-theory/src/icml_theory/__init__.py"]) == {"icml-theory", "icml-stats"}


@pytest.mark.parametrize(
    "shared",
    [
        "uv.lock",
        "pyproject.toml",
        ".ci/run",
        "tools/src/icml_tools/assets.py",
        ".github/workflows/ci.yml",
        "tests-integration/test_installed_alone.py",
        "conftest.py",  # the hypothesis profile and the one_torch_thread fixture of every test run
    ],
)
def test_shared_files_select_everything(shared):
    assert names([shared]) == ALL


def test_docs_outside_members_select_nothing():
    assert names(["README.md"]) == set()
    # only the root conftest.py is shared: a package's own conftest selects that package
    assert names(["packages/icml-stats/tests/conftest.py"]) == {"icml-stats"}
    assert select(["README.md"], ROOT) == []


def test_dependants_is_transitive():
    found = members(ROOT)
    assert dependants(found, {"icml-kernels"}) >= {"icml-kernels", "icml-compress", "icml-theory"}
    assert dependants(found, {"icml-stats"}) == {"icml-stats", "icml-stats-experiments"}
