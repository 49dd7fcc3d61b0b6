"""ViewMask's multi-view transformer and sampler: the independent ablation equals a run on [condition][one view],
full attention mixes views, the masking schedules, the losses against explicit computations, the sampler
commits every token within its steps and never remasks one, text with classifier-free guidance, a camera
embedding, save / load, and a tiny model that learns to copy views."""

import math

import pytest
import torch
import torch.nn.functional as F

from icml_generative.viewmask import (
    LFQTokenizer,
    MultiViewTransformer,
    cosine_schedule,
    generate_views,
    mask_targets,
    masked_token_loss,
    sample_views,
    train_viewmask,
    unmasking_counts,
    view_attention_mask,
)

# small torch ops on a shared 2-core machine: intra-op threads only add synchronization
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tiny(attention="full", **kw) -> MultiViewTransformer:
    torch.manual_seed(0)
    args = {"grid": (2, 3), "num_views": 4, "width": 16, "depth": 2, "heads": 2, "attention": attention, **kw}
    return MultiViewTransformer(8, **args).eval()


def batch(b=2, views=3, seed=0, codebook=8):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, codebook, (b, 2, 3), generator=g), torch.randint(
        0, codebook, (b, views, 2, 3), generator=g
    )


# ---- attention ----------------------------------------------------------------------------------------------------


def test_independent_view_logits_equal_a_run_on_condition_and_that_view_alone():
    model = tiny("independent")
    cond, targets = batch()
    targets[0, 1, 0, 0] = model.mask_id
    full = model(cond, targets)
    for v in range(3):
        alone = model(cond, targets[:, v : v + 1], views=[v + 1])
        torch.testing.assert_close(alone[:, 0], full[:, v], rtol=1e-5, atol=1e-6)


def test_full_attention_mixes_views_and_the_ablation_does_not():
    cond, targets = batch()
    other = targets.clone()
    other[:, 2] = (other[:, 2] + 1) % 8  # change view 3 only
    full, indep = tiny("full"), tiny("independent")
    assert not torch.allclose(full(cond, targets)[:, 0], full(cond, other)[:, 0])
    torch.testing.assert_close(indep(cond, targets)[:, 0], indep(cond, other)[:, 0])


def test_attention_mask_layout():
    mask = view_attention_mask(3, 2, prefix=1, attention="independent")
    # order: text, condition (2), view 1 (2), view 2 (2)
    expected = torch.tensor(
        [
            [1, 1, 1, 0, 0, 0, 0],
            [1, 1, 1, 0, 0, 0, 0],
            [1, 1, 1, 0, 0, 0, 0],
            [1, 1, 1, 1, 1, 0, 0],
            [1, 1, 1, 1, 1, 0, 0],
            [1, 1, 1, 0, 0, 1, 1],
            [1, 1, 1, 0, 0, 1, 1],
        ],
        dtype=torch.bool,
    )
    assert torch.equal(mask, expected)
    assert view_attention_mask(3, 2, attention="full") is None


# ---- masking and losses -------------------------------------------------------------------------------------------


def test_cosine_schedule_is_monotone_from_one_to_zero():
    r = torch.linspace(0, 1, 101)
    gamma = cosine_schedule(r)
    assert gamma[0] == 1 and abs(float(gamma[-1])) < 1e-12
    assert bool((gamma[1:] < gamma[:-1]).all())
    with pytest.raises(ValueError, match="r must lie"):
        cosine_schedule(1.5)


@pytest.mark.parametrize(("n", "steps"), [(18, 12), (5, 12), (1, 3), (192, 8), (48, 1)])
def test_unmasking_counts_decrease_to_zero(n, steps):
    counts = unmasking_counts(n, steps)
    assert len(counts) == steps and counts[-1] == 0
    prev = n
    for c in counts:
        assert c < prev or prev == 0
        assert c <= math.floor(math.cos(math.pi / 2 * (counts.index(c) + 1) / steps) * n + 1e-9)
        prev = c


