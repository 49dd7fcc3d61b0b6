"""The two testbeds of ``lt-tuning-reasoning`` (our design), one char-level vocabulary for both.

* ``arithmetic``: ``d0 o1 d1 … o4 d4 =``, digits and operators ``+ - *`` evaluated left to right modulo 10.
  The explicit chain of thought writes every partial result as a step ``x o d = y ,`` (6 tokens), then
  ``# y``. The operators do not commute, so the answer is not a function of the digits' counts: without the
  steps a tiny model has to compose four modular operations in one pass.
* ``graph`` (ProsQA-like reachability): a forest of two random trees is listed as its edges in random order,
  one token per edge ("``c``'s parent is ``p``", so that one attention step reads a parent), then ``? X R =`` asks whether ``R`` is an ancestor of ``X``. The chain of thought walks up
  from ``X``, one edge ``node > parent ,`` per step, until it meets ``R`` or a root; the answer is ``# Y`` or
  ``# N``. Positive ``R`` are two or more levels up (the parent alone would be a one-hop lookup); negative
  ``R`` are inner nodes (they have children), so "R is a leaf" is no shortcut; half the questions are
  positive.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SPECIAL = ["<pad>", "<eos>", "<bot>", "<eot>", "<lat>"]
CHARS = list("0123456789+-*=,>#?YN") + list("abcdefghij")
NODES = list("abcdefghij")
EDGES = [c + p for c in NODES for p in NODES if c != p]  # one token per edge "c's parent is p"
VOCAB = SPECIAL + CHARS + EDGES
INDEX = {t: i for i, t in enumerate(VOCAB)}
PAD, EOS, BOT, EOT, LAT = range(5)
VOCAB_SIZE = len(VOCAB)
N_OPS = 4
TREE = 5  # nodes per tree of the graph testbed
TESTBEDS = ("arithmetic", "graph")


def encode(text: str) -> list[int]:
    return [INDEX[c] for c in text]


def decode(ids) -> str:
    return "".join(
        VOCAB[i] if len(SPECIAL) <= i < len(SPECIAL) + len(CHARS) else f"[{VOCAB[i]}]" for i in ids
    )


@dataclass(frozen=True)
class Item:
    """One problem: ``question`` ids, one id list per reasoning ``step``, the ``answer`` ids (``#``, the answer,
    end of sequence) and the ``gold`` answer character."""

    question: list[int]
    steps: list[list[int]]
    answer: list[int]
    gold: str


def _apply(x: int, op: str, d: int) -> int:
    return (x + d) % 10 if op == "+" else (x - d) % 10 if op == "-" else (x * d) % 10


def arithmetic_item(rng: np.random.Generator) -> Item:
    digits = [int(v) for v in rng.integers(10, size=N_OPS + 1)]
    ops = [str(o) for o in rng.choice(list("+-*"), size=N_OPS)]
    question = str(digits[0]) + "".join(o + str(d) for o, d in zip(ops, digits[1:], strict=False)) + "="
    x, steps = digits[0], []
    for o, d in zip(ops, digits[1:], strict=False):
        y = _apply(x, o, d)
        steps.append(encode(f"{x}{o}{d}={y},"))
        x = y
    return Item(encode(question), steps, [*encode(f"#{x}"), EOS], str(x))


def _forest(rng: np.random.Generator) -> dict[str, str | None]:
    """Two random trees over ``2 * TREE`` of the node names, grown deep (a new node hangs under one of the
    two newest nodes of its tree); returns each node's parent (None at a root)."""
    names = [str(n) for n in rng.permutation(NODES)[: 2 * TREE]]
    parent: dict[str, str | None] = {}
    for tree in (names[:TREE], names[TREE:]):
        parent[tree[0]] = None
        for i in range(1, len(tree)):
            parent[tree[i]] = tree[max(0, i - 1 - int(rng.integers(2)))]
    return parent


def _ancestors(parent: dict[str, str | None], x: str) -> list[str]:
    out, node = [], parent[x]
    while node is not None:
        out.append(node)
        node = parent[node]
    return out


def graph_item(rng: np.random.Generator) -> Item:
    while True:
        parent = _forest(rng)
        deep = [n for n in parent if len(_ancestors(parent, n)) >= 2]
        x = str(rng.choice(deep))
        anc = _ancestors(parent, x)
        inner = {p for p in parent.values() if p is not None}
        negatives = sorted(inner - set(anc) - {x})
        positive = bool(rng.random() < 0.5)
        if positive or negatives:
            break
    r = str(rng.choice(anc[1:])) if positive else str(rng.choice(negatives))
    edges = [INDEX[c + p] for c, p in parent.items() if p is not None]
    edges = [edges[i] for i in rng.permutation(len(edges))]
    question = edges + encode(f"?{x}{r}=")
    steps, node = [], x
    for a in anc:
        steps.append(encode(f"{node}>{a},"))
        node = a
        if a == r:
            break
    gold = "Y" if positive else "N"
    return Item(question, steps, [*encode(f"#{gold}"), EOS], gold)


def make_items(testbed: str, n: int, rng: np.random.Generator) -> list[Item]:
    if testbed not in TESTBEDS:
        raise ValueError(f"testbed must be one of {TESTBEDS}, got {testbed!r}")
    make = arithmetic_item if testbed == "arithmetic" else graph_item
    return [make(rng) for _ in range(n)]


def answer_of(tokens: list[int]) -> str | None:
    """The character after the last ``#`` of generated ``tokens`` (None when there is none)."""
    text = [VOCAB[t] for t in tokens]
    if "#" not in text:
        return None
    i = len(text) - 1 - text[::-1].index("#")
    return text[i + 1] if i + 1 < len(text) and text[i + 1] in CHARS else None
