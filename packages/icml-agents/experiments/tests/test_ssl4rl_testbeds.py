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
            "control_steps": 3,
            "variants": ("rotation", "rotnet", "rotation+jigsaw"),
            "supervised": ("rotation", "rotnet"),
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
    arms = {"random-init", repro.CONTROL, "ssl4rl:rotation", "supervised:rotation", "ssl4rl:rotnet"}
    assert arms | {"supervised:rotnet", "ssl4rl:rotation+jigsaw"} <= set(rows)
    rot, rnd, ctrl = rows["ssl4rl:rotation"], rows["random-init"], rows[repro.CONTROL]
    sup, pair = rows["supervised:rotation"], rows["GRPO - supervised, rotation (paired over seeds)"]
    assert "GRPO - supervised, rotnet (paired over seeds)" in rows
    # The paired difference's mean is the difference of the means (same seeds in both arms).
    assert pair["probe_diff"] == pytest.approx(rot["probe_accuracy"] - sup["probe_accuracy"])
    assert pair["pretext_diff"] == pytest.approx(rot["reward_rotation"] - sup["reward_rotation"])
    text = rows["text tier (tiny VLM, rotation)"]
    # The verdict recomputed from the reported rows, the branch on the positive control included.
    control_ok = ctrl["probe_accuracy"] - ctrl["ci95"] > rnd["probe_accuracy"] + rnd["ci95"]
    if control_ok:
        expected = (
            rot["reward_rotation"] >= 0.8
            and rot["probe_accuracy"] - rot["ci95"] > rnd["probe_accuracy"] + rnd["ci95"]
            and text["gain"] >= 0.3
        )
        assert (result["ours"], result["baseline"]) == (rot["probe_accuracy"], rnd["probe_accuracy"])
    else:
        expected = (
            rot["reward_rotation"] >= 0.8
            and text["gain"] >= 0.3
            and pair["pretext_diff_low"] > -repro.DELTA_PRETEXT
            and pair["probe_diff_low"] > -repro.DELTA_PROBE
        )
        assert (result["ours"], result["baseline"]) == (rot["reward_rotation"], sup["reward_rotation"])
    assert result["headroom"]["holds"] == control_ok and pair["in_verdict"] == (not control_ok)
    assert result["passed"] == expected


def test_mean_ci_is_the_t_interval():
    m, h = repro.mean_ci([1.0, 2.0, 3.0])
    assert m == 2.0 and h == pytest.approx(4.302652729911275 * 1.0 / np.sqrt(3))


def test_decide_branches_on_the_positive_control():
    rnd = [0.88, 0.89, 0.90]  # mean 0.89, half-width 0.025
    probe = {
        "random-init": rnd,
        "ssl4rl:rotation": [0.87, 0.88, 0.89],
        "supervised:rotation": [0.87, 0.88, 0.89],
    }
    pretext = {"ssl4rl:rotation": [0.85, 0.86, 0.87], "supervised:rotation": [0.86, 0.87, 0.88]}
    # A control whose interval clears random init's: (2) decides, and it fails (rotation below random init),
    # although (1), (3) and the non-inferiority (4a: -0.01 with zero spread, 4b: 0) all hold.
    up = repro.decide({**probe, repro.CONTROL: [0.95, 0.96, 0.97]}, pretext, text_gain=0.5)
    assert up["control_ok"] and up["representation"] == "measurable"
    assert up["reward_ok"] and up["text_ok"] and up["ni_pretext_ok"] and up["ni_probe_ok"]
    assert not up["probe_ok"] and not up["passed"]
    # A control whose interval overlaps random init's: (2) is "not measurable" and the verdict rests on
    # (1), (3), (4a), (4b), which all hold.
    flat = repro.decide({**probe, repro.CONTROL: [0.90, 0.91, 0.92]}, pretext, text_gain=0.5)
    assert not flat["control_ok"] and flat["representation"] == "not measurable on this testbed"
    assert flat["passed"] and not flat["probe_ok"]
    # In that branch a GRPO arm 0.06 behind in pretext accuracy fails (4a) (margin 0.05), and the text
    # tier still counts.
    behind = {**pretext, "ssl4rl:rotation": [0.80, 0.81, 0.82]}
    out = repro.decide({**probe, repro.CONTROL: [0.90, 0.91, 0.92]}, behind, text_gain=0.5)
    assert not out["ni_pretext_ok"] and not out["passed"]
    assert out["pretext_diff"] == pytest.approx((-0.06, 0.0), abs=1e-12)
    assert not repro.decide({**probe, repro.CONTROL: [0.90, 0.91, 0.92]}, pretext, text_gain=0.2)["passed"]
    with pytest.raises(ValueError, match="probe"):
        repro.decide(probe, pretext, text_gain=0.5)  # no control
    with pytest.raises(ValueError, match="same number"):
        repro.decide({**probe, repro.CONTROL: [0.9, 0.9]}, pretext, text_gain=0.5)
    with pytest.raises(ValueError, match="text_gain"):
        repro.decide({**probe, repro.CONTROL: rnd}, pretext, text_gain=float("nan"))


def test_paired_difference_is_the_t_interval_of_the_differences():
    m, h = repro.paired_difference([0.9, 0.8, 0.7], [0.8, 0.8, 0.8])
    assert m == pytest.approx(0.0) and h == pytest.approx(4.302652729911275 * 0.1 / np.sqrt(3))
    with pytest.raises(ValueError, match="same length"):
        repro.paired_difference([0.9, 0.8], [0.8, 0.8, 0.8])
    with pytest.raises(ValueError, match="at least 2"):
        repro.paired_difference([0.9], [0.8])


def test_digit_task_and_rotnet_pool():
    images = torch.rand(6, 1, 16, 16)
    task = cnn.digit_task(images, [0, 1, 2, 3, 8, 9])
    assert task.images.shape == (6, 1, 1, 16, 16) and task.n_classes == 10 and task.n_positions == 1
    assert task.reward(task.answer_text(task.labels.numpy()), task.answers) == [1.0] * 6
    policy = cnn.SSLPolicy({"digit": task})
    cnn.supervised_train(policy, {"digit": task}, steps=2, batch=4, progress=False)
    assert 0 <= cnn.task_reward(policy, task) <= 1
    with pytest.raises(ValueError, match="labels"):
        cnn.digit_task(images, [0, 1, 2, 3, 8, 10])
    with pytest.raises(ValueError, match="labels"):
        cnn.digit_task(images, [0, 1])
    with pytest.raises(TypeError, match="images"):
        cnn.digit_task(images.numpy(), [0, 1, 2, 3, 8, 9])
    # Classic RotNet: the rotated image alone, one view, the same 4-way answer.
    rotnet = cnn.make_task("rotation", digits(8), seed=0, **repro.VARIANTS["rotnet"]["rotation"])
    assert rotnet.images.shape[1] == 1 and rotnet.n_classes == 4
    logits = cnn.SSLPolicy({"rotation": rotnet})("rotation", rotnet.images)
    assert logits.shape == (8, 1, 4)