def test_maskgit_masks_the_cosine_count_jointly_across_views():
    _, targets = batch(b=64, seed=1)
    g = torch.Generator().manual_seed(0)
    masked, mask, ratio = mask_targets(targets, 8, "maskgit", g)
    n = targets[0].numel()
    counts = mask.flatten(1).sum(1)
    assert torch.equal(counts, torch.ceil(ratio * n).clamp(1, n).long())
    assert bool((masked[mask] == 8).all()) and torch.equal(masked[~mask], targets[~mask])
    per_view = mask.flatten(2).sum(2)  # masking is joint: views of one sample get different counts
    assert bool((per_view.max(1).values != per_view.min(1).values).any())


def test_elbo_masks_each_token_with_probability_t():
    _, targets = batch(b=4000, seed=2)
    _, mask, t = mask_targets(targets, 8, "elbo", torch.Generator().manual_seed(0))
    frac = mask.flatten(1).float().mean(1)
    assert bool((mask.flatten(1).sum(1) >= 1).all())
    slope = torch.linalg.lstsq(torch.stack([t, torch.ones_like(t)], 1), frac[:, None]).solution[:, 0]
    assert abs(float(slope[0]) - 1) < 0.05 and abs(float(slope[1])) < 0.05


@pytest.mark.parametrize("objective", ["maskgit", "elbo"])
def test_losses_equal_explicit_computations(objective):
    model = tiny()
    cond, targets = batch(b=3, seed=3)
    loss = masked_token_loss(model, cond, targets, objective, generator=torch.Generator().manual_seed(5))
    masked, mask, ratio = mask_targets(targets, model.mask_id, objective, torch.Generator().manual_seed(5))
    logits = model(cond, masked)
    if objective == "maskgit":
        expected = F.cross_entropy(logits[mask], targets[mask], label_smoothing=0.1)
    else:
        terms = []
        for i in range(3):
            ce = F.cross_entropy(logits[i][mask[i]], targets[i][mask[i]], reduction="sum")
            terms.append(ce / ratio[i] / mask[i].numel())
        expected = torch.stack(terms).mean()
    torch.testing.assert_close(loss, expected)


def test_loss_ignores_the_logits_of_unmasked_tokens():
    model = tiny()
    cond, targets = batch(b=2, seed=4)
    masked, mask, _ = mask_targets(targets, model.mask_id, "maskgit", torch.Generator().manual_seed(1))
    logits = model(cond, masked).detach().requires_grad_(True)
    F.cross_entropy(logits[mask], targets[mask]).backward()
    assert logits.grad is not None
    assert bool((logits.grad[~mask] == 0).all()) and bool((logits.grad[mask] != 0).any())


# ---- sampler ------------------------------------------------------------------------------------------------------


class Recorder(torch.nn.Module):
    """Wraps a model and records the target tokens it is called with."""

    def __init__(self, model):
        super().__init__()
        self.model, self.seen = model, []

    def forward(self, condition, targets, **kw):
        self.seen.append(targets.clone())
        return self.model(condition, targets, **kw)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.model, name)


@pytest.mark.parametrize("steps", [1, 4, 12])
def test_sampler_commits_every_token_within_its_steps_and_never_remasks(steps):
    rec = Recorder(tiny())
    cond, _ = batch(b=3, seed=5)
    out = sample_views(rec, cond, steps=steps, generator=torch.Generator().manual_seed(0))  # type: ignore[arg-type]
    assert len(rec.seen) == steps  # one model evaluation per step
    assert bool((out.tokens != rec.mask_id).all()) and bool((out.tokens < 8).all())
    assert int(out.order.min()) >= 0 and int(out.order.max()) < steps
    counts = unmasking_counts(out.tokens[0].numel(), steps)
    for s, seen in enumerate(rec.seen):
        masked = seen == rec.mask_id
        assert masked.flatten(1).sum(1).tolist() == [out.tokens[0].numel() if s == 0 else counts[s - 1]] * 3
        # every token visible at step s is the token finally returned: committed tokens never change
        assert torch.equal(seen[~masked], out.tokens[~masked])
        assert bool((out.order[~masked] < s).all()) and bool((out.order[masked] >= s).all())


