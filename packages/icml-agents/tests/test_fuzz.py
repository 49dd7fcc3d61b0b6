"""The bad-input contract (GUIDE "Bad input"), one fuzz test per public API of icml-agents.

Every case either returns a result its check verifies, or raises ValueError/TypeError naming the argument;
never NaN/inf from finite input without a warning.
"""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import icml_agents
from icml_agents import rl, ssl4rl
from icml_agents.rl import (
    GRPOConfig,
    compute_advantages,
    exact_match_reward,
    group_relative_advantages,
    grpo_loss,
    k3_kl,
    normalize_answer,
)
from icml_agents.ssl4rl import (
    SSLExample,
    answer_match_reward,
    average_rewards,
    build_dataset,
    build_examples,
    compute_score,
    contrastive_task,
    extract_answer,
    format_reward,
    jigsaw_reward,
    jigsaw_task,
    patch_reward,
    patch_task,
    position_task,
    rotation_task,
    score_answer_match,
    score_format,
    score_jigsaw,
    score_patch,
    score_task,
    ssl4rl_reward,
)
from icml_tools.fuzz import Coverage, fuzz_call, rejects

FUZZ = Coverage()
FUZZ.exempt(SSLExample, "the result container the task builders return; it holds no logic to fuzz")

IMAGE = np.linspace(0.0, 1.0, 12 * 12, dtype=np.float32).reshape(12, 12)  # a grayscale ramp in [0, 1]
OTHER = IMAGE[::-1].copy()
REWARDS = np.array([1.0, 0.0, 0.5, 2.0, 2.0, 3.0])  # two groups of three
COMPLETIONS = ["<answer>90</answer>", "assistant\n<think>hm</think><answer>2,1,3,4</answer>"]
BAD_BOOLS = st.sampled_from([None, 0, 1, 2, 0.5, "yes", math.nan, "x", object()])
BAD_COMPLETIONS = st.sampled_from([None, 3, b"x", object(), (), {}, [None], [{"role": "user"}], [1, 2]])


def _example_ok(ex, task, size, channels=1):
    assert isinstance(ex, SSLExample) and ex.task == task
    for im in ex.images:
        assert im.shape == (size, size, channels) and im.dtype == np.float32
        assert np.isfinite(im).all() and im.min() >= 0 and im.max() <= 1
    assert isinstance(ex.prompt, str) and isinstance(ex.answer, str) and ex.answer
    return True


# ---- rl ---------------------------------------------------------------------------------------------------


@FUZZ.covers(group_relative_advantages)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_group_relative_advantages(data):
    def check(adv):
        adv = np.asarray(adv, dtype=np.float64)
        assert adv.shape == (6,) and np.isfinite(adv).all()
        return bool(np.allclose(adv.reshape(2, 3).sum(1), 0, atol=1e-9))  # centred per group

    fuzz_call(
        data,
        group_relative_advantages,
        {"rewards": REWARDS, "group_size": 3, "normalize_std": True, "eps": 1e-4},
        check=check,
        related={"rewards": ["group_size"], "group_size": ["rewards"]},
        strategies={"normalize_std": BAD_BOOLS},
    )
    # a tensor gives a tensor of its own dtype
    out = group_relative_advantages(torch.tensor(REWARDS, dtype=torch.float32), 3)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32


@FUZZ.covers(compute_advantages)
@settings(max_examples=50, deadline=None)
@given(st.data())
def test_compute_advantages(data):
    def check(result):
        adv, frac = result
        assert isinstance(adv, torch.Tensor) and adv.shape == (6,) and torch.isfinite(adv).all()
        return 0.0 <= frac <= 1.0

    scale = data.draw(st.sampled_from(["group", "batch", "none"]), label="valid scale")
    fuzz_call(
        data,
        compute_advantages,
        {"rewards": REWARDS, "group_size": 3, "scale": scale, "eps": 1e-4},
        check=check,
        related={"rewards": ["group_size"], "group_size": ["rewards"]},
    )


