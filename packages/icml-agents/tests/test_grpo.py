import math

import pytest
import torch

from icml_agents.rl.grpo import GRPOConfig, compute_advantages, grpo_loss, k3_kl

torch.set_num_threads(1)


def test_advantages_scales_match_explicit_formulas():
    r = [1.0, 0.0, 0.0, 0.0, 2.0, 4.0, 6.0, 8.0]
    adv, frac = compute_advantages(r, 4, scale="group")
    g1 = [1 - 0.25, -0.25, -0.25, -0.25]
    sd1 = math.sqrt(sum(x * x for x in g1) / 3)
    g2 = [-3.0, -1.0, 1.0, 3.0]
    sd2 = math.sqrt(sum(x * x for x in g2) / 3)
    expected = [x / (sd1 + 1e-4) for x in g1] + [x / (sd2 + 1e-4) for x in g2]
    torch.testing.assert_close(adv, torch.tensor(expected, dtype=torch.float64))
    assert frac == 0.0
    mean = sum(r) / 8
    sd_all = math.sqrt(sum((x - mean) ** 2 for x in r) / 7)
    adv_b, _ = compute_advantages(r, 4, scale="batch")
    torch.testing.assert_close(
        adv_b, torch.tensor([x / (sd_all + 1e-4) for x in g1 + g2], dtype=torch.float64)
    )
    adv_n, _ = compute_advantages(r, 4, scale="none")
    torch.testing.assert_close(adv_n, torch.tensor(g1 + g2, dtype=torch.float64))
    with pytest.raises(ValueError, match="scale"):
        compute_advantages(r, 4, scale="token")


def test_tied_groups_are_counted():
    r = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.5, 0.5, 0.5])[:9]  # groups of 3
    adv, frac = compute_advantages(r, 3)
    assert frac == pytest.approx(2 / 3)
    assert adv[:6].abs().max() == 0


def explicit_loss(logp, old, ref, adv, mask, eps_low, eps_high, beta, loss_type, max_len):
    """A per-element Python loop over the GRPO formula."""
    b, t = len(logp), len(logp[0])
    per_token = [[0.0] * t for _ in range(b)]
    for i in range(b):
        for j in range(t):
            rho = math.exp(logp[i][j] - old[i][j])
            clipped = min(max(rho, 1 - eps_low), 1 + eps_high)
            kl = math.exp(ref[i][j] - logp[i][j]) - (ref[i][j] - logp[i][j]) - 1
            per_token[i][j] = -min(rho * adv[i], clipped * adv[i]) + beta * kl
    if loss_type == "grpo":
        rows = [sum(per_token[i][j] * mask[i][j] for j in range(t)) / max(1, sum(mask[i])) for i in range(b)]
        return sum(rows) / b
    total = sum(per_token[i][j] * mask[i][j] for i in range(b) for j in range(t))
    if loss_type == "dapo":
        return total / sum(map(sum, mask))
    return total / (b * max_len)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
@pytest.mark.parametrize(("eps_high", "beta"), [(None, 0.0), (0.28, 0.04)])
def test_loss_equals_explicit_computation(loss_type, eps_high, beta):
    gen = torch.Generator().manual_seed(0)
    b, t = 6, 5
    logp = -torch.rand(b, t, generator=gen, dtype=torch.float64) * 2
    old = (
        logp + torch.randn(b, t, generator=gen, dtype=torch.float64) * 0.4
    )  # ratios on both sides of the clip
    ref = logp + torch.randn(b, t, generator=gen, dtype=torch.float64) * 0.3
    adv = torch.randn(b, generator=gen, dtype=torch.float64)
    mask = (torch.rand(b, t, generator=gen) > 0.3).double()
    mask[0] = 0  # an empty completion must not divide by zero
    loss, stats = grpo_loss(
        logp,
        old,
        adv,
        mask,
        ref,
        epsilon=0.2,
        epsilon_high=eps_high,
        beta=beta,
        loss_type=loss_type,
        max_completion_length=7,
    )
    expected = explicit_loss(
        logp.tolist(),
        old.tolist(),
        ref.tolist(),
        adv.tolist(),
        mask.tolist(),
        0.2,
        0.2 if eps_high is None else eps_high,
        beta,
        loss_type,
        7,
    )
    assert loss.item() == pytest.approx(expected, rel=1e-12, abs=1e-14)
    kl = k3_kl(logp, ref)
    assert stats["kl"] == pytest.approx(float((kl * mask).sum() / mask.sum()), rel=1e-12)
    assert 0 < stats["clip_ratio"] < 1


