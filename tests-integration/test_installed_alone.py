"""Each distribution builds without workspace sources, installs alone in a fresh virtual environment
(its wheel, the icml-kernels wheel where it depends on it, and its PyPI dependencies) and works there.

Slow: building seven wheels and seven environments takes minutes. Run with
``uv run pytest -m slow tests-integration`` (``-k icml-stats`` for one).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from icml_tools.workspace import find_root, members

pytestmark = pytest.mark.slow
ROOT = find_root(Path(__file__).parent)
UV = os.environ.get("UV", "uv")

# One call of each distribution's public API, checked against a known answer.
SMOKE = {
    "icml-kernels": """
        import torch, icml_kernels
        y = icml_kernels.fwht(torch.ones(2, 8))
        assert torch.allclose(y[:, 0], torch.full((2,), 8 ** 0.5)) and torch.allclose(y[:, 1:], torch.zeros(2, 7))
    """,
    "icml-theory": """
        import numpy as np
        from icml_theory.boolean import fourier_coefficients, majority
        coeffs = fourier_coefficients(majority(3))  # Maj3 = (x1 + x2 + x3 - x1 x2 x3) / 2
        assert np.allclose(sorted(np.abs(coeffs)), [0, 0, 0, 0, 0.5, 0.5, 0.5, 0.5])
        from icml_theory.privacy import GaussianRDP, gaussian_tradeoff, optimal_tradeoff
        alphas = np.logspace(-6, -0.1, 20)
        curve = optimal_tradeoff(GaussianRDP(sigma=1.0), alphas)  # sound: never above the exact G_1
        assert np.all(curve.beta <= gaussian_tradeoff(alphas, 1.0) + 1e-9) and np.all(curve.beta > 0)
    """,
    "icml-compress": """
        import torch
        from icml_compress.baselines import rtn_quantize
        w = torch.randn(8, 256)
        q = rtn_quantize(w, bits=8, group_size=128)
        assert q.dequantized.shape == w.shape and bool(((q.dequantized - w).abs() <= q.scale.repeat_interleave(128, -1) / 2 + 1e-6).all())
    """,
    "icml-stats": """
        import numpy as np
        from sklearn.linear_model import LinearRegression
        from icml_stats.conformal import coverage, split_conformal_interval
        rng = np.random.default_rng(0)
        x = rng.normal(size=(6000, 1)); y = 2 * x[:, 0] + rng.normal(size=6000)
        intervals = split_conformal_interval(LinearRegression(), x[:1000], y[:1000], x[1000:2000], y[1000:2000], x[2000:], alpha=0.1)
        assert 0.87 < coverage(y[2000:], intervals) < 0.93
    """,
    "icml-generative": """
        import torch
        from icml_generative.sampling import karras_sigmas
        s = karras_sigmas(10, sigma_min=0.002, sigma_max=80.0)
        assert abs(float(s[0]) - 80.0) < 1e-4 and bool((s[:-2] > s[1:-1]).all())
    """,
    "icml-interp": """
        import torch
        from torch import nn
        from icml_interp.lens import logit_lens

        class Block(nn.Module):  # returns the residual stream, like a Llama decoder layer
            def __init__(self):
                super().__init__()
                self.mlp = nn.Linear(8, 8)

            def forward(self, h):
                return h + torch.tanh(self.mlp(h))

        class Inner(nn.Module):  # the Llama-family layout, in plain torch (transformers is not installed)
            def __init__(self):
                super().__init__()
                self.embed_tokens = nn.Embedding(11, 8)
                self.layers = nn.ModuleList(Block() for _ in range(3))
                self.norm = nn.LayerNorm(8)

        class TinyLM(nn.Module):
            def __init__(self):
                super().__init__()
                self.model, self.lm_head = Inner(), nn.Linear(8, 11)

            def get_input_embeddings(self):
                return self.model.embed_tokens

            def forward(self, input_ids, use_cache=False):
                h = self.model.embed_tokens(input_ids)
                for layer in self.model.layers:
                    h = layer(h)
                return self.lm_head(self.model.norm(h))

        torch.manual_seed(0)
        lm, ids = TinyLM(), torch.tensor([[1, 5, 7, 2]])
        lens = logit_lens(lm, ids)
        assert lens.shape == (4, 1, 4, 11) and torch.allclose(lens[-1], lm(ids), atol=1e-6)
    """,
    "icml-agents": """
        import torch
        from icml_agents.rl import group_relative_advantages
        adv = group_relative_advantages(torch.tensor([1.0, 0.0, 1.0, 0.0]), group_size=2)
        assert torch.allclose(adv.reshape(2, 2).mean(dim=1), torch.zeros(2), atol=1e-6)
    """,
}


def run(*args: str, cwd: Path = ROOT) -> str:
    proc = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    built = {}
    for name in SMOKE:
        run(UV, "build", "--package", name, "--no-sources", "--wheel", "--out-dir", str(out / name))
        (wheel,) = (out / name).glob("*.whl")
        built[name] = wheel
    return built


def test_every_published_distribution_has_a_smoke_check():
    assert set(SMOKE) == {n for n, m in members(ROOT).items() if m.published}


@pytest.mark.parametrize("name", sorted(SMOKE))
def test_installed_alone(name, wheels, tmp_path):
    wheel = wheels[name]
    with zipfile.ZipFile(wheel) as zf:
        meta = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    requires = [line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    assert not any("file:" in r or "workspace" in r for r in requires), requires
    needs_kernels = any(r.startswith("icml-kernels") for r in requires)
    if needs_kernels:
        assert any(r.startswith("icml-kernels") and "<" in r for r in requires), "icml-kernels must be a range"

    venv = tmp_path / "venv"
    run(UV, "venv", "--quiet", "--python", sys.executable, str(venv))
    python = venv / "bin" / "python"
    to_install = [str(wheel)] + ([str(wheels["icml-kernels"])] if needs_kernels and name != "icml-kernels" else [])
    run(UV, "pip", "install", "--quiet", "--python", str(python), *to_install)

    installed = run(UV, "pip", "list", "--python", str(python), "--format", "freeze")
    icml = sorted(line.split("==")[0] for line in installed.splitlines() if line.startswith("icml-"))
    assert icml == sorted({name} | ({"icml-kernels"} if needs_kernels else set()))

    module = name.replace("-", "_")
    script = f"import {module}\nassert {module}.__version__\n" + textwrap.dedent(SMOKE[name])
    script += "\nimport importlib.util\nassert importlib.util.find_spec('icml_tools') is None\n"
    run(str(python), "-c", script, cwd=tmp_path)
