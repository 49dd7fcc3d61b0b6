"""The bad-input contract (GUIDE "Bad input") for icml_generative.amnet: one fuzz test per public API.

Every case either returns a result its check verifies, or raises ValueError/TypeError naming the argument.
"""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml_generative import amnet
from icml_generative.amnet import (
    AMNet,
    AMNetLoss,
    AMNetOutput,
    Events,
    S2DGTranslator,
    SpatialGate,
    SpectralGate,
    alignment_loss,
    amnet_loss,
    enhance,
    event_voxels,
    frame_windows,
    infrared_proxy,
    low_light,
    luminance,
    simulate_events,
)
from icml_tools.fuzz import Coverage, fuzz_call, hostile, keeps_contract

FUZZ = Coverage()
FUZZ.exempt(AMNetOutput, "the output container AMNet.forward builds")
FUZZ.exempt(AMNetLoss, "the output container amnet_loss builds")
FUZZ.exempt(Events, "the container simulate_events builds; test_event_voxels fuzzes its fields")

GEN = torch.Generator().manual_seed(0)
CLIP = torch.rand(3, 3, 8, 8, generator=GEN)  # (T, 3, H, W)
GREY = torch.rand(3, 1, 6, 6, generator=GEN)
EVENTS = Events(
    torch.tensor([0.5, 1.0, 1.7, 2.0], dtype=torch.float64),
    torch.tensor([0, 3, 5, 7]),
    torch.tensor([1, 2, 0, 7]),
    torch.tensor([1, -1, 1, 1]),
)
MODEL = AMNet(window=3, event_bins=2, width=8, blocks=1).eval()
B = 2
FRAMES = 0.2 * torch.rand(B, 3, 3, 8, 8, generator=GEN)  # (B, window, 3, H, W)
VOXELS = torch.randn(B, 3, 2, 8, 8, generator=GEN)  # (B, window, event_bins, H, W)
INFRARED = torch.rand(B, 3, 1, 8, 8, generator=GEN)
TARGET = torch.rand(B, 3, 8, 8, generator=GEN)
PRESENT = torch.tensor([[True, False], [True, True]])
SMALL_INTS = st.one_of(  # hostile integers without huge valid sizes (slow, not bad input)
    st.sampled_from([None, "x", object(), 0, -1, 1, 2, 3, True, 2.0, 0.5, math.nan, 2**63, 1025]),
    st.integers(-20, 20),
)
IN_UNIT = lambda t: bool(((t >= 0) & (t <= 1)).all())  # noqa: E731


# tiny torch ops on a shared 2-core machine: intra-op threads only add synchronization
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@FUZZ.covers(luminance, low_light)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_luminance_low_light(data):
    fuzz_call(
        data,
        luminance,
        {"frames": CLIP},
        check=lambda y: y.shape == (CLIP.shape[0], 1, *CLIP.shape[-2:]) or y.shape[1] == 1,
    )

    def degrade(frames, **kwargs):
        return frames, low_light(frames, **kwargs)

    fuzz_call(
        data,
        degrade,
        {
            "frames": CLIP,
            "exposure": 0.1,
            "gamma": 2.2,
            "photons": 1000.0,
            "read_noise": 0.002,
            "bits": 8,
            "clip": True,
            "generator": torch.Generator().manual_seed(1),
        },
        check=lambda r: r[1].shape == r[0].shape and r[1].dtype == r[0].dtype,
    )


@FUZZ.covers(simulate_events)
@settings(max_examples=50, deadline=None)
@given(st.data())
def test_simulate_events(data):
    def check(ev):
        t, x, y, p = ev
        n = len(t)
        return (
            isinstance(ev, Events)
            and len(x) == len(y) == len(p) == n
            and bool((t.diff() >= 0).all())
            and bool(((t >= 0) & (t <= GREY.shape[0] - 1)).all())
            and bool(((p == 1) | (p == -1)).all())
        )

    fuzz_call(
        data,
        simulate_events,
        {"frames": GREY, "threshold": 0.2, "refractory": 0.1, "upsample": 2, "eps": 1e-3},
        check=check,
        strategies={"upsample": SMALL_INTS},
    )