def test_k3_is_an_unbiased_nonnegative_kl_estimate():
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    q = torch.tensor([0.2, 0.2, 0.6], dtype=torch.float64)
    per = k3_kl(p.log(), q.log())
    assert (per >= 0).all()
    assert float((p * per).sum()) == pytest.approx(
        float((p * (p / q).log()).sum()), rel=1e-12
    )  # E_p[k3] = KL(p||q)


def test_on_policy_gradient_is_the_advantage_weighted_score():
    theta = torch.tensor([0.3, -0.2, 0.1], dtype=torch.float64, requires_grad=True)
    actions = torch.tensor([0, 1, 2, 0])
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5], dtype=torch.float64)
    logp = torch.log_softmax(theta, 0)[actions].unsqueeze(1)  # (4, 1): a categorical policy, one token
    loss, _ = grpo_loss(logp, logp.detach(), adv, loss_type="grpo")
    loss.backward()
    pi = torch.softmax(theta.detach(), 0)
    expected = (
        -sum(a * (torch.eye(3, dtype=torch.float64)[k] - pi) for a, k in zip(adv, actions, strict=True)) / 4
    )
    torch.testing.assert_close(theta.grad, expected)


def test_tied_reward_group_gives_zero_gradient():
    torch.manual_seed(0)
    policy = torch.nn.Linear(4, 3)
    x = torch.randn(6, 4)
    actions = torch.tensor([0, 2, 1, 1, 0, 2])
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.0])  # group 1 tied, group 2 not
    adv, frac = compute_advantages(rewards, 3)
    assert frac == 0.5

    def grads(rows):
        policy.zero_grad()
        logp = torch.log_softmax(policy(x[rows]), -1).gather(1, actions[rows, None])  # (n, 1)
        loss, _ = grpo_loss(
            logp, logp.detach(), adv[rows].float(), loss_type="dr_grpo", max_completion_length=1
        )
        loss.backward()
        return [p.grad.clone() for p in policy.parameters()]

    for g in grads(slice(0, 3)):  # the tied group alone: exactly zero gradient
        assert g.abs().max() == 0
    for g in grads(slice(3, 6)):
        assert g.abs().max() > 0
    both, second = grads(slice(0, 6)), grads(slice(3, 6))
    for g_all, g_2 in zip(both, second, strict=True):  # dr_grpo sums: the tied group adds nothing
        torch.testing.assert_close(g_all * 6, g_2 * 3)


