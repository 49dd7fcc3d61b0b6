"""Benchmark ``agents-backends``: SmolLM2-135M-Instruct through :class:`~icml_agents.backends.HFLocalBackend`,
batched (``batch_size=8``) against one prompt at a time, with transformers' own batched ``generate`` on the
same left-padded prompts as a reference; and the response cache's hit against miss latency, one prompt per
call. Medians over repetitions, ratios measured in the same run.

Correctness first: the batched greedy tokens must equal the one-at-a-time tokens and transformers'
``generate``, else no timings are reported.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

BUDGETS = {"quick": {"prompts": 8, "tokens": 16, "reps": 2}, "full": {"prompts": 16, "tokens": 32, "reps": 5}}
QUESTIONS = [
    "What is the capital of France?",
    "Name a primary colour.",
    "What is 2 + 2?",
    "Write one sentence about the sea.",
    "What do bees make?",
    "Give a synonym of happy.",
    "What is the opposite of cold?",
    "Name a planet of the solar system.",
    "What language is spoken in Spain?",
    "How many legs does a spider have?",
    "What is frozen water called?",
    "Name a fruit that is yellow.",
    "What is the largest ocean?",
    "Which animal barks?",
    "What colour is the sky on a clear day?",
    "Name a musical instrument with strings.",
]


def _median_seconds(fn: Callable[[], T], reps: int) -> tuple[float, T]:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def _transformers_batched(backend, conversations, tokens: int) -> list[tuple[int, ...]]:
    import torch

    tok = backend.tokenizer
    ids = [tok.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in conversations]
    rows = [tok(text, add_special_tokens=False)["input_ids"] for text in ids]
    x, mask = backend.left_pad(rows)  # the same left padding as ours
    out = []
    for start in range(0, len(rows), backend.batch_size):
        part = slice(start, start + backend.batch_size)
        sub_x, sub_mask = x[part], mask[part]
        keep = sub_mask.any(0)  # drop columns that are padding in every row of this batch
        with torch.no_grad():
            gen = backend.model.generate(
                sub_x[:, keep],
                attention_mask=sub_mask[:, keep],
                do_sample=False,
                max_new_tokens=tokens,
                pad_token_id=backend.pad_id,
            )
        for row in gen[:, int(keep.sum()) :].tolist():
            cut = next((i + 1 for i, t in enumerate(row) if t in backend.eos_ids), len(row))
            out.append(tuple(row[:cut]))
    return out


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    import torch

    from icml_agents.backends import CachedBackend, HFLocalBackend
    from icml_tools.assets import smollm2

    cfg = BUDGETS[budget]
    torch.manual_seed(seed)
    model, tokenizer = smollm2()
    batched = HFLocalBackend(model, tokenizer, batch_size=8)
    single = HFLocalBackend(model, tokenizer, batch_size=1)
    conversations = [[{"role": "user", "content": q}] for q in QUESTIONS[: cfg["prompts"]]]
    n = cfg["tokens"]

    t_batched, out_b = _median_seconds(lambda: batched.chat(conversations, max_new_tokens=n), cfg["reps"])
    t_single, out_s = _median_seconds(
        lambda: [single.chat([c], max_new_tokens=n)[0] for c in conversations], cfg["reps"]
    )
    t_ref, out_ref = _median_seconds(lambda: _transformers_batched(batched, conversations, n), cfg["reps"])
    correct = [c.token_ids for c in out_b] == [c.token_ids for c in out_s] == out_ref
    tokens = sum(c.completion_tokens for c in out_b)
    common = {
        "model": "SmolLM2-135M-Instruct",
        "prompts": len(conversations),
        "max_new_tokens": n,
        "generated_tokens": tokens,
        "correct": correct,
        "threads": torch.get_num_threads(),
        "load_1min": os.getloadavg()[0],
    }
    rows = []
    for name, seconds in [
        ("one prompt at a time", t_single),
        ("batched (8)", t_batched),
        ("transformers generate, batched (8)", t_ref),
    ]:
        rows.append(
            {
                **common,
                "case": name,
                "seconds": seconds if correct else None,
                "tokens_per_s": tokens / seconds if correct else None,
                "speedup_vs_one_at_a_time": t_single / seconds if correct else None,
            }
        )

    with tempfile.TemporaryDirectory() as tmp:
        cached = CachedBackend(single, Path(tmp) / "cache.sqlite")
        miss: list[float] = []
        hit: list[float] = []
        for c in conversations:
            for bucket in (miss, hit):
                start = time.perf_counter()
                cached.chat([c], max_new_tokens=n)
                bucket.append(time.perf_counter() - start)
        exact = cached.misses == len(conversations) and cached.hits == len(conversations)
        cached.cache.close()
    m, h = statistics.median(miss), statistics.median(hit)
    rows.append(
        {
            **common,
            "case": "cache miss (one prompt per call)",
            "seconds": m,
            "tokens_per_s": None,
            "speedup_vs_one_at_a_time": None,
            "correct": exact,
        }
    )
    rows.append(
        {
            **common,
            "case": "cache hit (one prompt per call)",
            "seconds": h,
            "tokens_per_s": None,
            "speedup_vs_one_at_a_time": None,
            "miss_over_hit": m / h,
            "correct": exact,
        }
    )
    return rows
