"""Steerability and its prediction from the cylinder geometry (CRH, Gao et al. 2026).

*Steerability* is the slope of a concept judge's score against the steering scale: CRH fits it per concept
on the share of outputs labelled "concept present"; :func:`fit_steerability` fits it per sample (each row of
scores one sample across scales) and returns the slope's standard error beside it. CRH's outputs are labelled
1 (normal, no concept), 2 (concept present) or 3 (gibberish): :func:`label_outputs` does so from a concept
judge's scores and a perplexity gibberish detector (:func:`continuation_perplexity` under the unsteered
model). Judges are pluggable: any callable from a list of texts to scores in ``[0, 1]``;
:class:`KeywordJudge` is a deterministic one, :class:`LMJudge` asks a language model through any backend with
a ``generate(prompts, max_new_tokens=, temperature=)`` method returning objects with ``.text`` (the
``icml_agents.backends`` interface).

:func:`geometry_correlation` is CRH's test: Pearson's r between ``steerability / |d|^a`` and
``sin^p theta cos^t theta`` (defaults ``a=2, p=2, t=-1``) with a permutation p-value;
:func:`exponent_search` grid-searches the exponents as the official visualisation does (a selected r is
optimistic: report the default exponents' r as the test). :func:`sector_prediction` asks whether the sector a
held-out sample's difference vector falls in predicts its sensitivity (steerability beyond what the geometry
feature explains) better than chance: CRH's asymmetry says it should not.

Our choices: the per-sample fit (CRH fits per concept), the permutation tests (two-sided, ``|r|``), the
sector predictor (each sector's majority label on the training samples, the overall majority where a sector
is empty) and the sensitivity label (residual above the training median).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from icml_interp.crh.cylinder import Cylinder, sector_bins
from icml_interp.hooks import wrap
from icml_interp.steering.contrastive import right_padded
from icml_interp.validation import check_int, check_number, check_token_sequences, check_type, eval_mode

NORMAL, CONCEPT, GIBBERISH = 1, 2, 3


def _array(x, name: str) -> np.ndarray:
    """``x`` (an array, tensor or nested list of real numbers) as a float64 numpy array."""
    if isinstance(x, torch.Tensor):
        if x.is_complex():
            raise TypeError(f"{name} must hold real numbers, got {x.dtype}")
        x = x.detach().cpu().double()
    if isinstance(x, (str, bytes)) or np.iscomplexobj(x):
        raise TypeError(f"{name} must hold real numbers, got {x!r}")
    try:
        return np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be an array of real numbers, got {type(x).__name__}") from None


def _vector(x, name: str, n: int | None = None) -> np.ndarray:
    arr = _array(x, name)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-d array, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} holds NaN or infinite values")
    if n is not None and arr.size != n:
        raise ValueError(f"{name} must hold {n} values (one per sample), got {arr.size}")
    return arr


@dataclass(frozen=True)
class Steerability:
    """Per-sample least-squares lines ``score = intercept + slope * scale``."""

    slope: np.ndarray  # (n,)
    intercept: np.ndarray  # (n,)
    slope_se: np.ndarray  # (n,): standard error of the slope (nan with 2 scales)


def fit_steerability(scales, scores) -> Steerability:
    """Fit ``scores`` ``(n_samples, n_scales)`` (judge scores of each sample at each scale) against
    ``scales`` ``(n_scales,)``: per-sample slopes, intercepts and slope standard errors."""
    s = _vector(scales, "scales")
    y = _array(scores, "scores")
    if y.ndim != 2 or y.shape[1] != s.size or y.shape[0] == 0:
        raise ValueError(f"scores must be shaped (n_samples, {s.size}) (one column per scale), got {y.shape}")
    if not np.isfinite(y).all():
        raise ValueError("scores holds NaN or infinite values")
    if s.size < 2 or np.ptp(s) == 0:
        raise ValueError("scales must hold at least 2 distinct values to fit a slope")
    sc = s - s.mean()
    sxx = float(sc @ sc)
    slope = (y - y.mean(1, keepdims=True)) @ sc / sxx
    intercept = y.mean(1) - slope * s.mean()
    resid = y - intercept[:, None] - slope[:, None] * s
    dof = s.size - 2
    se = np.sqrt((resid**2).sum(1) / dof / sxx) if dof > 0 else np.full(len(y), np.nan)
    if not (np.isfinite(slope).all() and np.isfinite(intercept).all()):
        raise ValueError("scales and scores are too large to fit in float64; rescale them")
    return Steerability(slope=slope, intercept=intercept, slope_se=se)


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    xc, yc = x - x.mean(), y - y.mean()
    denom = math.sqrt(float(xc @ xc) * float(yc @ yc))
    return float(xc @ yc / denom) if denom > 0 else 0.0


def geometry_features(cylinder: Cylinder, steerability, *, a: float = 2.0, p: float = 2.0, t: float = -1.0):
    """``(steerability / |d|^a, sin^p theta cos^t theta)`` per sample, as numpy arrays (samples whose feature
    is not finite, e.g. ``cos theta = 0`` with ``t < 0``, are returned as nan)."""
    check_type(cylinder, "cylinder", Cylinder, "a Cylinder (icml_interp.crh.decompose)")
    n = len(cylinder.parallel)
    steer = _vector(steerability, "steerability", n)
    a, p, t = (check_number(v, name) for v, name in ((a, "a"), (p, "p"), (t, "t")))
    norms = cylinder.norms.cpu().numpy()
    cos, sin = cylinder.cos.cpu().numpy(), cylinder.sin.cpu().numpy()
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        target = steer / norms**a
        feature = sin**p * np.power(cos, t)  # a negative cos to a fractional power is nan: dropped
    bad = ~(np.isfinite(target) & np.isfinite(feature))
    target[bad] = feature[bad] = np.nan
    return target, feature


def geometry_correlation(
    cylinder: Cylinder,
    steerability,
    *,
    a: float = 2.0,
    p: float = 2.0,
    t: float = -1.0,
    n_permutations: int = 9999,
    seed: int = 0,
) -> dict:
    """CRH's test: Pearson r of ``steerability / |d|^a`` against ``sin^p theta cos^t theta`` over the samples,
    and a two-sided permutation p-value ``(1 + #{|r_perm| >= |r|}) / (1 + n_permutations)``.

    Returns ``{"r", "p_value", "n", "dropped"}`` (``dropped``: samples whose feature was not finite)."""
    check_int(n_permutations, "n_permutations", minimum=1)
    check_int(seed, "seed", minimum=0)
    target, feature = geometry_features(cylinder, steerability, a=a, p=p, t=t)
    keep = np.isfinite(target)
    x, y = feature[keep], target[keep]
    if x.size < 3:
        raise ValueError(f"need at least 3 samples with a finite geometry feature, got {x.size}")
    r = _pearson(x, y)
    rng = np.random.default_rng(seed)
    null = np.array([_pearson(x, rng.permutation(y)) for _ in range(n_permutations)])
    p_value = (1 + int((np.abs(null) >= abs(r) - 1e-12).sum())) / (1 + n_permutations)
    return {"r": r, "p_value": p_value, "n": int(x.size), "dropped": int((~keep).sum())}


def exponent_search(
    cylinder: Cylinder,
    steerability,
    *,
    a_grid: Iterable[float] = (0.0, 1.0, 2.0),
    p_grid: Iterable[float] = (0.0, 1.0, 2.0),
    t_grid: Iterable[float] = (-2.0, -1.0, 0.0, 1.0),
) -> list[dict]:
    """Pearson r for every ``(a, p, t)`` in the grids, best ``|r|`` first (exploratory: the maximum over a
    grid is biased upwards; test with :func:`geometry_correlation` at exponents fixed in advance)."""
    grids = {"a_grid": a_grid, "p_grid": p_grid, "t_grid": t_grid}
    for name, values in grids.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
            raise TypeError(f"{name} must be a list of numbers, got {values!r}")
    a_grid, p_grid, t_grid = ([check_number(v, name) for v in values] for name, values in grids.items())
    rows = []
    for a in a_grid:
        for p in p_grid:
            for t in t_grid:
                target, feature = geometry_features(cylinder, steerability, a=a, p=p, t=t)
                keep = np.isfinite(target)
                r = _pearson(feature[keep], target[keep]) if keep.sum() >= 3 else float("nan")
                rows.append({"a": float(a), "p": float(p), "t": float(t), "r": r})
    return sorted(rows, key=lambda row: -abs(row["r"]) if math.isfinite(row["r"]) else 0.0)


def sector_prediction(
    train_angles,
    train_values,
    test_angles,
    test_values,
    *,
    n_sectors: int = 8,
    n_permutations: int = 999,
    seed: int = 0,
) -> dict:
    """Do sectors predict sensitivity on held-out samples?

    A sample is *sensitive* when its value (e.g. steerability beyond the geometry feature's prediction) is
    above the training median. Each sector predicts its training samples' majority label; the test accuracy
    is compared with the same predictor fitted to training labels shuffled across samples (the null: sectors
    carry no information). Returns ``{"accuracy", "chance", "p_value", "n_test"}`` with ``chance`` the null's
    mean accuracy and ``p_value = (1 + #{null >= accuracy}) / (1 + n_permutations)`` (one-sided)."""
    tr_a = torch.as_tensor(_vector(train_angles, "train_angles"))
    tr_v = _vector(train_values, "train_values", len(tr_a))
    te_a = torch.as_tensor(_vector(test_angles, "test_angles"))
    te_v = _vector(test_values, "test_values", len(te_a))
    check_int(n_permutations, "n_permutations", minimum=1)
    check_int(seed, "seed", minimum=0)
    check_int(n_sectors, "n_sectors", minimum=1)
    tr_bins = _sector_ids(tr_a, n_sectors, "train_angles")
    te_bins = _sector_ids(te_a, n_sectors, "test_angles")
    cut = float(np.median(tr_v))
    tr_y, te_y = tr_v > cut, te_v > cut

    def accuracy(labels: np.ndarray) -> float:
        overall = labels.mean() >= 0.5
        table = np.array(
            [
                labels[tr_bins == b].mean() >= 0.5 if (tr_bins == b).any() else overall
                for b in range(n_sectors)
            ]
        )
        return float((table[te_bins] == te_y).mean())

    acc = accuracy(tr_y)
    rng = np.random.default_rng(seed)
    null = np.array([accuracy(rng.permutation(tr_y)) for _ in range(n_permutations)])
    p_value = (1 + int((null >= acc - 1e-12).sum())) / (1 + n_permutations)
    return {"accuracy": acc, "chance": float(null.mean()), "p_value": p_value, "n_test": len(te_y)}


def _sector_ids(angles: torch.Tensor, n_sectors: int, name: str) -> np.ndarray:
    if bool(((angles < -math.pi - 1e-9) | (angles > math.pi + 1e-9)).any()):
        raise ValueError(f"{name} must lie in [-pi, pi] (radians, as atan2 returns)")
    return sector_bins(angles, n_sectors).numpy()


# ----------------------------------------------------------------------------------------------- judges
class KeywordJudge:
    """A deterministic concept judge: a text's score is the share of its words (``\\w+`` runs, lower-cased)
    that are concept ``keywords`` (matched as whole words, a plural ``s`` allowed); ``present`` says whether
    any is."""

    def __init__(self, keywords: Iterable[str]):
        if isinstance(keywords, str) or not isinstance(keywords, Iterable):
            raise TypeError(f"keywords must be a list of words, got {keywords!r}")
        words = [k for k in keywords]
        if not words or not all(isinstance(k, str) and re.fullmatch(r"\w+", k) for k in words):
            raise ValueError(f"keywords must be a non-empty list of single words, got {words!r}")
        self.keywords = frozenset(k.lower() for k in words)

    def _hits(self, text: str) -> tuple[int, int]:
        if not isinstance(text, str):
            raise TypeError(f"texts must hold strings, got {type(text).__name__}")
        words = re.findall(r"\w+", text.lower())
        hits = sum(w in self.keywords or (w.endswith("s") and w[:-1] in self.keywords) for w in words)
        return hits, len(words)

    def __call__(self, texts: Sequence[str]) -> list[float]:
        return [h / n if n else 0.0 for h, n in map(self._hits, _texts(texts))]

    def present(self, texts: Sequence[str]) -> list[bool]:
        return [self._hits(t)[0] > 0 for t in _texts(texts)]


def _texts(texts) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise TypeError(f"texts must be a list of strings, got {type(texts).__name__}")
    return list(texts)


JUDGE_PROMPT = (
    "Does the following text mention or discuss the concept '{concept}'? Answer 1 if it is a normal text "
    "without the concept, 2 if the concept is present, 3 if the text is gibberish.\nText: {text}\nAnswer:"
)


class LMJudge:
    """CRH's labelling by a language model: ``backend.generate`` (greedy) answers :data:`JUDGE_PROMPT` for
    each text; the first digit 1/2/3 in the answer is the label (none: :data:`NORMAL`, counted in
    :attr:`unparsed`). Calling the judge returns 1.0 for label 2 and 0.0 otherwise."""

    def __init__(self, backend, concept: str, *, prompt: str = JUDGE_PROMPT, max_new_tokens: int = 4):
        if not callable(getattr(backend, "generate", None)):
            raise TypeError(
                f"backend must have a generate(prompts, ...) method, got {type(backend).__name__}"
            )
        if not isinstance(concept, str) or not concept.strip():
            raise ValueError(f"concept must be a non-empty string, got {concept!r}")
        if "{text}" not in prompt or "{concept}" not in prompt:
            raise ValueError("prompt must contain the fields {concept} and {text}")
        self.backend, self.concept, self.prompt = backend, concept, prompt
        self.max_new_tokens = check_int(max_new_tokens, "max_new_tokens", minimum=1)
        self.unparsed = 0

    def labels(self, texts: Sequence[str]) -> list[int]:
        prompts = [self.prompt.format(concept=self.concept, text=t) for t in _texts(texts)]
        out = []
        for completion in self.backend.generate(prompts, max_new_tokens=self.max_new_tokens, temperature=0.0):
            found = re.search(r"[123]", completion.text)
            if found is None:
                self.unparsed += 1
            out.append(int(found.group()) if found else NORMAL)
        return out

    def __call__(self, texts: Sequence[str]) -> list[float]:
        return [float(label == CONCEPT) for label in self.labels(texts)]


def continuation_perplexity(model, prompts, continuations, *, batch_size: int = 16) -> np.ndarray:
    """Perplexity of each continuation's tokens given its prompt under ``model`` (unsteered: use it as the
    gibberish detector's reference), ``(n,)``; an empty continuation gets nan.

    Runs the model in eval mode; every submodule's mode is restored (also on a raise): in training mode each
    pass would draw its own dropout mask, and the perplexities would be one sample of it."""
    hooked = wrap(model)
    ps = check_token_sequences(prompts, hooked.d_vocab, "prompts")
    if isinstance(continuations, (str, bytes)) or not isinstance(continuations, Sequence):
        raise TypeError(
            f"continuations must be a list of token-id sequences, got {type(continuations).__name__}"
        )
    if len(continuations) != len(ps):
        raise ValueError(
            f"continuations must hold one sequence per prompt ({len(ps)}), got {len(continuations)}"
        )
    conts = [torch.as_tensor(c, dtype=torch.long).reshape(-1) for c in continuations]
    if any(c.numel() and (int(c.min()) < 0 or int(c.max()) >= hooked.d_vocab) for c in conts):
        raise ValueError(f"continuations must hold token ids in [0, {hooked.d_vocab})")
    check_int(batch_size, "batch_size", minimum=1)
    out = np.full(len(ps), np.nan)
    todo = [i for i in range(len(ps)) if conts[i].numel()]
    device = hooked.embed.weight.device  # where the model reads its token ids
    with torch.no_grad(), eval_mode(hooked.model):
        for start in range(0, len(todo), batch_size):
            idx = todo[start : start + batch_size]
            rows = [torch.cat([ps[i].to(device), conts[i].to(device)]) for i in idx]
            batch, mask = right_padded(rows, device)
            logp = torch.log_softmax(hooked(batch, attention_mask=mask).float(), -1)
            for j, i in enumerate(idx):
                lo, hi = len(ps[i]), len(rows[j])
                nll = -logp[j, lo - 1 : hi - 1].gather(-1, rows[j][lo:hi, None])[:, 0]
                out[i] = math.exp(float(nll.mean()))
    return out


def label_outputs(concept_present, perplexity, gibberish_threshold: float) -> np.ndarray:
    """CRH's labels per output: :data:`GIBBERISH` (3) where the perplexity exceeds ``gibberish_threshold``
    (or is nan: nothing generated), else :data:`CONCEPT` (2) where the concept is present, else
    :data:`NORMAL` (1)."""
    present = _array(concept_present, "concept_present")
    if not np.isin(present, (0.0, 1.0)).all():
        raise ValueError("concept_present must hold booleans")
    present = present.astype(bool)
    ppl = _array(perplexity, "perplexity")
    if present.ndim != 1 or ppl.shape != present.shape:
        raise ValueError(
            f"concept_present and perplexity must be 1-d of the same length, got {present.shape} and {ppl.shape}"
        )
    threshold = check_number(gibberish_threshold, "gibberish_threshold", minimum=0.0, open_min=True)
    with np.errstate(invalid="ignore"):
        gib = ~(ppl <= threshold)
    return np.where(gib, GIBBERISH, np.where(present, CONCEPT, NORMAL))
