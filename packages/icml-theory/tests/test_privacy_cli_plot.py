"""The CLI prints epsilon by every method and writes the plot."""

import re

import pytest

from icml_theory.cli import main


def test_cli_prints_every_method_and_writes_the_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "curves.png"
    assert (
        main(
            ["privacy", "--sigma", "1", "--q", "0.05", "--steps", "50", "--delta", "1e-5", "--plot", str(png)]
        )
        == 0
    )
    out = capsys.readouterr().out
    eps = {k: float(v) for k, v in re.findall(r"(optimal|CKS|Mironov)[^\n]*epsilon = ([0-9.]+)", out)}
    assert set(eps) == {"optimal", "CKS", "Mironov"}
    assert eps["optimal"] <= eps["CKS"] <= eps["Mironov"]
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"


def test_cli_bad_input(capsys):
    assert main(["privacy", "--sigma", "-1", "--q", "0.05", "--steps", "5", "--plot", ""]) == 2
    assert "noise_multiplier" in capsys.readouterr().err
    assert main(["privacy", "--sigma", "1", "--q", "0.05", "--steps", "5", "--delta", "2", "--plot", ""]) == 2
    assert "delta" in capsys.readouterr().err
