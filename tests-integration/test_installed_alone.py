"""Each published distribution builds without workspace sources into a wheel that holds only its library,
installs alone in a fresh virtual environment (its wheel, the icml-kernels wheel where it depends on it, and
its PyPI dependencies) and runs the ten-line example of its README's "Quick start" section there.

Slow: building seven wheels and seven environments takes minutes. Run with
``uv run pytest -m slow tests-integration`` (``-k icml-stats`` for one). With ``ICML_WHEEL_DIR`` set (the
release job), the wheels found there are the ones tested: the exact files that get published.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath

import pytest

from icml_tools.workspace import find_root, members

pytestmark = pytest.mark.slow
ROOT = find_root(Path(__file__).parent)
UV = os.environ.get("UV", "uv")
PUBLISHED = {n: m for n, m in members(ROOT).items() if m.published}
# extras a README's quick start needs (from PyPI; no other icml distribution is installed)
EXTRAS = {"icml-interp": "hf"}
# module names that belong to the unpublished experiments members, never to a wheel
EXPERIMENT_MODULES = re.compile(r"^(repro|bench|testbed|toy)(_.*)?$")


def run(*args: str, cwd: Path = ROOT) -> str:
    proc = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def quick_start(name: str) -> str:
    """The first python block under the README's ``## Quick start`` heading."""
    readme = (ROOT / PUBLISHED[name].path / "README.md").read_text()
    section = re.search(r"^## Quick start\n(.*?)(?=^## |\Z)", readme, re.S | re.M)
    assert section, f"{name}'s README has no '## Quick start' section"
    block = re.search(r"```python\n(.*?)```", section.group(1), re.S)
    assert block, f"{name}'s Quick start has no python block"
    return block.group(1)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    given = Path(os.environ["ICML_WHEEL_DIR"]) if os.environ.get("ICML_WHEEL_DIR") else None
    out = tmp_path_factory.mktemp("dist")
    built = {}
    for name in PUBLISHED:
        module = name.replace("-", "_")
        found = sorted(given.glob(f"{module}-*.whl")) if given else []
        if found:
            (built[name],) = found
            continue
        run(UV, "build", "--package", name, "--no-sources", "--wheel", "--out-dir", str(out / name))
        (wheel,) = (out / name).glob("*.whl")
        built[name] = wheel
    return built


def test_every_published_distribution_has_a_short_quick_start():
    for name in PUBLISHED:
        lines = [line for line in quick_start(name).splitlines() if line.strip()]
        assert 3 <= len(lines) <= 15, f"{name}'s quick start has {len(lines)} lines"


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_the_wheel_holds_only_the_library(name, wheels):
    module = name.replace("-", "_")
    with zipfile.ZipFile(wheels[name]) as zf:
        files = [PurePosixPath(n) for n in zf.namelist()]
        code = {
            str(f): zf.read(str(f)).decode() for f in files if f.suffix in (".py", ".pyi", ".txt", ".json")
        }
    packages = {f.parts[0] for f in files if not f.parts[0].endswith(".dist-info")}
    assert packages == {module}, packages
    assert PurePosixPath(module, "py.typed") in files
    modules = [f for f in files if f.suffix == ".py"]
    assert not [str(f) for f in modules if EXPERIMENT_MODULES.match(f.stem)]
    assert not [str(f) for f in files if any(EXPERIMENT_MODULES.match(part) for part in f.parts[:-1])]
    assert not [path for path, text in code.items() if "icml_tools" in text or "_experiments" in text]


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_installed_alone(name, wheels, tmp_path):
    wheel = wheels[name]
    with zipfile.ZipFile(wheel) as zf:
        meta = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    requires = [
        line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Requires-Dist:")
    ]
    assert not any("file:" in r or "workspace" in r for r in requires), requires
    base = [r for r in requires if "extra ==" not in r]
    needs_kernels = any(r.startswith("icml-kernels") for r in base)
    kernel_requirements = [r for r in requires if r.startswith("icml-kernels")]
    assert all("<" in r for r in kernel_requirements), "icml-kernels must be pinned to a range"

    venv = tmp_path / "venv"
    run(UV, "venv", "--quiet", "--python", sys.executable, str(venv))
    python = venv / "bin" / "python"
    target = f"{wheel}[{EXTRAS[name]}]" if name in EXTRAS else str(wheel)
    to_install = [target] + ([str(wheels["icml-kernels"])] if needs_kernels else [])
    run(UV, "pip", "install", "--quiet", "--python", str(python), *to_install)

    installed = run(UV, "pip", "list", "--python", str(python), "--format", "freeze")
    icml = sorted(line.split("==")[0] for line in installed.splitlines() if line.startswith("icml-"))
    assert icml == sorted({name} | ({"icml-kernels"} if needs_kernels else set()))

    module = name.replace("-", "_")
    script = f"import {module}\nassert {module}.__version__\n" + quick_start(name)
    script += "\nimport importlib.util\nassert importlib.util.find_spec('icml_tools') is None\n"
    run(str(python), "-c", script, cwd=tmp_path)


def test_the_privacy_accountant_installs_without_torch(wheels, tmp_path):
    """``pip install icml-theory`` (no extras): the accountant works, torch is not even importable, and the
    torch-based parts say which extra they need."""
    venv = tmp_path / "venv"
    run(UV, "venv", "--quiet", "--python", sys.executable, str(venv))
    python = venv / "bin" / "python"
    run(UV, "pip", "install", "--quiet", "--python", str(python), str(wheels["icml-theory"]))
    script = """
import importlib.util
import icml_theory
from icml_theory.privacy import OptimalRDPAccountant
acc = OptimalRDPAccountant().step(noise_multiplier=1.0, sample_rate=0.01, num_steps=1000)
eps = acc.get_epsilon(1e-5)
assert 2.0 < eps < 2.11 and eps <= acc.get_epsilon(1e-5, method="cks"), eps
assert importlib.util.find_spec("torch") is None
for name in ("majority", "ca"):  # icml_theory.boolean's majority, the icml_theory.ca subpackage
    try:
        getattr(icml_theory, name)
    except ImportError as exc:
        assert "icml-theory[torch]" in str(exc), exc
    else:
        raise AssertionError(f"icml_theory.{name} imported without torch")
"""
    run(str(python), "-c", script, cwd=tmp_path)
