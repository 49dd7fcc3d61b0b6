"""The RaGEP testbed: the task corpus (rules checked on decoded text), the cache round trip of a tiny
config trained for 20 steps, and the routing diagnostic (fast)."""

from dataclasses import replace
from itertools import accumulate

import pytest
import torch

from icml_compress_experiments.ragep import testbed as tb
from icml_compress_experiments.ragep.testbed import (
    TASKS,
    Corpus,
    TestbedConfig,
    decode,
    heldout,
    make_corpus,
    normalized_mutual_information,
    pretrained,
    routing_specialisation,
    split_seed,
    task_accuracy,
)

TINY = TestbedConfig(
    n_layers=2,
    hidden=16,
    intermediate=32,
    n_experts=4,
    n_heads=2,
    n_kv_heads=1,
    seq_len=24,
    steps=20,
    batch=8,
    eval_n=16,
)

# The rules again, written on token names (independent of the module's apply_rule).
PERM_NAMES = {f"w{i}": f"w{int(p)}" for i, p in enumerate(tb.PERM)}
RULES = {
    "copy": lambda x: x,
    "reverse": lambda x: x[::-1],
    "increment": lambda x: [str((int(v) + 1) % 10) for v in x],
    "sort": lambda x: sorted(x, key=int),
    "cummax": lambda x: [str(v) for v in accumulate((int(v) for v in x), max)],
    "translate": lambda x: [PERM_NAMES[v] for v in x],
    "double": lambda x: [v for v in x for _ in (0, 1)],
}


def test_corpus_is_deterministic_per_seed_and_differs_across_seeds():
    a, b, c = make_corpus(64, 3), make_corpus(64, 3), make_corpus(64, 4)
    for field in ("ids", "answer_mask", "task"):
        assert torch.equal(getattr(a, field), getattr(b, field))
    assert not torch.equal(a.ids, c.ids)


def test_corpus_layout():
    n, seq_len = 200, 40
    c = make_corpus(n, 0, seq_len=seq_len)
    assert c.ids.shape == c.answer_mask.shape == (n, seq_len) and c.task.shape == (n,) and len(c) == n
    assert c.ids.dtype == c.task.dtype == torch.int64 and c.answer_mask.dtype == torch.bool
    assert c.ids.min() >= 0 and c.ids.max() < tb.VOCAB
    assert set(c.task.tolist()) == set(range(len(TASKS)))  # 200 draws of 8 tasks: all present
    assert (c.ids[:, 0] == tb.BOS).all() and torch.equal(c.ids[:, 1], tb.TASK0 + c.task)
    assert not c.answer_mask[:, -1].any() and (c.answer_mask.sum(1) >= 1).all()
    assert (c.ids[:, 2:] != tb.PAD).all()  # full sequences, no padding
    sub = c.subset(c.task == 2)
    assert isinstance(sub, Corpus) and (sub.task == 2).all() and len(sub) == int((c.task == 2).sum())


def test_answers_follow_each_task_rule_and_the_mask_points_at_them():
    c = make_corpus(160, 7, seq_len=48)
    assert sorted(tb.PERM.tolist()) == list(range(16)) and all(p != i for i, p in enumerate(tb.PERM))
    checked = dict.fromkeys(TASKS, 0)
    for ids, mask, task in zip(c.ids, c.answer_mask, c.task, strict=True):
        name, toks = TASKS[int(task)], decode(ids).split()
        assert toks[:2] == ["<bos>", f"<{name}>"]
        answer_at = {t + 1 for t in mask.nonzero().flatten().tolist()}  # positions of answer tokens
        if name == "markov":
            want = set()
            for j in range(3, len(toks)):
                prev, nxt = int(toks[j - 1][1:]), int(toks[j][1:])
                assert nxt in tb.MARKOV_SUCCESSORS[prev]
                if prev < 8:  # a one-successor state: the next token is an answer
                    want.add(j)
            assert answer_at == want
            checked[name] += 1
            continue
        want, pos = set(), 2
        while pos < len(toks):
            sep = toks.index(">", pos) if ">" in toks[pos:] else len(toks)
            x = toks[pos:sep]
            end = toks.index("|", sep) if "|" in toks[sep:] else len(toks)
            y = toks[sep + 1 : end]
            expected = RULES[name](x)
            if sep < len(toks):  # the input is complete: y is (a prefix of) the rule's answer
                assert y == expected[: len(y)]
                assert end == len(toks) or len(y) == len(expected)
                want |= set(range(sep + 1, end))
                checked[name] += 1
            pos = end + 1
        assert answer_at == want
    assert min(checked.values()) >= 10