@FUZZ.covers(event_voxels)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_event_voxels(data):
    def voxels(t, x, y, polarity, num_frames, height, width, bins):
        return event_voxels(Events(t, x, y, polarity), num_frames, height, width, bins=bins)

    fields = ["t", "x", "y", "polarity", "events"]
    fuzz_call(
        data,
        voxels,
        {"t": EVENTS.t, "x": EVENTS.x, "y": EVENTS.y, "polarity": EVENTS.polarity}
        | {"num_frames": 3, "height": 8, "width": 8, "bins": 3},
        check=lambda v: v.ndim == 4 and v.dtype == torch.float32,
        related={
            **{f: fields for f in fields[:4]},
            "height": ["events", "y"],
            "width": ["events", "x"],
        },
        strategies={
            **{k: SMALL_INTS for k in ("num_frames", "height", "width", "bins")},
        },
    )


@FUZZ.covers(infrared_proxy)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_infrared_proxy(data):
    fuzz_call(
        data,
        infrared_proxy,
        {
            "frames": CLIP,
            "emissivity": torch.rand(3, 1, 8, 8, generator=GEN),
            "weight": 0.5,
            "sigma": 1.5,
            "downsample": 2,
            "noise": 0.01,
            "generator": torch.Generator().manual_seed(2),
        },
        check=lambda y: y.ndim == 4 and y.shape[1] == 1 and IN_UNIT(y),
        related={"frames": ["emissivity"], "emissivity": ["frames"]},
        strategies={
            "downsample": SMALL_INTS,
        },
    )


@FUZZ.covers(SpatialGate, SpectralGate, S2DGTranslator)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_gates(data):
    for cls in (SpatialGate, SpectralGate, S2DGTranslator):

        def build_and_apply(channels, x, cls=cls):
            return cls(channels)(x)

        fuzz_call(
            data,
            build_and_apply,
            {"channels": 4, "x": torch.randn(2, 4, 5, 6, generator=GEN)},
            check=lambda y: y.ndim == 4 and y.shape[1] == 4 and bool(torch.isfinite(y).all()),
            related={"channels": ["x"], "x": ["channels"]},
            strategies={"channels": SMALL_INTS},
        )


@FUZZ.covers(AMNet)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_amnet_build(data):
    def build_and_run(modalities, window, event_bins, width, blocks, translators, brightness):
        model = AMNet(modalities, window, event_bins, width, blocks, translators, brightness)
        frames = torch.rand(1, model.window, 3, 4, 6)
        events = torch.rand(1, model.window, model.event_bins, 4, 6) if "events" in model.modalities else None
        return model(frames, events).sample

    fuzz_call(
        data,
        build_and_run,
        {
            "modalities": ("events", "infrared"),
            "window": 3,
            "event_bins": 2,
            "width": 8,
            "blocks": 1,
            "translators": True,
            "brightness": 0.4,
        },
        check=lambda y: y.shape == (1, 3, 4, 6),
        strategies={
            "modalities": st.one_of(
                hostile(("events", "infrared")),
                st.sampled_from([("infrared",), ["events"], ("rgb",), "events", ("events", "events")]),
            ),
            **{k: SMALL_INTS for k in ("window", "event_bins", "width", "blocks")},
        },
    )


@FUZZ.covers(AMNet)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_amnet_forward(data):
    fuzz_call(
        data,
        lambda frames, events, infrared, present, return_features: (
            MODEL(frames, events, infrared, present=present, return_features=return_features).sample
        ),
        {
            "frames": FRAMES,
            "events": VOXELS,
            "infrared": INFRARED,
            "present": PRESENT,
            "return_features": True,
        },
        check=lambda y: y.shape == (B, 3, 8, 8),
        mutate=["frames", "events", "infrared", "present"],
        related={
            "frames": ["events", "infrared", "present"],
            "events": ["frames"],
            "infrared": ["frames"],
            "present": ["frames"],
        },
    )


@FUZZ.covers(amnet_loss, alignment_loss)
@settings(max_examples=50, deadline=None)
@given(st.data())
def test_losses(data):
    fuzz_call(
        data,
        amnet_loss,
        {
            "model": MODEL,
            "frames": FRAMES,
            "target": TARGET,
            "events": VOXELS,
            "infrared": None,
            "dropout": 0.5,
            "ssim_weight": 0.2,
            "align_weight": 0.1,
            "generator": torch.Generator().manual_seed(3),
        },
        check=lambda out: isinstance(out, AMNetLoss) and out.loss.ndim == 0,
        related={
            "frames": ["target", "events"],
            "target": ["frames"],
            "events": ["frames"],
            "model": ["events", "frames"],
        },
        strategies={
            "infrared": st.sampled_from([None, "x", INFRARED, INFRARED[:1], INFRARED.double()]),
        },
    )
    feats = torch.randn(2, 8, 4, 4, generator=GEN)
    fuzz_call(
        data,
        alignment_loss,
        {"translated": feats, "real": feats + 0.1},
        check=lambda v: v.ndim == 0 and not v.item() < 0,
        related={"translated": ["real"], "real": ["translated"]},
    )


