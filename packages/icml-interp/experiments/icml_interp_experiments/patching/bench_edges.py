"""Benchmark ``eap-vs-exhaustive``: wall time of edge attribution patching (EAP, one gradient; EAP-IG, 5
interpolation steps) against exact exhaustive edge patching (one forward pass per edge) on the same inputs,
and how well the attribution scores track the exact effects (Pearson and Spearman correlation over all edges).

Models: random tiny Llamas (``icml_tools.assets.tiny_llama``: width 64, 4 heads with 4 or 2 key-value heads,
MLP 128, vocabulary 256) with 2 and 4 layers (quick) or 2, 4 and 6 (full), on 4 prompts of 16 tokens whose
corrupt version differs at two positions; the metric is a logit difference at the last position. EAP and
EAP-IG times are the median of 3 repeats, the exhaustive scan runs once. The full budget adds SmolLM2-135M
(about 72k edges) on a 12-token prompt pair: EAP and EAP-IG are timed, the exhaustive scan is estimated as
``n_edges x`` the time of one forward pass (``estimated: true``); the tiny rows carry the same estimate next
to the measured scan, to calibrate it.

Before timing, each model's circuit machinery is checked (the whole graph reproduces the clean metric and
the empty graph the corrupt one); the ratios are left empty when it fails. Everything runs on one torch
thread: on 2 shared cores two threads spin against other processes (SmolLM2's EAP measured 1.2 s on one
thread, 4 to 25 s on two at load 4). The thread count and the 1-minute load average are recorded with each
row, since other processes share the cores.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

import torch
from scipy import stats

from icml_interp.hooks import HookedModel
from icml_interp.patching import (
    build_graph,
    edge_attribution_patching,
    edge_patching,
    evaluate_circuit,
    logit_diff,
)

CLEAN = "We know the Eiffel Tower is located in the city of"
CORRUPT = "We know the Colosseum is located in the city of"
IG_STEPS, REPEATS, PROMPTS, TOKENS, VOCAB = 5, 3, 4, 16, 256
LAYERS = {"quick": (2, 4), "full": (2, 4, 6)}


def _median_seconds(fn: Callable[[], object], repeats: int = REPEATS) -> tuple[float, object]:
    """The median wall time of ``repeats`` calls of ``fn`` and the last call's result."""
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def _machinery_ok(model, clean: torch.Tensor, corrupt: torch.Tensor, metric) -> bool:
    """The whole graph gives the clean metric and the empty graph the corrupt one (to 1e-4)."""
    hooked = HookedModel(model)
    mask = build_graph(hooked).mask
    with torch.no_grad():
        clean_v, corrupt_v = float(metric(hooked(clean))), float(metric(hooked(corrupt)))
    whole = evaluate_circuit(hooked, clean, corrupt, metric, mask)
    empty = evaluate_circuit(hooked, clean, corrupt, metric, torch.zeros_like(mask))
    scale = max(abs(clean_v), abs(corrupt_v), 1.0)
    return abs(whole - clean_v) < 1e-4 * scale and abs(empty - corrupt_v) < 1e-4 * scale


def _forward_seconds(model, ids: torch.Tensor) -> float:
    hooked = HookedModel(model)
    with torch.no_grad():
        seconds, _ = _median_seconds(lambda: hooked(ids))
    return seconds


def _correlations(scores: torch.Tensor, exact: torch.Tensor, mask: torch.Tensor) -> tuple[float, float]:
    a, b = scores[mask].double().numpy(), exact[mask].double().numpy()
    return float(stats.pearsonr(a, b)[0]), float(stats.spearmanr(a, b)[0])


def _timed_attribution(model, clean, corrupt, metric) -> dict:
    """EAP and EAP-IG seconds (median of the repeats) and their scores."""
    eap_s, eap = _median_seconds(
        lambda: edge_attribution_patching(model, clean, corrupt, metric, method="eap")
    )
    ig_s, ig = _median_seconds(
        lambda: edge_attribution_patching(model, clean, corrupt, metric, method="eap-ig", steps=IG_STEPS)
    )
    return {"eap_seconds": eap_s, "eap_ig_seconds": ig_s, "eap": eap, "ig": ig}


