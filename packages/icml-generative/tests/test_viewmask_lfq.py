"""LFQ and the LFQ tokenizer: index order against hand-written examples, code/index round trips over the
whole codebook, the straight-through gradient, the entropy loss against an explicit sum over codes, a
trained tokenizer's round trip on palette images, save/load, bad input."""

import itertools
import math

import pytest
import torch

from icml_generative.viewmask.lfq import LFQ, LFQTokenizer, train_tokenizer

# small torch ops on a shared 2-core machine: intra-op threads only add synchronization
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _latent(signs):
    """A ``(1, bits, 1, 1)`` latent with the given signs (0 stays 0)."""
    return torch.tensor(signs, dtype=torch.float32).view(1, -1, 1, 1) * 0.5


# ---- LFQ ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("signs", "index"),
    [
        ((1, -1, 1), 5),
        ((-1, -1, 1), 1),
        ((1, 1, -1), 6),
        ((-1, -1, -1), 0),
        ((1, 1, 1), 7),
        ((0, -1, -1), 4),  # zero quantizes to +1: a one bit
    ],
)
def test_lfq_index_is_msb_first(signs, index):
    lfq = LFQ(3)
    out = lfq(_latent(signs))
    assert out.indices.dtype == torch.int64
    assert out.indices.shape == (1, 1, 1)
    assert out.indices.item() == index
    expected = [1.0 if s >= 0 else -1.0 for s in signs]
    assert out.quantized.flatten().tolist() == expected
    assert lfq.indices_to_codes(out.indices).flatten().tolist() == expected