@FUZZ.covers(enhance, frame_windows)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_enhance(data):
    clip = 0.2 * torch.rand(3, 3, 6, 7, generator=GEN)
    fuzz_call(
        data,
        enhance,
        {
            "model": MODEL,
            "frames": clip,
            "events": torch.randn(3, 2, 6, 7, generator=GEN),
            "infrared": torch.rand(3, 1, 6, 7, generator=GEN),
            "batch_size": 2,
            "progress": False,
        },
        check=lambda y: y.shape[-3:] == (3, 6, 7) and IN_UNIT(y),
        related={
            "frames": ["events", "infrared"],
            "events": ["frames"],
            "infrared": ["frames"],
            "model": ["events", "infrared", "frames"],
        },
        strategies={"batch_size": SMALL_INTS},
    )
    fuzz_call(
        data,
        frame_windows,
        {"clip": CLIP, "window": 3},
        check=lambda w: w.shape[1] % 2 == 1 and w.shape[0] >= 1,
        strategies={"window": SMALL_INTS},
    )


# breaches the fuzz found in the first version, each now an error naming the argument or a finite result
FIXED_BREACHES = {
    # the gates' forward checked nothing: torch's RuntimeError from the first convolution
    "SpatialGate(wrong channels)": (lambda: SpatialGate(4)(torch.randn(1, 3, 5, 5)), ["x"]),
    "SpectralGate(wrong channels)": (lambda: SpectralGate(4)(torch.randn(1, 3, 5, 5)), ["x"]),
    "S2DGTranslator(float64)": (lambda: S2DGTranslator(4)(torch.randn(1, 4, 5, 5).double()), ["x"]),
    # complex pixel coordinates: NotImplementedError from x.min()
    "event_voxels(complex x)": (
        lambda: event_voxels(EVENTS._replace(x=EVENTS.x.to(torch.complex64)), 3, 8, 8),
        ["x", "events", "events.x"],
    ),
    # float pixel coordinates: NaN gave torch's IndexError (and 0.5 was silently truncated)
    "event_voxels(NaN x)": (
        lambda: event_voxels(EVENTS._replace(x=torch.tensor([0.0, math.nan, 1.0, 2.0])), 3, 8, 8),
        ["x", "events", "events.x"],
    ),
    # sigma = 1e-300 is 0 in float32: the kernel's centre was 0 / 0 and every pixel NaN (now a float64 kernel)
    "infrared_proxy(sigma=1e-300)": (lambda: infrared_proxy(CLIP, sigma=1e-300), ["sigma"]),
    # a threshold near 0 passed its check and looped for ΔL / threshold rounds (forever at 1e-300)
    "simulate_events(threshold=1e-300)": (lambda: simulate_events(CLIP, threshold=1e-300), ["threshold"]),
    # clip=None silently meant no clipping
    "low_light(clip=None)": (lambda: low_light(CLIP, clip=None), ["clip"]),
    # NaN features passed check_tensor (no finite check): NaN loss, no warning
    "alignment_loss(NaN)": (
        lambda: alignment_loss(torch.full((2, 4), math.nan), torch.ones(2, 4)),
        ["translated"],
    ),
    # huge finite features overflowed the float32 mean: inf, no warning (now summed in float64)
    "alignment_loss(huge)": (
        lambda: alignment_loss(torch.full((2, 8), 3e38), torch.ones(2, 8)),
        ["translated"],
    ),
    # a huge finite target (not checked to lie in [0, 1]) overflowed L1 and SSIM: NaN loss, no warning
    "amnet_loss(huge target)": (lambda: amnet_loss(MODEL, FRAMES, TARGET * 3e38, VOXELS), ["target"]),
}


@pytest.mark.parametrize("case", sorted(FIXED_BREACHES))
def test_fixed_breaches(case):
    fn, names = FIXED_BREACHES[case]
    keeps_contract(fn, names)


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(amnet)