def _tiny_row(layers: int, kv_heads: int, seed: int) -> dict:
    from icml_tools.assets import tiny_llama

    model = tiny_llama(
        seed, layers=layers, hidden=64, heads=4, kv_heads=kv_heads, intermediate=128, vocab=VOCAB
    )
    gen = torch.Generator().manual_seed(seed)
    clean = torch.randint(0, VOCAB, (PROMPTS, TOKENS), generator=gen)
    corrupt = clean.clone()
    corrupt[:, [3, 9]] = torch.randint(0, VOCAB, (PROMPTS, 2), generator=gen)
    metric = logit_diff(1, 2)
    correct = _machinery_ok(model, clean, corrupt, metric)
    timed = _timed_attribution(model, clean, corrupt, metric)
    start = time.perf_counter()
    exact = edge_patching(model, clean, corrupt, metric)
    exhaustive = time.perf_counter() - start
    graph = exact.graph
    forward = _forward_seconds(model, clean)
    return _row(
        f"tiny-llama-L{layers}-kv{kv_heads}",
        layers,
        graph.n_edges,
        TOKENS,
        PROMPTS,
        timed,
        exhaustive,
        forward,
        correct,
        estimated=False,
        exact=exact.scores,
        mask=graph.mask,
    )


def _smollm2_row() -> dict:
    from icml_tools.assets import smollm2

    model, tok = smollm2()
    clean = torch.tensor([tok(CLEAN)["input_ids"]])
    corrupt = torch.tensor([tok(CORRUPT)["input_ids"]])
    metric = logit_diff(tok(" Paris")["input_ids"][0], tok(" Rome")["input_ids"][0])
    correct = _machinery_ok(model, clean, corrupt, metric)
    timed = _timed_attribution(model, clean, corrupt, metric)
    forward = _forward_seconds(model, clean)
    n_edges = build_graph(model).n_edges
    return _row(
        "SmolLM2-135M",
        HookedModel(model).n_layers,
        n_edges,
        clean.shape[1],
        1,
        timed,
        n_edges * forward,
        forward,
        correct,
        estimated=True,
    )


def _row(
    model: str,
    layers: int,
    n_edges: int,
    tokens: int,
    prompts: int,
    timed: dict,
    exhaustive: float,
    forward: float,
    correct: bool,
    *,
    estimated: bool,
    exact: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
) -> dict:
    row: dict = {
        "model": model,
        "layers": layers,
        "n_edges": n_edges,
        "tokens": tokens,
        "prompts": prompts,
        "eap_seconds": timed["eap_seconds"],
        "eap_ig_seconds": timed["eap_ig_seconds"],
        "eap_ig_steps": IG_STEPS,
        "exhaustive_seconds": exhaustive,
        "estimated": estimated,
        "forward_seconds": forward,
        "exhaustive_estimate_seconds": n_edges * forward,
        "ratio_exhaustive_eap": exhaustive / timed["eap_seconds"] if correct else None,
        "ratio_exhaustive_eap_ig": exhaustive / timed["eap_ig_seconds"] if correct else None,
    }
    for name, key in (("eap", "eap"), ("eap_ig", "ig")):
        pearson = spearman = None  # no exact scores to compare with (SmolLM2)
        if exact is not None and mask is not None:
            pearson, spearman = _correlations(timed[key].scores, exact, mask)
        row[f"pearson_{name}"], row[f"spearman_{name}"] = pearson, spearman
    row.update(
        {
            "completeness_error_eap_ig": float(timed["ig"].scores[0].sum())
            - (timed["ig"].corrupt - timed["ig"].clean),
            "metric_change": timed["ig"].corrupt - timed["ig"].clean,
            "correct": correct,
            "threads": torch.get_num_threads(),
            "load_1min": os.getloadavg()[0],
        }
    )
    return row


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    """One row per tiny Llama (layers x key-value heads), and for ``full`` one SmolLM2 row."""
    rows = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for layers in LAYERS[budget]:
            for kv_heads in (4, 2):
                rows.append(_tiny_row(layers, kv_heads, seed))
        if budget == "full":
            rows.append(_smollm2_row())
    finally:
        torch.set_num_threads(threads)
    return rows