def test_sampler_is_reproducible_with_a_generator():
    model, (cond, _) = tiny(), batch()
    a = sample_views(model, cond, steps=4, generator=torch.Generator().manual_seed(3)).tokens
    b = sample_views(model, cond, steps=4, generator=torch.Generator().manual_seed(3)).tokens
    assert torch.equal(a, b)


@pytest.mark.parametrize("temperature", [1e-3, 1e-40, 1e-300])
def test_a_tiny_temperature_samples_the_argmax_greedily(temperature):
    # temperature -> 0 is greedy decoding. logits / temperature overflowed float32 below ~1e-38 (and the
    # temperature itself is 0 in float32 below ~1e-45): log_softmax gave NaN and every token was 0 (measured
    # here: all 36 tokens 0 at 1e-40 and 1e-300, where the argmax is token 6; 1e-3 was already greedy)
    model, (cond, _) = tiny(), batch(b=2, seed=4)
    with torch.no_grad():
        first = model(cond, torch.full((2, 3, 2, 3), model.mask_id))
    greedy = first.argmax(-1)  # one step, no Gumbel noise on the confidence: every token is drawn at once
    out = sample_views(model, cond, steps=1, temperature=temperature, gumbel=0.0, generator=torch.Generator())
    assert torch.equal(out.tokens, greedy)


def test_text_and_classifier_free_guidance():
    model = tiny(text_vocab=5, max_text=3)
    cond, targets = batch()
    text = torch.tensor([[1, 2, 3], [4, 0, 1]])
    with_text = model(cond, targets, text=text)
    null = model(cond, targets, text=torch.full_like(text, model.null_text))
    assert not torch.allclose(with_text, null)
    loss = masked_token_loss(model, cond, targets, text=text, text_dropout=0.5)
    assert torch.isfinite(loss)
    rec = Recorder(model)
    sample_views(rec, cond, steps=3, text=text, guidance=2.0)  # type: ignore[arg-type]
    assert len(rec.seen) == 6  # conditional and unconditional per step
    with pytest.raises(ValueError, match="guidance > 0 needs text"):
        sample_views(model, cond, steps=3, guidance=1.0)
    with pytest.raises(ValueError, match="text was given"):
        tiny()(cond, targets, text=text)


def test_camera_embedding_changes_the_logits():
    model = tiny(camera_dim=2)
    cond, targets = batch()
    az = torch.tensor([0.0, 90.0, 180.0, 270.0]) * math.pi / 180
    cam = torch.stack([az.cos(), az.sin()], -1).expand(2, 4, 2)
    assert not torch.allclose(model(cond, targets, camera=cam), model(cond, targets))
    with pytest.raises(ValueError, match="camera"):
        model(cond, targets, camera=cam[:, :3])


# ---- persistence and training -------------------------------------------------------------------------------------


def test_save_load_gives_identical_logits(tmp_path):
    model = tiny("independent", text_vocab=4, max_text=2)
    cond, targets = batch()
    model.save(tmp_path / "vm")
    loaded = MultiViewTransformer.load(tmp_path / "vm")
    assert loaded.config() == model.config()
    torch.testing.assert_close(loaded(cond, targets), model(cond, targets), rtol=0, atol=0)