@FUZZ.covers(GRPOConfig)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_grpo_config(data):
    valid = {
        "num_generations": 4,
        "epsilon": 0.2,
        "epsilon_high": 0.28,
        "beta": 0.04,
        "scale_rewards": "group",
        "loss_type": "grpo",
        "num_iterations": 2,
        "std_eps": 1e-4,
    }

    def check(c):
        assert isinstance(c.num_generations, int) and c.num_generations >= 2 and c.num_iterations >= 1
        assert c.scale_rewards in ("group", "batch", "none") and c.loss_type in ("grpo", "dapo", "dr_grpo")
        reals = [c.epsilon, c.beta, c.std_eps, 0.0 if c.epsilon_high is None else c.epsilon_high]
        return all(isinstance(v, int | float) and math.isfinite(v) and v >= 0 for v in reals)

    fuzz_call(data, GRPOConfig, valid, check=check)


LOGP = torch.log(torch.tensor([[0.5, 0.25, 0.9], [0.1, 0.6, 0.3]], dtype=torch.float64))  # (B=2, T=3)
OLD = LOGP + 0.1
REF = LOGP - 0.2
ADV = torch.tensor([1.0, -0.5], dtype=torch.float64)
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]], dtype=torch.float64)


@FUZZ.covers(grpo_loss)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_grpo_loss(data):
    def check(result):
        loss, stats = result
        assert isinstance(loss, torch.Tensor) and loss.ndim == 0
        if not torch.isfinite(loss):  # an overflow, which fuzz_call has checked was warned about
            return True
        assert set(stats) == {"kl", "clip_ratio", "mean_ratio"}
        return 0 <= stats["clip_ratio"] <= 1 and stats["kl"] >= 0 and stats["mean_ratio"] >= 0

    loss_type = data.draw(st.sampled_from(["grpo", "dapo", "dr_grpo"]), label="valid loss_type")
    shaped = ["logp", "old_logp", "advantages", "mask", "ref_logp"]
    fuzz_call(
        data,
        grpo_loss,
        {
            "logp": LOGP,
            "old_logp": OLD,
            "advantages": ADV,
            "mask": MASK,
            "ref_logp": REF,
            "epsilon": 0.2,
            "epsilon_high": 0.3,
            "beta": 0.1,
            "loss_type": loss_type,
            "max_completion_length": 4,
            **({"num_items_in_batch": 5.0} if loss_type == "dapo" else {}),  # MASK holds 5 tokens
        },
        check=check,
        # a new shape of logp breaks its agreement with the other tensors, which then are named
        related={"logp": shaped},
    )


@FUZZ.covers(k3_kl)
@settings(max_examples=50, deadline=None)
@given(st.data())
def test_k3_kl(data):
    def check(kl):
        assert isinstance(kl, torch.Tensor) and kl.shape == LOGP.shape and not kl.isnan().any()
        return bool((kl >= 0).all())  # k3 is non-negative

    fuzz_call(
        data,
        k3_kl,
        {"logp": LOGP, "ref_logp": REF},
        check=check,
        related={"logp": ["ref_logp"], "ref_logp": ["logp"]},
    )


@FUZZ.covers(normalize_answer)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_normalize_answer(data):
    fuzz_call(
        data,
        normalize_answer,
        {"text": "  Paris.  "},
        check=lambda s: isinstance(s, str) and s == s.strip() and s == s.casefold(),
    )
    assert normalize_answer(" The  Answer. ") == "the answer"


@FUZZ.covers(exact_match_reward)
@settings(max_examples=50, deadline=None)
@given(st.data())
def test_exact_match_reward(data):
    fuzz_call(
        data,
        exact_match_reward,
        {
            "completions": [" Paris. ", [{"role": "assistant", "content": "rome"}]],
            "answer": ["paris", "Oslo"],
        },
        check=lambda r: r == [1.0, 0.0] or (len(r) == 2 and all(v in (0.0, 1.0) for v in r)),
        related={"completions": ["answer"], "answer": ["completions"]},
        strategies={"completions": st.one_of(BAD_COMPLETIONS.map(lambda c: [c, "x"]), BAD_COMPLETIONS)},
    )


# ---- ssl4rl rewards -----------------------------------------------------------------------------------------


@FUZZ.covers(extract_answer, score_format)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_extract_answer_and_score_format(data):
    completion = "assistant\n<think>a</think> <answer> 2,1 </answer>"
    fuzz_call(
        data,
        extract_answer,
        {"completion": completion},
        check=lambda a: a is None or isinstance(a, str),
        strategies={"completion": BAD_COMPLETIONS},
    )
    fuzz_call(
        data,
        score_format,
        {"completion": completion},
        check=lambda s: s in (0.0, 1.0),
        strategies={"completion": BAD_COMPLETIONS},
    )
    assert extract_answer(completion) == "2,1" and score_format(completion) == 1.0