@pytest.mark.parametrize("bits", [1, 3, 6, 10])
def test_lfq_codes_indices_round_trip_over_all_codes(bits):
    lfq = LFQ(bits)
    assert lfq.codebook_size == 2**bits
    indices = torch.arange(2**bits).view(2, 1, -1)  # (B, H, W)
    codes = lfq.indices_to_codes(indices)
    assert codes.shape == (2, bits, 1, 2 ** (bits - 1))
    assert codes.dtype == torch.float32
    # each code spelled out bit by bit, most significant first
    flat = codes.permute(0, 2, 3, 1).reshape(-1, bits)
    for i in [0, 1, 2**bits - 1, 2 ** (bits - 1), (2**bits) // 3]:
        assert flat[i].tolist() == [1.0 if b == "1" else -1.0 for b in format(i, f"0{bits}b")]
    assert torch.equal(lfq.codes_to_indices(codes), indices)
    assert torch.equal(lfq(codes).indices, indices)
    assert torch.equal(lfq(codes).quantized, codes)
    assert torch.equal(lfq.codes, flat)  # the buffer lists the codes in index order


def test_lfq_quantized_values_and_straight_through_gradient():
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(2, 4, 3, 5, generator=gen)
    z[0, 1, 2, 3] = 0.0
    z.requires_grad_(True)
    out = LFQ(4)(z)
    assert torch.equal(out.quantized.detach(), torch.where(z.detach() >= 0, 1.0, -1.0))
    assert out.quantized[0, 1, 2, 3].item() == 1.0
    weight = torch.randn(z.shape, generator=gen)
    (out.quantized * weight).sum().backward()
    assert torch.equal(z.grad, weight)


def test_lfq_losses_equal_explicit_sums_over_codes():
    bits, tau, gamma, ew, cw = 2, 0.7, 1.3, 0.4, 0.6
    gen = torch.Generator().manual_seed(1)
    z = torch.randn(1, bits, 1, 3, generator=gen, dtype=torch.float64)
    lfq = LFQ(bits, ew, cw, gamma, tau).double()
    out = lfq(z)
    tokens = [z[0, :, 0, j].tolist() for j in range(3)]
    codes = list(itertools.product([1.0, -1.0], repeat=bits))
    probs = []
    for t in tokens:
        scores = [math.exp(2 * tau * sum(a * c for a, c in zip(t, code, strict=True))) for code in codes]
        probs.append([s / sum(scores) for s in scores])
    per_token = sum(-sum(p * math.log(p) for p in row) for row in probs) / len(tokens)
    average = [sum(row[k] for row in probs) / len(tokens) for k in range(len(codes))]
    codebook = -sum(p * math.log(p) for p in average)
    entropy = per_token - gamma * codebook
    commitment = sum((a - math.copysign(1.0, a)) ** 2 for t in tokens for a in t) / (bits * len(tokens))
    assert out.entropy_loss.item() == pytest.approx(entropy, rel=1e-12)
    assert out.commitment_loss.item() == pytest.approx(commitment, rel=1e-12)
    assert out.loss.item() == pytest.approx(ew * entropy + cw * commitment, rel=1e-12)


def test_lfq_entropy_loss_is_finite_with_a_sharp_temperature():
    """τ = 100 on a wide latent: most code probabilities underflow to 0; loss and gradient stay finite."""
    z = (torch.randn(4, 8, 4, 4, generator=torch.Generator().manual_seed(2)) * 5).requires_grad_(True)
    out = LFQ(8)(z)
    out.loss.backward()
    assert torch.isfinite(out.loss)
    assert torch.isfinite(z.grad).all()
    assert out.entropy_loss.item() >= -math.log(256) - 1e-4


# ---- the tokenizer --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("size", "downsample", "bits"), [(16, 4, 5), (8, 1, 2), (16, 8, 1), (12, 2, 3)])
def test_tokenizer_shapes(size, downsample, bits):
    torch.manual_seed(0)
    tok = LFQTokenizer(size, 3, bits, downsample, 8).eval()
    side = size // downsample
    assert tok.grid == (side, side)
    assert tok.tokens_per_image == side * side
    assert tok.codebook_size == 2**bits
    x = torch.rand(3, 3, size, size, generator=torch.Generator().manual_seed(0))
    indices = tok.encode(x)
    assert indices.shape == (3, side, side)
    assert indices.dtype == torch.int64
    assert 0 <= int(indices.min()) and int(indices.max()) < 2**bits
    assert torch.equal(tok.encode(x[1:2]), indices[1:2])  # no dependence on the rest of the batch
    images = tok.decode(indices).detach()
    assert images.shape == x.shape
    assert 0 <= float(images.min()) and float(images.max()) <= 1
    out = tok(x)
    assert out.reconstruction.shape == x.shape
    assert torch.equal(out.indices, indices)
    assert torch.allclose(out.reconstruction, images)
    assert out.loss.item() == pytest.approx((out.reconstruction_loss + out.quantizer_loss).item())
    assert out.reconstruction_loss.item() == pytest.approx(((out.reconstruction - x) ** 2).mean().item())


PALETTE = torch.tensor(
    [
        [0, 0, 0],
        [0.9, 0.1, 0.1],
        [0.1, 0.8, 0.2],
        [0.2, 0.3, 0.9],
        [0.9, 0.8, 0.1],
        [0.1, 0.8, 0.8],
        [0.8, 0.2, 0.8],
    ]
)


def palette_images(n, seed, cell=4, cells=8):
    """``n`` images of ``cells × cells`` grid-aligned ``cell``-pixel squares, each black or one of 6 colours."""
    picks = torch.randint(len(PALETTE), (n, cells, cells), generator=torch.Generator().manual_seed(seed))
    images = PALETTE[picks].permute(0, 3, 1, 2)  # (n, 3, cells, cells)
    return images.repeat_interleave(cell, 2).repeat_interleave(cell, 3).contiguous()


def psnr(a, b):
    return 10 * math.log10(1 / float(((a - b) ** 2).mean()))


def test_trained_tokenizer_round_trips_palette_images():
    """200 steps at batch 32 (about 20 s on one thread). Measured on held-out images over 4 seeds: PSNR
    23.7-27.6 dB (predicting the mean colour: about 9 dB), re-encoding keeps 98.0-99.5 % of the tokens."""
    train, test = palette_images(256, 0), palette_images(64, 1)
    torch.manual_seed(0)
    tok = LFQTokenizer(32, 3, bits=6, downsample=4, width=32)
    before = psnr(tok.decode(tok.encode(test)).detach(), test)
    losses = train_tokenizer(tok, train, steps=200, batch_size=32, seed=0)
    assert len(losses) == 200
    assert not tok.training
    assert sum(losses[-20:]) < sum(losses[:20])
    indices = tok.encode(test)
    reconstruction = tok.decode(indices).detach()
    after = psnr(reconstruction, test)
    assert before < 12 < 20 < after
    stable = (tok.encode(reconstruction) == indices).float().mean().item()
    assert stable > 0.95


def test_train_tokenizer_is_reproducible():
    x = palette_images(8, 3, cell=2, cells=4)  # 8×8 images
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        tok = LFQTokenizer(8, 3, 3, 2, 8)
        runs.append((train_tokenizer(tok, x, steps=3, batch_size=4, seed=5), tok.encode(x)))
    assert runs[0][0] == runs[1][0]
    assert torch.equal(runs[0][1], runs[1][1])


def test_save_load_gives_identical_outputs(tmp_path):
    torch.manual_seed(0)
    tok = LFQTokenizer(16, 3, 5, 4, 16, entropy_weight=0.2, commitment_weight=0.5).eval()
    x = torch.rand(4, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    path = tok.save(tmp_path / "tok")
    loaded = LFQTokenizer.load(path)
    assert loaded.config() == tok.config()
    assert not loaded.training
    indices = tok.encode(x)
    assert torch.equal(loaded.encode(x), indices)
    assert torch.equal(loaded.decode(indices), tok.decode(indices))
    tok.save(path)  # replacing a folder save wrote is allowed


def test_failed_save_leaves_the_path_as_it_was(tmp_path, monkeypatch):
    tok = LFQTokenizer(8, 3, 2, 2, 8)
    file = tmp_path / "file"
    file.write_text("other content")
    with pytest.raises(ValueError, match="path"):
        tok.save(file)
    assert file.read_text() == "other content"
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="path"):
        tok.save(folder)
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]
    assert (folder / "notes.txt").read_text() == "keep me"
    # a save that fails while writing leaves an earlier save intact, and no temporary folder behind
    saved = tok.save(tmp_path / "saved")
    before = {p.name: p.read_bytes() for p in saved.iterdir()}

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("safetensors.torch.save_file", broken)
    with torch.no_grad():
        tok.decoder[0].weight.add_(1.0)
    with pytest.raises(OSError, match="disk full"):
        tok.save(saved)
    assert {p.name: p.read_bytes() for p in saved.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "folder", "saved"]


