import numpy as np
import pytest
import torch

from icml_agents.rl.grpo import GRPOConfig
from icml_agents.ssl4rl import cnn, repro, vlm
from icml_agents.ssl4rl.tasks import rotation_angles

torch.set_num_threads(1)


def digits(n=64):
    from sklearn.datasets import load_digits

    return load_digits().images[:n] / 16.0


def test_cnn_policy_answers_are_scored_by_the_official_rewards():
    tasks = {
        name: cnn.make_task(name, digits(8), seed=0, **opts)
        for name, opts in [
            ("rotation", {"granularity": 45}),
            ("jigsaw", {"grid": 3}),
            ("position", {}),
            ("contrastive", {}),
            ("patch", {}),
        ]
    }
    policy = cnn.SSLPolicy(tasks)
    for name, t in tasks.items():
        logits = policy(name, t.images)
        assert logits.shape == (8, t.n_positions, t.n_classes)
        # The label written as an answer gets reward 1 from the official scoring.
        assert t.reward(t.answer_text(t.labels.numpy()), t.answers) == [1.0] * 8
    assert tasks["rotation"].n_classes == len(rotation_angles(45)) == 8
    assert tasks["jigsaw"].labels.shape == (8, 9)


def test_grpo_raises_the_rotation_reward_on_a_small_pool():
    tasks = {"rotation": cnn.make_task("rotation", digits(48), seed=0, n_per_image=4)}
    torch.manual_seed(0)
    policy = cnn.SSLPolicy(tasks)
    before = cnn.task_reward(policy, tasks["rotation"])
    curve = cnn.grpo_train(
        policy, tasks, steps=150, seed=0, lr=2e-3, config=GRPOConfig(num_generations=8, beta=0.01)
    )
    after = cnn.task_reward(policy, tasks["rotation"])
    assert abs(before - 0.25) < 0.15 and after > before + 0.25, (before, after)
    assert len(curve["frac_zero_std"]) == len(curve["step"]) and all(
        0 <= f <= 1 for f in curve["frac_zero_std"]
    )


def test_combined_reward_trains_all_heads_jointly():
    images = digits(16)
    tasks = {
        "rotation": cnn.make_task("rotation", images, seed=0),
        "jigsaw": cnn.make_task("jigsaw", images, seed=0),
    }
    policy = cnn.SSLPolicy(tasks)
    curve = cnn.grpo_train(policy, tasks, steps=3, seed=0, batch=4, combine=True, log_every=1)
    assert all(len(v) == 3 for v in curve["reward"].values())


def test_vlm_tokens_generation_and_warm_up():
    assert vlm.decode([*vlm.encode("<answer>270</answer>"), vlm.EOS, 7]) == "<answer>270</answer>"
    with pytest.raises(ValueError, match="vocabulary"):
        vlm.encode("<answer>ÄÖ</answer>")
    torch.manual_seed(0)
    task = cnn.make_task("rotation", digits(32), seed=0)
    model = vlm.TinyVLM()
    vlm.warm_up(model, task.images, ["0", "90", "180", "270"], steps=40, seed=0)
    ids, mask = model.generate(model.image_tokens(task.images[:16]), torch.Generator().manual_seed(0))
    texts = [vlm.decode(i) for i in ids]
    formatted = np.mean([t.startswith("<answer>") and t.endswith("</answer>") for t in texts])
    assert formatted > 0.8, texts
    assert mask.shape == ids.shape and (mask.sum(1) >= 1).all()
    curve = vlm.grpo_text(
        model,
        task.images,
        task.answers,
        steps=2,
        batch=4,
        config=GRPOConfig(num_generations=4, beta=0.01, scale_rewards="none"),
        log_every=1,
    )
    assert len(curve["reward"]) == 3 and all(0 <= r <= 1 for r in curve["reward"])


@pytest.mark.slow
def test_repro_follows_the_protocol_on_a_tiny_budget(monkeypatch):
    from icml_tools.protocol import validate_result

    monkeypatch.setitem(
        repro.BUDGETS,
        "quick",
        {
            "seeds": 2,
            "steps": 2,
            "variants": ("rotation", "rotation+jigsaw"),
            "supervised": ("rotation",),
            "text": "quick",
            "workers": 1,
        },
    )
    monkeypatch.setitem(
        vlm.TEXT_BUDGETS,
        "quick",
        {"warmup": 2, "steps": 2, "batch": 4, "group": 4, "lr": 1e-3, "beta": 0.01, "scale": "none"},
    )
    result = validate_result(repro.run("quick", 0))
    rows = {r["method"]: r for r in result["rows"]}
    assert {"random-init", "ssl4rl:rotation", "supervised:rotation", "ssl4rl:rotation+jigsaw"} <= set(rows)
    rot, rnd = rows["ssl4rl:rotation"], rows["random-init"]
    assert result["ours"] == rot["probe_accuracy"] and result["baseline"] == rnd["probe_accuracy"]
    text = rows["text tier (tiny VLM, rotation)"]
    expected = (
        rot["reward_rotation"] >= 0.8
        and rot["probe_accuracy"] - rot["ci95"] > rnd["probe_accuracy"] + rnd["ci95"]
        and text["gain"] >= 0.3
    )
    assert result["passed"] == expected
    with pytest.raises(ValueError, match="budget"):
        repro.run("medium", 0)


def test_mean_ci_is_the_t_interval():
    m, h = repro.mean_ci([1.0, 2.0, 3.0])
    assert m == 2.0 and h == pytest.approx(4.302652729911275 * 1.0 / np.sqrt(3))