def test_bad_input_raises():
    lp = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="advantages"):
        grpo_loss(lp, lp, torch.zeros(3))
    with pytest.raises(ValueError, match="old_logp"):
        grpo_loss(lp, torch.zeros(2, 4), torch.zeros(2))
    with pytest.raises(ValueError, match="ref_logp"):
        grpo_loss(lp, lp, torch.zeros(2), beta=0.1)
    with pytest.raises(ValueError, match="loss_type"):
        grpo_loss(lp, lp, torch.zeros(2), loss_type="ppo")
    with pytest.raises(TypeError, match="logp"):
        grpo_loss([[0.0]], lp, torch.zeros(2))
    with pytest.raises(ValueError, match="mask"):
        grpo_loss(lp, lp, torch.zeros(2), mask=torch.ones(2, 2))
    # issue 22, item 8: a negative clip range gave loss 0, NaN log-probs a NaN loss, without a word
    with pytest.raises(ValueError, match="epsilon must be"):
        grpo_loss(lp, lp, torch.zeros(2), epsilon=-0.1)
    with pytest.raises(ValueError, match="epsilon_high must be"):
        grpo_loss(lp, lp, torch.zeros(2), epsilon_high=float("nan"))
    with pytest.raises(ValueError, match="beta must be"):
        grpo_loss(lp, lp, torch.zeros(2), beta=-1.0)
    nan = lp.clone()
    nan[0, 1] = float("nan")
    with pytest.raises(ValueError, match="logp must be finite"):
        grpo_loss(nan, lp, torch.zeros(2))
    with pytest.raises(ValueError, match="old_logp must be finite"):
        grpo_loss(lp, nan, torch.zeros(2))
    with pytest.raises(ValueError, match="advantages must be finite"):
        grpo_loss(lp, lp, torch.tensor([0.0, float("inf")]))
    padded = torch.ones(2, 3)
    padded[0, 1] = 0.0  # a NaN on a padding token is ignored
    nan.requires_grad_(True)
    loss, _ = grpo_loss(nan, lp, torch.ones(2), mask=padded)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(nan.grad).all() and nan.grad[0, 1] == 0
    with pytest.raises(ValueError, match="scale_rewards"):
        GRPOConfig(scale_rewards="token")
    with pytest.raises(ValueError, match="num_generations"):
        GRPOConfig(num_generations=1)
    with pytest.raises(ValueError, match="beta"):
        GRPOConfig(beta=-1.0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_advantages_are_the_float32_ones_cast_back(dtype):
    rewards = torch.tensor([4096.0, 4096.0, 0.0, 1.0, 3e4, -3e4, 3.0, 7.0], dtype=dtype)
    for scale in ("group", "batch", "none"):
        adv, frac = compute_advantages(rewards, 2, scale)
        expected, expected_frac = compute_advantages(rewards.float(), 2, scale)
        assert adv.dtype == dtype and frac == expected_frac == 0.25
        torch.testing.assert_close(adv, expected.to(dtype), rtol=0, atol=0)
    # all tied and large: std + eps / 2^13 was 0 + 0 in float16, so "batch" gave NaN
    tied, _ = compute_advantages(torch.full((4,), 4096.0, dtype=dtype), 2, "batch")
    assert tied.tolist() == [0.0] * 4


def test_batch_scale_of_rewards_near_the_float32_range():
    # 2^e was capped at 2^1023, inf in float32: every advantage was NaN
    adv, frac = compute_advantages(torch.tensor([3e38, 3e38, 3e38, 3e38]), 2, "batch")
    assert adv.tolist() == [0.0] * 4 and frac == 1.0
    adv, _ = compute_advantages(torch.tensor([3e38, -3e38, 0.0, 1.0], dtype=torch.bfloat16), 2, "batch")
    expected, _ = compute_advantages([3e38, -3e38, 0.0, 1.0], 2, "batch")
    torch.testing.assert_close(adv, expected.to(torch.bfloat16), rtol=1e-2, atol=1e-40)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_half_precision_loss_is_the_float32_one_cast_back(dtype, loss_type):
    # 64 x 1024 = 65536 tokens: in float16 the token count and the sums overflowed (the dapo loss was 0,
    # mean_ratio NaN) and the k3 of small log-ratios cancelled (kl 0, or in bfloat16 a third of the truth)
    gen = torch.Generator().manual_seed(0)
    logp = (torch.randn(64, 1024, generator=gen) * 0.5 - 1).to(dtype)
    old = (logp.float() + 0.01 * torch.randn(64, 1024, generator=gen)).to(dtype)
    ref = (logp.float() + 0.05 * torch.randn(64, 1024, generator=gen)).to(dtype)
    adv = torch.randn(64, generator=gen).to(dtype)
    half = logp.clone().requires_grad_()
    full = logp.float().requires_grad_()
    loss, stats = grpo_loss(half, old, adv, ref_logp=ref, beta=0.04, loss_type=loss_type)
    loss32, stats32 = grpo_loss(
        full, old.float(), adv.float(), ref_logp=ref.float(), beta=0.04, loss_type=loss_type
    )
    loss.backward()
    loss32.backward()
    assert loss.dtype == half.grad.dtype == dtype
    assert loss.item() == loss32.to(dtype).item() and stats == stats32
    torch.testing.assert_close(half.grad, full.grad.to(dtype), rtol=0, atol=0)
    assert stats["kl"] == pytest.approx(0.00124, rel=0.01)  # 0.05^2 / 2: the float64 value is 0.0012394


@pytest.mark.parametrize("spread", [3e-4, 1e-4])
def test_k3_of_float32_log_probs_close_to_the_reference_does_not_cancel(spread):
    # exp(d) - d - 1 in float32 made the mean 27% low at a log-ratio spread of 3e-4 and negative at 1e-4
    g = torch.Generator().manual_seed(0)
    logp = (-3 * torch.rand(64, 512, generator=g, dtype=torch.float64)).float().requires_grad_(True)
    ref = (logp.detach().double() + spread * torch.randn(64, 512, generator=g, dtype=torch.float64)).float()
    d = ref.double() - logp.detach().double()  # exact: the log-ratio of the float32 inputs
    exact = d**2 / 2 + d**3 / 6 + d**4 / 24 + d**5 / 120  # |d| < 3e-3: the omitted terms are below 1e-12
    kl = k3_kl(logp, ref)
    kl.sum().backward()
    kl = kl.detach()
    assert kl.dtype == torch.float32 and bool((kl >= 0).all()) and bool((kl[d == 0] == 0).all())
    nonzero = d != 0
    assert float(((kl.double() - exact).abs() / exact)[nonzero].max()) < 3e-7
    assert float(kl.double().mean() / exact.mean()) == pytest.approx(1, abs=1e-7)
    grad = -torch.expm1(d)  # d k3 / d logp
    assert float(((logp.grad.double() - grad).abs() / grad.abs())[nonzero].max()) < 3e-7
    _, stats = grpo_loss(logp, logp.detach(), torch.zeros(64), ref_logp=ref, beta=0.04)
    assert stats["kl"] == pytest.approx(float(exact.mean()), rel=2e-7)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_k3_is_the_float32_one_cast_back(dtype):
    delta = torch.linspace(-0.1, 0.1, 11).to(dtype)
    zeros = torch.zeros_like(delta)
    kl = k3_kl(zeros, delta)
    assert kl.dtype == dtype
    torch.testing.assert_close(kl, k3_kl(zeros.float(), delta.float()).to(dtype), rtol=0, atol=0)


def accumulation_batch(seed=0):
    """8 completions of up to 6 tokens in float64; the last four are short (1-3 tokens), so micro-batches
    of 4 hold 24 and 7 completion tokens: a per-micro-batch token mean would weigh them unequally."""
    gen = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(8, 6, generator=gen, dtype=torch.float64) * 2).requires_grad_()
    old = logp.detach() + torch.randn(8, 6, generator=gen, dtype=torch.float64) * 0.3  # both clip sides
    ref = logp.detach() + torch.randn(8, 6, generator=gen, dtype=torch.float64) * 0.3
    adv = torch.randn(8, generator=gen, dtype=torch.float64)
    lengths = torch.tensor([6, 6, 5, 6, 1, 2, 1, 3])
    mask = (torch.arange(6) < lengths[:, None]).double()
    return logp, old, ref, adv, mask


