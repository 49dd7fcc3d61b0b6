import functools

import pytest

from icml_agents.ssl4rl import rewards as R

# (completion, ground truth, official exact-match score): the release's semantics, case by case.
EXACT_MATCH_GOLDEN = [
    ("<answer>90</answer>", "90", 1.0),
    ("<think>turned left</think> <answer>90</answer>", "90", 1.0),
    ("<answer> 90 \n</answer>", "90", 1.0),  # the extracted answer is stripped
    ("<answer>180</answer>", "90", 0.0),
    ("90", "90", 0.0),  # tags missing
    ("<answer>90", "90", 0.0),  # unclosed tag
    ("<ANSWER>90</ANSWER>", "90", 0.0),  # tags are case-sensitive
    ("<answer></answer>", "90", 0.0),
    ("<answer>top-left</answer>", "top-left,upper-left", 1.0),  # comma-separated alternatives
    ("<answer>upper-left</answer>", "top-left,upper-left", 1.0),
    ("<answer>upper-left</answer>", "top-left, upper-left", 1.0),  # alternatives stripped (our choice)
    ("<answer>left</answer>", "top-left,upper-left", 0.0),
    ("<answer>Top-Left</answer>", "top-left", 0.0),  # case-sensitive, as released
    ("<answer>top - left</answer>", "top-left", 0.0),  # inner whitespace is not normalized
    ("<answer>90</answer><answer>180</answer>", "180", 0.0),  # the first tagged span counts
    ("<answer>9\n0</answer>", "9\n0", 1.0),  # DOTALL: the span may cross lines
    ("system\nYou are...\nuser\nrotate?\nassistant\n<answer>270</answer>", "270", 1.0),
    (
        "user\n<answer>270</answer>\nassistant\nI think 90",
        "270",
        0.0,
    ),  # only text after the last assistant turn
    ("assistant\n<answer>0</answer>\nassistant\n<answer>90</answer>", "0", 0.0),
    ("assistant\n<answer>0</answer>\nassistant\n<answer>90</answer>", "90", 1.0),
]

# (completion, ground truth, official jigsaw score): partial credit per position, parse errors score 0.
JIGSAW_GOLDEN = [
    ("<answer>2,1,4,3</answer>", "2,1,4,3", 1.0),
    ("<answer>2,1,3,4</answer>", "2,1,4,3", 0.5),
    ("<answer>1,2,3,4</answer>", "2,1,4,3", 0.0),
    ("<answer> 2, 1 ,4,3 </answer>", "2,1,4,3", 1.0),  # int() tolerates surrounding spaces
    ("<answer>2,x,4,3</answer>", "2,1,4,3", 0.75),  # a malformed number loses only its position
    ("<answer>2.0,1,4,3</answer>", "2,1,4,3", 0.75),  # "2.0" is not an integer
    ("<answer>2,1</answer>", "2,1,4,3", 0.5),  # missing positions score 0
    ("<answer>2,1,4,3,5</answer>", "2,1,4,3", 1.0),  # extra positions are ignored
    ("<answer>2 1 4 3</answer>", "2,1,4,3", 0.0),  # not comma-separated: one malformed position
    ("<answer></answer>", "2,1,4,3", 0.0),
    ("2,1,4,3", "2,1,4,3", 0.0),  # tags missing
    ("<answer>1,2,3,4,5,6,7,8,9</answer>", "1,2,3,4,5,6,7,9,8", 7 / 9),
    ("assistant\n<answer>1,2,3,4</answer>\nassistant\n<answer>1,2,4,3</answer>", "1,2,3,4", 0.5),
]


@pytest.mark.parametrize(("completion", "truth", "expected"), EXACT_MATCH_GOLDEN)
def test_exact_match_golden(completion, truth, expected):
    assert R.score_answer_match(completion, truth) == expected
    assert R.compute_score("RotationQA", completion, truth) == expected  # the verl dispatch
    assert R.answer_match_reward([completion], answer=[truth]) == [expected]


@pytest.mark.parametrize(("completion", "truth", "expected"), JIGSAW_GOLDEN)
def test_jigsaw_golden(completion, truth, expected):
    assert R.score_jigsaw(completion, truth) == pytest.approx(expected, abs=1e-12)
    assert R.compute_score("JigsawQA", completion, truth) == pytest.approx(expected, abs=1e-12)


def test_ignore_case_option_and_whitespace():
    assert R.score_answer_match("<answer> Top-Left </answer>", "top-left", ignore_case=True) == 1.0
    assert R.score_answer_match("<answer>POSITIVE</answer>", "positive") == 0.0
    assert R.score_answer_match("<answer>\tpositive\n</answer>", "positive") == 1.0
    assert R.score_answer_match("<answer>90</answer>", 90) == 1.0  # numeric ground truth


def test_patch_reward_is_one_minus_normalized_l1():
    assert R.score_patch("<answer>0,1,2,3</answer>", "0,1,2,3") == 1.0
    assert R.score_patch("<answer>3,1,2,3</answer>", "0,1,2,3") == pytest.approx(1 - 1 / 4)
    assert R.score_patch("<answer>1,1,2,3</answer>", "0,1,2,3") == pytest.approx(1 - (1 / 3) / 4)
    assert R.score_patch("<answer>0,1,x,7</answer>", "0,1,2,3") == pytest.approx(
        0.5
    )  # malformed, out of range
    assert R.score_patch("<answer>0,1</answer>", "0,1,2,3") == pytest.approx(0.5)
    assert R.score_patch("0,1,2,3", "0,1,2,3") == 0.0
    assert R.score_patch("<answer>0,7</answer>", "0,7", levels=8) == 1.0
    with pytest.raises(ValueError, match="levels"):
        R.score_patch("<answer>0</answer>", "0", levels=1)
    with pytest.raises(ValueError, match="ground_truth"):
        R.score_patch("<answer>0</answer>", "4")