@FUZZ.covers(score_answer_match)
@settings(max_examples=50, deadline=None)
@given(st.data())
def test_score_answer_match(data):
    fuzz_call(
        data,
        score_answer_match,
        {
            "completion": "<answer>Top-Left</answer>",
            "ground_truth": "top-left, top-right",
            "ignore_case": True,
        },
        check=lambda s: s in (0.0, 1.0),
        strategies={"completion": BAD_COMPLETIONS, "ignore_case": BAD_BOOLS},
    )


@FUZZ.covers(score_jigsaw)
@settings(max_examples=50, deadline=None)
@given(st.data())
def test_score_jigsaw(data):
    fuzz_call(
        data,
        score_jigsaw,
        {"completion": "<answer>2,1,4,3</answer>", "ground_truth": "2,1,3,4"},
        check=lambda s: 0.0 <= s <= 1.0,
        strategies={"completion": BAD_COMPLETIONS},
    )


@FUZZ.covers(score_patch)
@settings(max_examples=50, deadline=None)
@given(st.data())
def test_score_patch(data):
    fuzz_call(
        data,
        score_patch,
        {"completion": "<answer>0,3,1,2</answer>", "ground_truth": "0,3,2,2", "levels": 4},
        check=lambda s: 0.0 <= s <= 1.0,
        related={"levels": ["ground_truth"]},  # fewer levels make the ground truth's codes out of range
        strategies={"completion": BAD_COMPLETIONS},
    )


@FUZZ.covers(score_task, compute_score)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_score_task_and_compute_score(data):
    task = data.draw(
        st.sampled_from(["RotationQA", "jigsaw", "patch", "position", "contrastive"]), label="task"
    )
    truth = {"jigsaw": "1,2", "patch": "1,2"}.get(task, "90")
    fuzz_call(
        data,
        score_task,
        {
            "task": task,
            "completion": "<answer>1,2</answer>",
            "ground_truth": truth,
            "ignore_case": False,
            "levels": 4,
        },
        check=lambda s: 0.0 <= s <= 1.0,
        related={"levels": ["ground_truth"]},
        strategies={"completion": BAD_COMPLETIONS, "ignore_case": BAD_BOOLS},
    )
    fuzz_call(
        data,
        compute_score,
        {
            "data_source": task,
            "solution_str": "<answer>1,2</answer>",
            "ground_truth": truth,
            "extra_info": None,
        },
        check=lambda s: 0.0 <= s <= 1.0,
        mutate=["data_source", "solution_str", "ground_truth"],  # extra_info is verl's, unused by design
        strategies={"solution_str": BAD_COMPLETIONS},
    )


TRL_REWARDS = {
    "answer_match": (answer_match_reward, ["<answer>90</answer>", "no tags"], ["90", "180"]),
    "jigsaw": (jigsaw_reward, ["<answer>2,1</answer>", "<answer>1,2</answer>"], ["2,1", "2,1"]),
    "patch": (patch_reward, ["<answer>0,3</answer>", "<answer>3,3</answer>"], ["0,3", "0,0"]),
}


@FUZZ.covers(answer_match_reward, jigsaw_reward, patch_reward)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_trl_rewards(data):
    fn, completions, answer = TRL_REWARDS[data.draw(st.sampled_from(sorted(TRL_REWARDS)), label="reward")]
    fuzz_call(
        data,
        fn,
        {"completions": completions, "answer": answer},
        check=lambda r: isinstance(r, list) and len(r) == 2 and all(0.0 <= v <= 1.0 for v in r),
        related={"completions": ["answer"], "answer": ["completions"]},
        strategies={"completions": st.one_of(BAD_COMPLETIONS.map(lambda c: [c, "x"]), BAD_COMPLETIONS)},
    )


@FUZZ.covers(format_reward)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_format_reward(data):
    fuzz_call(
        data,
        format_reward,
        {"completions": ["<answer>1</answer>", "1"]},
        check=lambda r: r in ([1.0, 0.0], []),  # [] for an empty batch
        strategies={"completions": st.one_of(BAD_COMPLETIONS.map(lambda c: ["x", c]), BAD_COMPLETIONS)},
    )