@pytest.mark.parametrize("k", [2, 4])
def test_dapo_accumulation_with_num_items_in_batch_equals_one_batch(k):
    logp, old, ref, adv, mask = accumulation_batch()
    kw = {"loss_type": "dapo", "beta": 0.04, "epsilon_high": 0.28}
    full, _ = grpo_loss(logp, old, adv, mask, ref, **kw)
    (g_full,) = torch.autograd.grad(full, logp)
    n_items = mask.sum()  # a tensor, as TRL passes it
    total, g_acc = 0.0, torch.zeros_like(logp)
    for rows in torch.arange(8).chunk(k):
        part, _ = grpo_loss(
            logp[rows], old[rows], adv[rows], mask[rows], ref[rows], num_items_in_batch=n_items, **kw
        )
        total = total + part
        g_acc += torch.autograd.grad(part, logp)[0]
    # measured (k = 2, 4): max |difference| 0 and 5.6e-17 (loss), 0 (gradient) in float64; bound 1e-14
    torch.testing.assert_close(total, full, rtol=0, atol=1e-14)
    torch.testing.assert_close(g_acc, g_full, rtol=0, atol=1e-14)
    # without it, the usual loss / k weighs the short micro-batch's tokens more: measured relative gradient
    # error 0.84 (k = 2) and 0.79 (k = 4), the old behaviour and TRL's "bnpo"; bound 0.1
    g_bnpo = sum(
        torch.autograd.grad(grpo_loss(logp[r], old[r], adv[r], mask[r], ref[r], **kw)[0] / k, logp)[0]
        for r in torch.arange(8).chunk(k)
    )
    assert float((g_bnpo - g_full).norm() / g_full.norm()) > 0.1


def test_num_items_in_batch_is_checked():
    lp = torch.zeros(2, 3)
    with pytest.raises(ValueError, match=r"num_items_in_batch.*dapo"):
        grpo_loss(lp, lp, torch.zeros(2), loss_type="grpo", num_items_in_batch=6)
    for bad in (-1.0, float("nan"), torch.ones(2), "6", True):
        with pytest.raises(ValueError, match="num_items_in_batch"):
            grpo_loss(lp, lp, torch.zeros(2), num_items_in_batch=bad)
    adv = torch.tensor([1.0, -1.0])
    # a count below 1 is clamped to 1, as TRL clamps it; 6 tokens give the token mean
    torch.testing.assert_close(
        grpo_loss(lp, lp, adv, num_items_in_batch=0)[0], grpo_loss(lp, lp, adv, num_items_in_batch=1)[0]
    )
    torch.testing.assert_close(
        grpo_loss(lp, lp, adv, num_items_in_batch=torch.tensor(6))[0], grpo_loss(lp, lp, adv)[0]
    )


