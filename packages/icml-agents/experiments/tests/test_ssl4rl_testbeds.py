import numpy as np
import pytest
import torch

from icml_agents.rl.grpo import GRPOConfig
from icml_agents.ssl4rl.tasks import rotation_angles
from icml_agents_experiments.ssl4rl import cnn, repro, vlm
from icml_tools.repro import run_reproduction

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


def test_linear_probe_picks_c_by_cross_validation_on_the_training_set_only():
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), 10)
    x = rng.normal(size=(30, 5)) + 3 * np.eye(3, 5)[y]
    acc, c = cnn.linear_probe(x, y, x[:6], y[:6], c_grid=(0.01, 1.0))
    # The chosen C is the one with the best 5-fold score on the training examples, smaller C on ties.
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    cv = StratifiedKFold(5, shuffle=True, random_state=0)
    scores = [
        cross_val_score(
            make_pipeline(StandardScaler(), LogisticRegression(C=k, max_iter=5000)), x, y, cv=cv
        ).mean()
        for k in (0.01, 1.0)
    ]
    assert c == (0.01, 1.0)[int(np.argmax(scores))] and 0 <= acc <= 1
    # Test labels never influence the choice: shuffling them leaves C unchanged.
    assert cnn.linear_probe(x, y, x[:6], y[::-1][:6], c_grid=(0.01, 1.0))[1] == c
    assert cnn.linear_probe(x, y, x, y, c_grid=(1.0,))[1] == 1.0
    with pytest.raises(ValueError, match="c_grid"):
        cnn.linear_probe(x, y, x, y, c_grid=(0.0, 1.0))
    with pytest.raises(ValueError, match="folds"):
        cnn.linear_probe(x, y, x, y, folds=1)


def test_probe_features_layers():
    torch.manual_seed(0)
    enc = cnn.Encoder(width=8)
    x = torch.rand(3, 1, 16, 16)
    pooled, gap = cnn.features(enc, x, "pooled"), cnn.features(enc, x, "gap")
    assert pooled.shape == (3, 4 * 8 * 4) and gap.shape == (3, 4 * 8)
    # Global average pooling is the mean of the 2 x 2 pooled cells (4 x 4 map: equal cells).
    np.testing.assert_allclose(pooled.reshape(3, 32, 4).mean(2), gap, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="layer"):
        cnn.features(enc, x, "conv9")


def test_grpo_train_logs_entropy_and_decays_the_learning_rate():
    tasks = {"rotation": cnn.make_task("rotation", digits(8), seed=0)}
    torch.manual_seed(0)
    policy = cnn.SSLPolicy(tasks)
    before = [p.detach().clone() for p in policy.encoder.parameters()]
    curve = cnn.grpo_train(policy, tasks, steps=3, seed=0, batch=4, log_every=1, schedule="linear")
    # The RL signal reaches the encoder (no BatchNorm, so train and eval modes compute the same features).
    assert all(not torch.equal(a, b) for a, b in zip(before, policy.encoder.parameters(), strict=True))
    assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in policy.modules())
    assert len(curve["entropy"]) == 3 and abs(curve["entropy"][0] - np.log(4)) < 0.05  # near uniform at init
    opt, sched = cnn._optimizer(policy, 1e-3, 4, "linear")
    lrs = []
    for _ in range(4):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    np.testing.assert_allclose(lrs, [1e-3, 7.5e-4, 5e-4, 2.5e-4])
    with pytest.raises(ValueError, match="schedule"):
        cnn.grpo_train(policy, tasks, steps=1, schedule="cosine")
    with pytest.raises(ValueError, match="lr"):
        cnn.supervised_train(policy, tasks, steps=1, lr=0.0)


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
    result = run_reproduction("ssl4rl-digits", "quick", 0)
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


def test_mean_ci_is_the_t_interval():
    m, h = repro.mean_ci([1.0, 2.0, 3.0])
    assert m == 2.0 and h == pytest.approx(4.302652729911275 * 1.0 / np.sqrt(3))