def test_format_reward():
    good = [
        "<answer>90</answer>",
        "<think>a\nb</think>\n<answer>90</answer>\n",
        "user\nassistant\n<answer>x</answer>",
    ]
    bad = ["90", "<answer>90</answer> because", "<think>x</think>", "Sure: <answer>90</answer>"]
    assert R.format_reward(good + bad) == [1.0] * 3 + [0.0] * 4


def test_conversational_completions_use_the_last_assistant_message():
    conv = [
        {"role": "user", "content": "<answer>0</answer>"},
        {"role": "assistant", "content": "<answer>90</answer>"},
    ]
    parts = [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "<answer>"},
                {"type": "text", "text": "90"},
                {"type": "text", "text": "</answer>"},
            ],
        }
    ]
    assert R.answer_match_reward([conv, parts, [conv[0]]], answer=["90", "90", "90"]) == [1.0, 1.0, 0.0]


def test_mixed_task_reward_dispatches_per_row_and_skips_none():
    completions = [
        "<answer>90</answer>",
        "<answer>2,1,3,4</answer>",
        "<answer>positive</answer>",
        "<answer>top-left</answer>",
        "<answer>0,0,3,3</answer>",
        "<answer>1</answer>",
    ]
    out = R.ssl4rl_reward(
        completions,
        answer=["90", "2,1,4,3", "negative", "top-left", "0,0,3,0", "1"],
        task=["rotation", "jigsaw", "contrastive", "PositionQA_augmented", "patch", None],
        prompts=["p"] * 6,
        completion_ids=[[0]] * 6,
        trainer_state=None,
    )
    assert out == [1.0, 0.5, 0.0, 1.0, 0.75, None]
    with pytest.raises(ValueError, match="task"):
        R.score_task("captioning", "<answer>x</answer>", "x")


def test_mixed_task_reward_skips_rows_of_a_concatenated_dataset_without_an_answer():
    """``datasets.concatenate_datasets`` fills the columns a dataset lacks with None: an SSL4RL dataset
    (prompt, answer, task) joined with a math one (prompt, solution) gives rows with task and answer None.
    Those rows raised ``TypeError: answer[2]: ground_truth must be a string, got None`` (the answer was
    checked before the task said the row is not ours); they get None now, as the docstring promised."""
    datasets = pytest.importorskip("datasets")
    ssl = datasets.Dataset.from_dict({"prompt": ["p1"], "answer": ["90, 450"], "task": ["rotation"]})
    math = datasets.Dataset.from_dict({"prompt": ["p2"], "solution": ["42"]})
    rows = [row for row in datasets.concatenate_datasets([ssl, math]) for _ in range(2)]  # 2 generations
    assert rows[2]["answer"] is None and rows[2]["task"] is None
    columns = {k: [row[k] for row in rows] for k in rows[0] if k != "prompt"}
    completions = ["<answer>90</answer>", "<answer>0</answer>", "<answer>42</answer>", "x"]
    out = R.ssl4rl_reward(completions, prompts=["p"] * 4, completion_ids=[[0]] * 4, **columns)
    assert out == [1.0, 0.0, None, None]
    with pytest.raises(TypeError, match=r"answer\[1\]: ground_truth must be a string"):  # a task needs one
        R.ssl4rl_reward(completions[:2], answer=["90", None], task=["rotation", "rotation"])


def test_average_rewards():
    assert R.average_rewards([1.0, 0.0], [0.5, 0.5]) == [0.75, 0.25]
    with pytest.raises(ValueError):
        R.average_rewards([1.0], [1.0, 0.0])


def test_bad_input_raises_with_names():
    with pytest.raises(ValueError, match="answer"):
        R.answer_match_reward(["<answer>1</answer>"], answer="1")
    with pytest.raises(ValueError, match="answer"):
        R.jigsaw_reward(["a", "b"], answer=["1,2"])
    with pytest.raises(TypeError, match="completions"):
        R.format_reward("<answer>1</answer>")
    with pytest.raises(TypeError, match="completion"):
        R.score_answer_match(42, "42")
    with pytest.raises(TypeError, match="ground_truth"):
        R.score_answer_match("<answer>1</answer>", None)
    with pytest.raises(ValueError, match="ground_truth"):
        R.score_jigsaw("<answer>1,2</answer>", "1,b")


def test_trl_rewards_honour_ignore_case():
    """``ignore_case`` given to the TRL reward functions (``functools.partial``) reaches the scoring: the old
    functions swallowed it in ``**kwargs`` and scored case-sensitively ([0.0] and [0.0, None])."""
    match = functools.partial(R.answer_match_reward, ignore_case=True)
    assert match(["<answer>Left</answer>"], answer=["left"]) == [1.0]
    assert R.answer_match_reward(["<answer>Left</answer>"], answer=["left"]) == [0.0]
    mixed = R.ssl4rl_reward(
        ["<answer>Left</answer>", "x"], answer=["left", None], task=["position", None], ignore_case=True
    )
    assert mixed == [1.0, None]
    with pytest.raises(ValueError, match="ignore_case must be True or False"):
        R.answer_match_reward(["<answer>a</answer>"], answer=["a"], ignore_case="yes")