def trl_compute_loss(trl, logp, old, ref, adv, mask, *, loss_type, beta, eps_high, n_items, accum, max_len):
    """TRL's own ``GRPOTrainer._compute_loss`` on given log-probabilities: one process, training mode,
    token-level ratios, no vLLM, the model's forward replaced by ``logp``."""
    import collections
    import types

    self = types.SimpleNamespace(
        aux_loss_enabled=False,
        _get_per_token_logps_and_entropies=lambda *a, **k: (logp, torch.zeros_like(logp), None),
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level="token",
        beta=beta,
        loss_type=loss_type,
        epsilon_low=0.2,
        epsilon_high=eps_high,
        args=types.SimpleNamespace(delta=None, use_bias_correction_kl=False, steps_per_generation=accum),
        use_vllm=False,
        model=types.SimpleNamespace(training=True),
        current_gradient_accumulation_steps=accum,
        max_completion_length=max_len,
        _entropy_bonus_enabled=False,
        accelerator=types.SimpleNamespace(num_processes=1, gather=lambda x: x, reduce=lambda x, reduction: x),
        _metrics=collections.defaultdict(lambda: collections.defaultdict(list)),
    )
    b, t = logp.shape
    inputs = {
        "prompt_ids": torch.zeros(b, 1, dtype=torch.long),
        "prompt_mask": torch.ones(b, 1, dtype=torch.long),
        "completion_ids": torch.zeros(b, t, dtype=torch.long),
        "completion_mask": mask,
        "advantages": adv,
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "num_items_in_batch": n_items,
    }
    return trl.GRPOTrainer._compute_loss(self, None, inputs)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_accumulated_micro_batch_losses_equal_trl_grpo_trainer(loss_type):
    """Micro-batch by micro-batch, our loss (``num_items_in_batch`` for dapo, ``/ k`` otherwise, as the
    module docstring says) equals TRL 1.16's ``GRPOTrainer._compute_loss`` under ``gradient_accumulation_steps
    = k``, and so do the gradients."""
    trl = pytest.importorskip("trl")
    logp, old, ref, adv, mask = accumulation_batch(1)
    k, n_items = 2, mask.sum()
    for rows in torch.arange(8).chunk(k):
        theirs = trl_compute_loss(
            trl, logp[rows], old[rows], ref[rows], adv[rows], mask[rows], loss_type=loss_type, beta=0.04,
            eps_high=0.28, n_items=n_items, accum=k, max_len=6,
        )  # fmt: skip
        ours, _ = grpo_loss(
            logp[rows], old[rows], adv[rows], mask[rows], ref[rows], epsilon_high=0.28, beta=0.04,
            loss_type=loss_type, max_completion_length=6,
            **({"num_items_in_batch": n_items} if loss_type == "dapo" else {}),
        )  # fmt: skip
        if loss_type != "dapo":
            ours = ours / k
        g_theirs, g_ours = (torch.autograd.grad(x, logp)[0] for x in (theirs, ours))
        # measured: max |difference| 0 (losses) and at most 4.3e-19 (gradients) in float64; bound 1e-14
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-14)
        torch.testing.assert_close(g_ours, g_theirs, rtol=0, atol=1e-14)


def test_batch_scale_of_tied_and_near_tied_rewards():
    """A tied batch of float32 1000.1 got A = -0.369 (a rounded mean over its rounded std); a group of
    rewards one ulp apart, under the batch std of a rounded mean, got 0.0 and 0.379 (measured on the old
    code) against the exact (fractions, mpmath) -0.1255 and 0.3765. Measured error now 3e-8 relative,
    tolerance 1e-6."""
    for scale in ("group", "batch", "none"):
        adv, frac = compute_advantages(torch.full((8,), 1000.1), 4, scale)
        assert adv.tolist() == [0.0] * 8 and frac == 1.0
    v = torch.tensor(1000.1)
    r = torch.cat([v.repeat(7), torch.nextafter(v, torch.tensor(2000.0))[None]])
    adv, frac = compute_advantages(r, 4, "batch")
    assert adv[:4].tolist() == [0.0] * 4 and frac == 0.5
    expected = torch.tensor([-0.12550494463404147] * 3 + [0.37651483390212437], dtype=torch.float64)
    torch.testing.assert_close(adv[4:].double(), expected, rtol=1e-6, atol=0)
