"""The rules of the CA-learnability experiments, fixed before any training run, and their spectral measures.

``REPRO_RULES``: the 16 rules of the ``ca-junta`` reproduction: named Life-like rules of the CA literature
(from Life to chaotic ones), two totalistic extremes (majority vote and parity), two random tables (one
isotropic), three parities of a few cells and the all-nine AND. ``SWEEP_RULES``: those and 14 more for the
paper-scale sweep script.

The set was revised once, at the headroom check and before any training run of the reproduction: the first
16 (Life-like rules, the identity, majority, parity, two random tables) made the two predictors nearly
collinear (Spearman of W^{<=3} with minus the total influence 0.95 at k = 1, 0.81 at k = 2), so no
accuracy could tell them apart. Parities of 2, 4 and 5 cells (low total influence, all weight at one
degree) and T9 (nearly constant) replaced HighLife, LongLife, Diamoeba and the identity, which moved to the
sweep; the revised set gives 0.79 at k = 1 and 0.54 at k = 2 (computed from the spectra alone).

``spectral_measures(rule, k)`` computes, from the exact truth table of the ``k``-step map (``k <= 2``, up to
25 inputs), the predictors the reproduction correlates with accuracy: ``W^{<=d}`` for every ``d``, the
total influence and the best-junta weights. They are deterministic functions of the rule table, so they
are cached as JSON under ``icml_tools.assets.cache_dir() / "ca-spectra"`` (about 3 s per rule at ``k = 2``
to build; 2 kB each).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import torch

from icml_theory.boolean import (
    fourier_coefficients,
    junta_weights,
    spectral_weights,
    total_influence,
)
from icml_theory.ca import Rule, as_pm1, local_table
from icml_tools.assets import cache_dir


def _named(rulestring: str, name: str) -> Rule:
    return Rule.life_like(rulestring, name=f"{name} {rulestring}")


def _repro_rules() -> list[Rule]:
    return [
        _named("B3/S23", "Life"),
        _named("B2/S", "Seeds"),
        _named("B3678/S34678", "Day&Night"),
        _named("B1357/S1357", "Replicator"),
        Rule.totalistic(range(5, 10), name="Majority T56789"),
        Rule.totalistic(range(1, 10, 2), name="Parity T13579"),
        _named("B4678/S35678", "Anneal"),
        _named("B3/S12345", "Maze"),
        _named("B368/S245", "Morley"),
        _named("B36/S125", "2x2"),
        Rule.random(0, name="random-0"),
        Rule.random(1, symmetric=True, name="random-sym-1"),
        Rule.from_function(_north_xor_south, name="N xor S"),
        Rule.from_function(_plus_parity_without_centre, name="NSEW parity"),
        Rule.from_function(_plus_parity, name="Plus parity"),
        Rule.totalistic([9], name="All-9 T9"),
    ]


def _north_xor_south(cells: torch.Tensor) -> torch.Tensor:
    return cells[:, 0, 1] ^ cells[:, 2, 1]


def _plus_parity_without_centre(cells: torch.Tensor) -> torch.Tensor:
    return cells[:, 0, 1] ^ cells[:, 2, 1] ^ cells[:, 1, 0] ^ cells[:, 1, 2]


def _plus_parity(cells: torch.Tensor) -> torch.Tensor:
    return _plus_parity_without_centre(cells) ^ cells[:, 1, 1]


def _north(cells: torch.Tensor) -> torch.Tensor:
    return cells[:, 0, 1]


def _north_and_west(cells: torch.Tensor) -> torch.Tensor:
    return cells[:, 0, 1] & cells[:, 1, 0]


def _sweep_extra() -> list[Rule]:
    return [
        _named("B36/S23", "HighLife"),
        _named("B/S012345678", "Identity"),
        _named("B35678/S5678", "Diamoeba"),
        _named("B345/S5", "LongLife"),
        _named("B3/S45678", "Coral"),
        _named("B1/S1", "Gnarl"),
        _named("B357/S1358", "Amoeba"),
        _named("B345/S4567", "Assimilation"),
        _named("B378/S235678", "Coagulations"),
        _named("B3678/S235678", "Stains"),
        _named("B45678/S2345", "WalledCities"),
        _named("B3/S012345678", "Flakes"),
        Rule.totalistic([5], name="Exactly-5 T5"),
        Rule.random(2, density=0.25, name="random-0.25-2"),
        Rule.random(3, symmetric=True, name="random-sym-3"),
        Rule.from_function(_north, name="Shift-north"),
        Rule.from_function(_north_and_west, name="North-and-west"),
    ]


REPRO_RULES = _repro_rules()
SWEEP_RULES = REPRO_RULES + _sweep_extra()


def _key(rule: Rule, k: int) -> str:
    digest = hashlib.sha256(rule.table.numpy().tobytes() + bytes([k])).hexdigest()[:16]
    return f"k{k}-{digest}"


def spectral_measures(rule: Rule, k: int, folder: Path | None = None) -> tuple[dict, bool]:
    """``({"W_le": [W^{<=0}, ..., W^{<=n}], "total_influence", "junta": [...], "density"}, cache_hit)``."""
    path = (folder or cache_dir() / "ca-spectra") / f"{_key(rule, k)}.json"
    if path.exists():
        return json.loads(path.read_text()), True
    start = time.perf_counter()
    coeffs = fourier_coefficients(
        as_pm1(local_table(rule, k)), dtype=torch.float32
    )  # exact for ±1 at n <= 25
    weights = spectral_weights(coeffs)
    measures = {
        "rule": rule.name,
        "k": k,
        "W_le": weights.cumsum(0).tolist(),
        "W": weights.tolist(),
        "total_influence": float(total_influence(coeffs)),
        "junta": junta_weights(coeffs).tolist(),
        "density": float((1.0 - coeffs[0].double()) / 2),  # fraction of windows mapped to a live cell
        "seconds": time.perf_counter() - start,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(measures))
    os.replace(tmp, path)  # atomic: a half-written file is never read
    return measures, False