@FUZZ.covers(ssl4rl_reward)
@settings(max_examples=50, deadline=None)
@given(st.data())
def test_ssl4rl_reward(data):
    fuzz_call(
        data,
        ssl4rl_reward,
        {
            "completions": ["<answer>90</answer>", "<answer>2,1</answer>", "x"],
            "answer": ["90", "1,2", "1"],
            "task": ["rotation", "jigsaw", None],
        },
        check=lambda r: r[:2] == [1.0, 0.0] and r[2] is None,
        related={"completions": ["answer", "task"], "answer": ["completions"], "task": ["completions"]},
        strategies={"completions": st.one_of(BAD_COMPLETIONS.map(lambda c: [c, "x", "y"]), BAD_COMPLETIONS)},
    )


@FUZZ.covers(average_rewards)
@settings(max_examples=50, deadline=None)
@given(st.data())
def test_average_rewards(data):
    def call(reward_lists):
        return average_rewards(*reward_lists)

    good = [[1.0, 0.0, 0.5], [0.0, 0.0, 1.0]]
    bad_list = st.sampled_from(
        [
            None,
            "x",
            [None, 0.0, 1.0],
            ["x", 0, 0],
            [math.nan, 0, 0],
            [math.inf, 0, 0],
            [1.0],
            [],
            [1e308, 1e308, 1e308],
            3,
        ]
    )
    fuzz_call(
        data,
        call,
        {"reward_lists": good},
        check=lambda r: len(r) in (0, 1, 3) and all(math.isfinite(v) for v in r),  # 0: no completions
        strategies={
            "reward_lists": st.one_of(
                st.sampled_from([[], [[]]]), bad_list.map(lambda b: [good[0], b]), bad_list.map(lambda b: [b])
            )
        },
    )
    assert average_rewards(*good) == [0.5, 0.0, 0.75]
    assert average_rewards([1e308, 0.0], [1e308, 1.0]) == [1e308, 0.5]  # no overflow


# ---- ssl4rl tasks ------------------------------------------------------------------------------------------


BAD_SIZES = st.sampled_from([0, 3, -1, 2**40, 2**63, 0.5, 16.0, True, None, "16", math.nan])


@FUZZ.covers(rotation_task)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_rotation_task(data):
    def check(ex):
        _example_ok(ex, "rotation", 8)
        assert len(ex.images) == 2
        return 0 <= int(ex.answer) < 360 and int(ex.answer) == ex.label[0] * ex.meta["granularity"]

    fuzz_call(
        data,
        rotation_task,
        {
            "image": IMAGE,
            "seed": 3,
            "granularity": 90,
            "size": 8,
            "mode": "L",
            "min_side": 8,
            "angle": None,
            "reference": True,
            "crop_scale": 0.8,
        },
        check=check,
        related={"image": ["min_side"], "min_side": ["image"]},
        strategies={
            "size": BAD_SIZES,
            "angle": st.sampled_from([45, -90, 360, "90", 1.5, object(), math.nan]),
            "reference": BAD_BOOLS,
        },
    )


@FUZZ.covers(jigsaw_task)
@settings(max_examples=50, deadline=None)
@given(st.data())
def test_jigsaw_task(data):
    def check(ex):
        _example_ok(ex, "jigsaw", 8)
        return sorted(ex.label) == list(range(4)) and ex.answer == ",".join(str(i + 1) for i in ex.label)

    fuzz_call(
        data,
        jigsaw_task,
        {"image": IMAGE, "seed": np.random.default_rng(1), "grid": 2, "size": 8, "mode": "L", "min_side": 8},
        check=check,
        related={"image": ["min_side"], "min_side": ["image"], "grid": ["size"]},
        strategies={
            "size": BAD_SIZES,
            "seed": st.sampled_from([-1, 0.5, "0", None, True, object(), np.int64(-3)]),
        },
    )


@FUZZ.covers(position_task)
@settings(max_examples=50, deadline=None)
@given(st.data())
def test_position_task(data):
    def check(ex):
        _example_ok(ex, "position", 8, channels=3)
        return ex.answer in ("top-left", "top-right", "bottom-left", "bottom-right")

    fuzz_call(
        data,
        position_task,
        {"image": IMAGE, "seed": 2, "size": 8, "mode": "RGB", "min_side": 4, "augment": True},
        check=check,
        related={"image": ["min_side"], "min_side": ["image"]},
        strategies={"size": BAD_SIZES, "augment": BAD_BOOLS},
    )


