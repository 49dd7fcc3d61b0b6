"""SSL4RL's verifiable rewards: the official scoring, as plain functions and in TRL's ``reward_funcs`` signature.

The official scoring (PKU-ML/SSL4RL, ``verl/utils/reward_score/{ssl4rl,jigsaw}.py``, as read for our
research notes; we wrote our own code):

* the response is the text after the last ``"assistant\\n"`` (the whole text when there is none);
* the answer is the first ``<answer>...</answer>`` span (non-greedy, across lines), stripped of surrounding
  whitespace; **no tags gives 0**;
* rotation, position and contrastive (:func:`score_answer_match`): the ground truth is split on ``,`` into
  alternatives and the reward is 1.0 if the answer equals one of them, else 0.0 (case-sensitive);
* jigsaw (:func:`score_jigsaw`): both sides are comma lists of integers and the reward is the fraction of
  ground-truth positions ``i`` with ``int(pred[i]) == int(gt[i])``; a position that does not parse as an
  integer, or is missing, scores 0 for that position (the others still count).

Our own choices, documented rather than official: ground-truth alternatives are stripped (so ``"90, 450"``
works); ``ignore_case=True`` case-folds both sides (off by default, as in the release); extra predicted
positions beyond the ground truth's length are ignored; the masked-patch reward (:func:`score_patch`) and
the format reward (:func:`score_format`) are our design (the release has no patch task, and its
``format_score`` parameter is unused).

TRL's ``GRPOTrainer`` calls a reward function as ``f(prompts=..., completions=..., completion_ids=...,
trainer_state=..., log_extra=..., log_metric=..., **dataset_columns)`` with one value per completion in
every list; completions are strings, or lists of ``{"role", "content"}`` messages for conversational data.
The ``*_reward`` functions below accept exactly that and read the ``answer`` column (and ``task`` for
:func:`ssl4rl_reward`).
"""

from __future__ import annotations

import math
import numbers
import re

from icml_agents.validation import check_bool, check_column, check_int, check_list, check_texts

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_FORMAT = re.compile(r"^\s*(<think>.*?</think>\s*)?<answer>.*?</answer>\s*$", re.DOTALL)
ASSISTANT_MARKER = "assistant\n"
EXACT_MATCH_TASKS = ("rotation", "position", "contrastive")
TASKS = (*EXACT_MATCH_TASKS, "jigsaw", "patch")
PATCH_LEVELS = 4  # quantization levels of the masked-patch code (tasks.patch_task's default)


def response_text(completion) -> str:
    """The model's response: for a string, the text after the last ``"assistant\\n"`` (all of it if absent);
    for a conversational completion (a list of messages), the content of the last assistant message."""
    if isinstance(completion, str):
        return completion.rsplit(ASSISTANT_MARKER, 1)[-1]
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, (list, tuple)) and completion and all(isinstance(m, dict) for m in completion):
        turns = [m for m in completion if m.get("role", "assistant") == "assistant"] or list(completion)
        content = turns[-1].get("content")
        if isinstance(content, list):  # multimodal content parts: keep the text parts
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        if isinstance(content, str):
            return content
    raise TypeError(
        f"a completion must be a string or a list of {{'role', 'content'}} messages, got {completion!r}"
    )


def extract_answer(completion) -> str | None:
    """The stripped text of the first ``<answer>...</answer>`` in the response, or None without tags."""
    match = _ANSWER.search(response_text(completion))
    return None if match is None else match.group(1).strip()


def _ground_truth(ground_truth) -> str:
    if isinstance(ground_truth, (int, float)) and not isinstance(ground_truth, bool):
        return str(ground_truth)
    if not isinstance(ground_truth, str):
        raise TypeError(f"ground_truth must be a string, got {ground_truth!r}")
    return ground_truth