def test_failed_save_leaves_the_folder_as_it_was(tmp_path, monkeypatch):
    model = tiny()
    model.save(tmp_path / "vm")
    before = {p.name: p.read_bytes() for p in (tmp_path / "vm").iterdir()}
    import safetensors.torch

    def broken(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(safetensors.torch, "save_file", broken)
    with pytest.raises(OSError, match="disk full"):
        tiny(width=32).save(tmp_path / "vm")
    assert {p.name: p.read_bytes() for p in (tmp_path / "vm").iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vm"]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "keep.txt").write_text("x")
    with pytest.raises(ValueError, match="refusing to replace"):
        model.save(tmp_path / "other")
    with pytest.raises(ValueError, match=r"written by MultiViewTransformer\.save"):
        MultiViewTransformer.load(tmp_path / "other")


def test_a_tiny_model_learns_to_copy_the_condition_into_every_view():
    torch.manual_seed(0)
    model = MultiViewTransformer(6, grid=(2, 2), num_views=3, width=32, depth=2, heads=2)
    g = torch.Generator().manual_seed(0)
    cond = torch.randint(0, 6, (512, 2, 2), generator=g)
    targets = torch.stack([cond, cond.flip(-1)], 1)  # view 1 copies, view 2 mirrors
    losses = train_viewmask(
        model, cond, targets, steps=300, batch_size=64, lr=3e-3, warmup=20, label_smoothing=0.0
    )
    assert sum(losses[-20:]) < 0.2 * sum(losses[:20])
    test = torch.randint(0, 6, (64, 2, 2), generator=g)
    out = sample_views(model, test, steps=4, generator=g).tokens
    acc = (out == torch.stack([test, test.flip(-1)], 1)).float().mean()
    assert acc > 0.95


def test_train_viewmask_refuses_float16_weights_and_a_non_finite_loss():
    g = torch.Generator().manual_seed(0)
    cond = torch.randint(0, 6, (16, 2, 2), generator=g)
    targets = torch.stack([cond, cond.flip(-1)], 1)

    def model():
        torch.manual_seed(0)
        return MultiViewTransformer(6, grid=(2, 2), num_views=3, width=16, depth=1, heads=2)

    # AdamW's eps (1e-8) is 0 in float16: the old loop turned the weights NaN at the first step
    with pytest.raises(ValueError, match=r"model has float16 trainable parameters.*bfloat16"):
        train_viewmask(model().half(), cond, targets, steps=2, batch_size=8)
    losses = train_viewmask(model().bfloat16(), cond, targets, steps=2, batch_size=8)
    assert all(math.isfinite(v) for v in losses)
    broken = model()
    with torch.no_grad():
        next(broken.parameters()).fill_(math.nan)
    with pytest.raises(ValueError, match="loss became nan at step 0"):  # the old loop returned NaN losses
        train_viewmask(broken, cond, targets, steps=2, batch_size=8)


def test_generate_views_decodes_every_target_view():
    tok = LFQTokenizer(image_size=8, bits=3, downsample=4, width=8)
    model = MultiViewTransformer(tok.codebook_size, grid=tok.grid, num_views=4, width=16, depth=1, heads=2)
    images = torch.rand(2, 3, 8, 8)
    out = generate_views(tok, model, images, steps=2)
    assert out.shape == (2, 3, 3, 8, 8)
    assert bool(((out >= 0) & (out <= 1)).all())
    with pytest.raises(TypeError, match="tokenizer must have encode and decode"):
        generate_views(object(), model, images)  # type: ignore[arg-type]


# ---- bad input ----------------------------------------------------------------------------------------------------


def test_bad_input_names_the_argument():
    model = tiny()
    cond, targets = batch()
    with pytest.raises(ValueError, match="num_views - 1 = 3 target views"):
        model(cond, targets[:, :2])  # an unknown view count
    with pytest.raises(ValueError, match="views must list"):
        model(cond, targets[:, :2], views=[1, 4])
    with pytest.raises(ValueError, match="views must list"):
        model(cond, targets[:, :2], views=[2, 2])
    with pytest.raises(ValueError, match="condition must be shaped"):
        model(cond[:, :1], targets)
    with pytest.raises(ValueError, match="condition must hold token ids"):
        model(cond + 8, targets)
    with pytest.raises(TypeError, match=r"targets must be a torch\.long"):
        model(cond, targets.float())
    with pytest.raises(ValueError, match="heads must divide width"):
        MultiViewTransformer(8, width=30, heads=4)
    with pytest.raises(ValueError, match="attention must be one of"):
        MultiViewTransformer(8, attention="sparse")
    with pytest.raises(ValueError, match="num_views must be"):
        MultiViewTransformer(8, num_views=1)
    with pytest.raises(ValueError, match="objective must be one of"):
        masked_token_loss(model, cond, targets, "mse")
    with pytest.raises(ValueError, match="clean token ids"):
        masked_token_loss(model, cond, torch.full_like(targets, model.mask_id))
    with pytest.raises(ValueError, match="steps must be"):
        sample_views(model, cond, steps=0)