def test_tasks_subset_heldout_splits_and_bad_input():
    only = make_corpus(32, 1, tasks=["sort", 6])
    assert set(only.task.tolist()) == {TASKS.index("sort"), 6}
    cal, ev = heldout(TINY, 32, "calibration"), heldout(TINY, 32, "evaluation")
    train = make_corpus(32, split_seed(TINY.seed, "train"), seq_len=TINY.seq_len)
    assert cal.ids.shape == (32, TINY.seq_len)
    assert not torch.equal(cal.ids, ev.ids) and not torch.equal(cal.ids, train.ids)
    seeds = {split_seed(s, split) for s in range(5) for split in tb.SPLITS}
    assert len(seeds) == 15
    with pytest.raises(ValueError, match="n must"):
        make_corpus(0, 1)
    with pytest.raises(ValueError, match="seq_len"):
        make_corpus(4, 1, seq_len=8)
    with pytest.raises(ValueError, match="tasks"):
        make_corpus(4, 1, tasks=["nope"])
    with pytest.raises(ValueError, match="split"):
        heldout(TINY, 4, "train")
    with pytest.raises(ValueError, match="top_k"):
        TestbedConfig(n_experts=2, top_k=3)
    with pytest.raises(TypeError, match="corpus"):
        task_accuracy(torch.nn.Linear(2, 2), cal.ids)


def test_digest_keys_the_architecture_not_the_seed():
    assert TINY.digest() == replace(TINY, seed=5).digest()
    assert TINY.digest() != replace(TINY, steps=21).digest()
    assert len(TINY.digest()) == 10
    assert tb.cache_path(replace(TINY, seed=5)).name == f"tiny-mixtral-s5-{TINY.digest()}"


def test_normalized_mutual_information_matches_scikit_learn():
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    g = torch.Generator().manual_seed(0)
    a = torch.randint(0, 5, (500,), generator=g)
    b = torch.where(torch.rand(500, generator=g) < 0.6, (a * 3) % 7, torch.randint(0, 7, (500,), generator=g))
    want = sklearn_metrics.normalized_mutual_info_score(a.numpy(), b.numpy())
    assert normalized_mutual_information(a, b) == pytest.approx(want, abs=1e-9)
    assert normalized_mutual_information(a, (a + 2) * 10) == pytest.approx(1.0)  # a relabelling
    assert normalized_mutual_information(a, torch.zeros_like(a)) == 0.0


def test_cache_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("ICML_CACHE_DIR", str(tmp_path))
    model, info = pretrained(TINY)
    assert isinstance(info["train_seconds"], float) and set(info["accuracy"]) <= set(TASKS)
    assert not model.training
    path = tmp_path / "ragep" / f"tiny-mixtral-s0-{TINY.digest()}"
    assert info["path"] == str(path) and (path / tb.INFO_FILE).is_file()
    assert [p.name for p in (tmp_path / "ragep").iterdir()] == [path.name]  # no temporary folder left

    again, info2 = pretrained(TINY)
    assert info2["train_seconds"] == "cached" and info2["final_loss"] == info["final_loss"]
    corpus = heldout(TINY, 16)
    with torch.no_grad():
        assert torch.equal(model(input_ids=corpus.ids).logits, again(input_ids=corpus.ids).logits)

    acc = task_accuracy(again, corpus, batch=5)
    assert acc.shape == (16,) and acc.dtype == torch.float32 and ((acc >= 0) & (acc <= 1)).all()
    spec = routing_specialisation(again, corpus)
    assert len(spec) == TINY.n_layers and all(0 <= s <= 1 for s in spec)


def test_an_incomplete_cache_folder_is_never_used(tmp_path, monkeypatch):
    monkeypatch.setenv("ICML_CACHE_DIR", str(tmp_path))
    path = tb.cache_path(TINY)
    path.mkdir(parents=True)
    (path / "config.json").write_text("{")  # half written, no info file
    _, info = pretrained(TINY)
    assert isinstance(info["train_seconds"], float) and (path / tb.INFO_FILE).is_file()
    _, info = pretrained(TINY)
    assert info["train_seconds"] == "cached"


def test_without_cache_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv("ICML_CACHE_DIR", str(tmp_path))
    _, info = pretrained(TINY, cache=False)
    assert info["path"] is None and not (tmp_path / "ragep").exists()