def score_answer_match(completion, ground_truth, ignore_case: bool = False) -> float:
    """Official exact-match score: 1.0 if the tagged answer equals one comma-separated alternative, else 0.0."""
    truth = _ground_truth(ground_truth)
    check_bool(ignore_case, "ignore_case")
    answer = extract_answer(completion)
    if answer is None:
        return 0.0
    alternatives = [a.strip() for a in truth.split(",")]
    if ignore_case:
        answer, alternatives = answer.casefold(), [a.casefold() for a in alternatives]
    return float(answer in alternatives)


def _int_or_none(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def score_jigsaw(completion, ground_truth) -> float:
    """Official jigsaw score: the fraction of ground-truth positions whose integer the answer repeats."""
    truth = [_int_or_none(t) for t in _ground_truth(ground_truth).split(",")]
    if any(t is None for t in truth):
        raise ValueError(f"ground_truth must be a comma list of integers, got {ground_truth!r}")
    answer = extract_answer(completion)
    if answer is None:
        return 0.0
    pred = [_int_or_none(p) for p in answer.split(",")]
    hits = sum(i < len(pred) and pred[i] is not None and pred[i] == t for i, t in enumerate(truth))
    return hits / len(truth)


def score_patch(completion, ground_truth, levels: int = 4) -> float:
    """Masked-patch reconstruction score (our design, not in the release).

    The ground truth is a comma list of the masked patch's intensities quantized to ``levels`` levels
    (``0..levels-1``, one per cell of a coarse code, see :func:`icml_agents.ssl4rl.tasks.patch_task`). The
    score is ``1 - mean_i |pred_i - gt_i| / (levels - 1)``: dense, 1 for an exact reconstruction, 0 for the
    farthest one. A cell that is missing, not an integer, or outside ``0..levels-1`` counts as the maximal
    error; no tags give 0, like every other SSL4RL reward.
    """
    levels = check_int(levels, "levels", 2)
    parsed = [_int_or_none(t) for t in _ground_truth(ground_truth).split(",")]
    truth = [t for t in parsed if t is not None and 0 <= t < levels]
    if len(truth) != len(parsed):
        raise ValueError(
            f"ground_truth must be a comma list of integers in [0, {levels}), got {ground_truth!r}"
        )
    answer = extract_answer(completion)
    if answer is None:
        return 0.0
    pred = [_int_or_none(p) for p in answer.split(",")]
    error = 0.0
    for i, t in enumerate(truth):
        p = pred[i] if i < len(pred) else None
        error += 1.0 if p is None or not 0 <= p < levels else abs(p - t) / (levels - 1)
    return 1.0 - error / len(truth)


def score_format(completion) -> float:
    """Optional format reward (our design): 1.0 if the response is ``[<think>...</think>] <answer>...</answer>``
    and nothing else, else 0.0."""
    return float(_FORMAT.match(response_text(completion)) is not None)


def score_task(
    task: str, completion, ground_truth, ignore_case: bool = False, levels: int = PATCH_LEVELS
) -> float:
    """Dispatch on the task name, like the release's ``data_source`` dispatch (``"RotationQA"`` -> exact match)."""
    if not isinstance(task, str):
        raise ValueError(f"task must be a string naming one of {TASKS}, got {task!r}")
    check_bool(ignore_case, "ignore_case")
    name = task.lower()
    if "jigsaw" in name:
        return score_jigsaw(completion, ground_truth)
    if "patch" in name:
        return score_patch(completion, ground_truth, levels=levels)
    if any(t in name for t in EXACT_MATCH_TASKS):
        return score_answer_match(completion, ground_truth, ignore_case=ignore_case)
    raise ValueError(f"task must name one of {TASKS}, got {task!r}")


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info=None) -> float:
    """verl's reward hook ``compute_score(data_source, solution_str, ground_truth, extra_info)``."""
    if not isinstance(data_source, str) or not any(t in data_source.lower() for t in TASKS):
        raise ValueError(f"data_source must be a string naming one of {TASKS}, got {data_source!r}")
    if not isinstance(solution_str, str):
        raise TypeError(f"solution_str must be a string, got {type(solution_str).__name__}")
    return score_task(data_source, solution_str, ground_truth)


# ---- TRL reward_funcs signature -------------------------------------------------------------------------