@FUZZ.covers(contrastive_task)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_contrastive_task(data):
    def check(ex):
        _example_ok(ex, "contrastive", 8)
        return ex.answer in ("positive", "negative") and ex.label == (int(ex.answer == "positive"),)

    positive = data.draw(st.sampled_from([None, True, False]), label="valid positive")
    fuzz_call(
        data,
        contrastive_task,
        {
            "image": IMAGE,
            "other": OTHER,
            "seed": 5,
            "size": 8,
            "mode": "L",
            "min_side": 8,
            "positive": positive,
            "scale": (0.2, 1.0),
        },
        check=check,
        related={"image": ["min_side"], "other": ["min_side"], "min_side": ["image", "other"]},
        strategies={
            "size": BAD_SIZES,
            "positive": st.sampled_from([0, 1, 0.5, "yes", math.nan, object()]),
            "scale": st.sampled_from(
                [
                    None,
                    (),
                    (0.5,),
                    (0.0, 1.0),
                    (0.5, 0.2),
                    (0.2, 1.5),
                    (math.nan, 1.0),
                    ("a", "b"),
                    (0.1, 0.5, 1.0),
                    0.5,
                ]
            ),
        },
    )


@FUZZ.covers(patch_task)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_patch_task(data):
    def check(ex):
        _example_ok(ex, "patch", 8)
        assert ex.label and all(0 <= q < ex.meta["levels"] for q in ex.label)
        return ex.meta["cell"] == (1, 0) and ex.answer == ",".join(map(str, ex.label))

    fuzz_call(
        data,
        patch_task,
        {
            "image": IMAGE,
            "seed": 0,
            "grid": 2,
            "code": 2,
            "levels": 4,
            "size": 8,
            "mode": "L",
            "min_side": 8,
            "cell": (1, 0),
        },
        check=check,
        related={
            "image": ["min_side"],
            "min_side": ["image"],
            "grid": ["size", "code", "cell"],
            "code": ["size", "grid"],
            "size": ["grid", "code"],
        },
        strategies={
            "size": BAD_SIZES,
            "cell": st.sampled_from(
                [(2, 0), (0, -1), (0,), (0, 0, 0), ("a", 0), (0.5, 0), "x", 1, (True, 0)]
            ),
        },
    )


IMAGES = [IMAGE, OTHER]
BAD_COUNTS = st.sampled_from(
    [0, -1, 0.5, "1", None, True, math.nan]
)  # any large count is legitimate, only slow


@FUZZ.covers(build_examples)
@settings(max_examples=50, deadline=None)
@given(st.data())
def test_build_examples(data):
    task = data.draw(
        st.sampled_from(["rotation", "jigsaw", "position", "contrastive", "patch"]), label="task"
    )

    def check(examples):
        assert isinstance(examples, list)
        return all(isinstance(ex, SSLExample) and ex.task == task for ex in examples)

    fuzz_call(
        data,
        build_examples,
        {"images": IMAGES, "task": task, "n_per_image": 2, "seed": 0},
        check=check,
        strategies={
            "n_per_image": BAD_COUNTS,
            "images": st.sampled_from([None, 3, object(), [], (), "/no/such/folder", np.zeros((0, 8, 8))]),
        },
    )
    assert len(build_examples(IMAGES, task, n_per_image=2, size=8)) == 4
    rejects(build_examples, IMAGES, task, size=-1, name="size")  # not every image skipped with a warning


@FUZZ.covers(build_dataset)
@settings(max_examples=25, deadline=None)
@given(st.data())
def test_build_dataset(data):
    pytest.importorskip("datasets")

    def check(ds):
        assert set(ds.column_names) >= {"prompt", "answer", "task"} and ds.num_rows == 2
        return all(t == "rotation" for t in ds["task"])

    fuzz_call(
        data,
        build_dataset,
        {"images": IMAGES, "task": "rotation", "n_per_image": 1, "seed": 0, "as_text": True},
        check=check,
        strategies={
            "n_per_image": BAD_COUNTS,
            "as_text": BAD_BOOLS,
            "images": st.sampled_from([None, 3, object(), [], "/no/such/folder"]),
        },
    )


def test_explicit_refusals():
    rejects(rotation_task, IMAGE, -1, name="seed")
    rejects(contrastive_task, IMAGE, "not an image", 0, positive=True, name="other")
    rejects(jigsaw_task, IMAGE, 0, grid=9, size=8, name="grid")


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(icml_agents, rl, ssl4rl)