# ---- bad input ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bits", [0, 17, -1, 2.5, True])
def test_bits_out_of_range(bits):
    with pytest.raises(ValueError, match="bits"):
        LFQ(bits)
    with pytest.raises(ValueError, match="bits"):
        LFQTokenizer(bits=bits)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"image_size": 30, "downsample": 4}, "image_size"),
        ({"image_size": 12, "downsample": 8}, "image_size"),
        ({"downsample": 3}, "downsample"),
        ({"downsample": 16}, "downsample"),
        ({"downsample": 4.0}, "downsample"),
        ({"width": 0}, "width"),
        ({"channels": 0}, "channels"),
        ({"entropy_weight": -1.0}, "entropy_weight"),
        ({"commitment_weight": math.nan}, "commitment_weight"),
    ],
)
def test_tokenizer_refuses_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        LFQTokenizer(**kwargs)


def test_lfq_refuses_bad_arguments():
    with pytest.raises(ValueError, match="inv_temperature"):
        LFQ(3, inv_temperature=0.0)
    with pytest.raises(ValueError, match="diversity_gamma"):
        LFQ(3, diversity_gamma=-1.0)
    lfq = LFQ(3)
    with pytest.raises(ValueError, match="z"):
        lfq(torch.zeros(1, 4, 2, 2))
    with pytest.raises(TypeError, match="z"):
        lfq(torch.zeros(1, 3, 2, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match="z"):
        lfq(torch.full((1, 3, 2, 2), math.nan))
    with pytest.raises(ValueError, match="indices"):
        lfq.indices_to_codes(torch.tensor([[[8]]]))
    with pytest.raises(ValueError, match="indices"):
        lfq.indices_to_codes(torch.tensor([[[-1]]]))
    with pytest.raises(TypeError, match="indices"):
        lfq.indices_to_codes(torch.zeros(1, 2, 2))
    with pytest.raises(ValueError, match="codes"):
        lfq.codes_to_indices(torch.zeros(3, 2, 2))


def test_tokenizer_refuses_bad_images_and_indices():
    tok = LFQTokenizer(16, 3, 4, 4, 8)
    with pytest.raises(ValueError, match="images"):
        tok.encode(torch.rand(2, 1, 16, 16))  # wrong channel count
    with pytest.raises(ValueError, match=r"images.*divisible by the downsampling factor 4"):
        tok.encode(torch.rand(2, 3, 18, 18))
    with pytest.raises(ValueError, match=r"images.*image_size 16"):
        tok.encode(torch.rand(2, 3, 24, 24))  # divisible, but not the trained size
    with pytest.raises(ValueError, match="images"):
        tok.encode(torch.rand(3, 16, 16))
    with pytest.raises(ValueError, match=r"images must lie in \[0, 1\]"):
        tok.encode(torch.rand(2, 3, 16, 16) + 1)
    with pytest.raises(TypeError, match="images"):
        tok.encode(torch.rand(2, 3, 16, 16, dtype=torch.float64))
    with pytest.raises(ValueError, match="indices"):
        tok.decode(torch.zeros(2, 3, 4, dtype=torch.int64))  # not the grid
    with pytest.raises(ValueError, match="indices"):
        tok.decode(torch.full((2, 4, 4), 16))


def test_train_tokenizer_refuses_bad_arguments():
    tok = LFQTokenizer(8, 3, 2, 2, 8)
    x = torch.rand(4, 3, 8, 8)
    with pytest.raises(TypeError, match="tokenizer"):
        train_tokenizer(torch.nn.Linear(2, 2), x)
    with pytest.raises(ValueError, match="steps"):
        train_tokenizer(tok, x, steps=0)
    with pytest.raises(ValueError, match="steps"):
        train_tokenizer(tok, x, steps=10**7)
    with pytest.raises(ValueError, match="batch_size"):
        train_tokenizer(tok, x, batch_size=0)
    with pytest.raises(ValueError, match="lr"):
        train_tokenizer(tok, x, lr=0.0)
    with pytest.raises(ValueError, match="seed"):
        train_tokenizer(tok, x, seed=-1)
    with pytest.raises(ValueError, match="log_every"):
        train_tokenizer(tok, x, log_every=-1)
    with pytest.raises(ValueError, match="images"):
        train_tokenizer(tok, x * 2)
    with pytest.raises(TypeError, match="images"):
        train_tokenizer(tok, (x * 255).to(torch.uint8))
    with pytest.raises(ValueError, match="images"):
        train_tokenizer(tok, torch.rand(4, 3, 16, 16))
    # AdamW's eps (1e-8) is 0 in float16: the old loop turned the weights NaN at the first step
    with pytest.raises(ValueError, match=r"tokenizer has float16 trainable parameters.*bfloat16"):
        train_tokenizer(tok.half(), x.half(), steps=2, batch_size=2)