def _columns(completions, answer) -> list[tuple]:
    """(completion, ground truth) per row; a bad item raises naming ``completions[i]`` or ``answer[i]``."""
    check_texts(check_list(completions, "completions"), "completions", response_text)
    truths = check_texts(
        check_column(answer, "answer", len(completions), "ground truth"), "answer", _ground_truth
    )
    return list(zip(completions, truths, strict=True))


def _per_row(score, columns: list[tuple]) -> list[float]:
    """``score(text, truth)`` per row; a ``ValueError`` about the ground truth names ``answer[i]``."""
    out = []
    for i, (c, a) in enumerate(columns):
        try:
            out.append(score(c, a))
        except ValueError as err:
            raise ValueError(f"answer[{i}]: {err}") from None
    return out


def answer_match_reward(completions, answer, ignore_case: bool = False, **kwargs) -> list[float]:
    """TRL reward for rotation / position / contrastive: :func:`score_answer_match` per completion
    (``functools.partial(answer_match_reward, ignore_case=True)`` case-folds both sides)."""
    check_bool(ignore_case, "ignore_case")
    return _per_row(
        lambda c, a: score_answer_match(c, a, ignore_case=ignore_case), _columns(completions, answer)
    )


def jigsaw_reward(completions, answer, **kwargs) -> list[float]:
    """TRL reward for jigsaw: :func:`score_jigsaw` (partial credit per position) per completion."""
    return _per_row(score_jigsaw, _columns(completions, answer))


def patch_reward(completions, answer, levels: int = PATCH_LEVELS, **kwargs) -> list[float]:
    """TRL reward for masked-patch reconstruction: :func:`score_patch` per completion (our design)."""
    levels = check_int(levels, "levels", 2)
    return _per_row(lambda c, a: score_patch(c, a, levels=levels), _columns(completions, answer))


def format_reward(completions, **kwargs) -> list[float]:
    """TRL format reward: :func:`score_format` per completion."""
    return check_texts(check_list(completions, "completions"), "completions", score_format)


def ssl4rl_reward(completions, answer, task, ignore_case: bool = False, **kwargs) -> list[float | None]:
    """TRL reward for a mixed-task dataset: dispatch each row on its ``task`` column (``ignore_case`` as in
    :func:`score_task`).

    Rows whose task is None get None (TRL skips them), so several task datasets can be concatenated; their
    ``answer`` is not read (``datasets.concatenate_datasets`` fills the columns a dataset lacks with None).
    """
    check_bool(ignore_case, "ignore_case")
    check_texts(check_list(completions, "completions"), "completions", response_text)
    task = check_column(task, "task", len(completions), "task name")
    answer = check_column(answer, "answer", len(completions), "ground truth")
    out: list[float | None] = []
    for i, (c, a, t) in enumerate(zip(completions, answer, task, strict=True)):
        if t is None:
            out.append(None)
            continue
        try:
            a = _ground_truth(a)
        except TypeError as err:
            raise TypeError(f"answer[{i}]: {err}") from None
        try:
            out.append(score_task(t, c, a, ignore_case=ignore_case))
        except ValueError as err:
            raise ValueError(f"row {i} (task[{i}] = {t!r}, answer[{i}] = {a!r}): {err}") from None
    return out


def average_rewards(*reward_lists) -> list[float]:
    """The mean of several per-completion reward lists (the naive combined reward the paper ablates)."""
    if not reward_lists or len({len(r) if isinstance(r, (list, tuple)) else -1 for r in reward_lists}) != 1:
        raise ValueError("reward_lists must be one or more lists of rewards of equal length")
    for k, rewards in enumerate(reward_lists):
        if not isinstance(rewards, (list, tuple)):
            raise ValueError(f"reward_lists[{k}] must be a list of rewards, got {rewards!r}")
        for v in rewards:
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
                raise ValueError(f"reward_lists[{k}] must hold finite numbers, got {v!r}")
    n = len(reward_lists)
    return [
        sum(float(v) / n for v in vals) for vals in zip(*reward_lists, strict=True)
    ]  # / n first: no overflow
