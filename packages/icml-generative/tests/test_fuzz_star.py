"""The bad-input contract (GUIDE "Bad input") for icml_generative.star: one fuzz test per public API.

Every case either returns a result its check verifies, or raises ValueError/TypeError naming the argument.
"""

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml_generative import star
from icml_generative.star import (
    STARVAE,
    BiMamba,
    LatentFlowTransformer,
    Mamba,
    STARLoss,
    STARVAEDecoderOutput,
    STARVAEEncoderOutput,
    STARVAEOutput,
    beta_schedule,
    channel_correlation,
    channel_ordering,
    flow_matching_loss,
    latent_correlation,
    logit_normal_times,
    matched_uniform_beta,
    per_channel_kl,
    posterior_moments,
    sample_flow,
    selective_scan,
    selective_scan_reference,
    si_sdr,
    spectral_features,
    stft_distance,
    truncate_channels,
    truncation_curve,
)
from icml_tools.fuzz import Coverage, fuzz_call

FUZZ = Coverage()
FUZZ.exempt(STARVAEEncoderOutput, "the output container STARVAE.encode builds")
FUZZ.exempt(STARVAEDecoderOutput, "the output container STARVAE.decode builds")
FUZZ.exempt(STARVAEOutput, "the output container STARVAE.forward builds")

GEN = torch.Generator().manual_seed(0)
MEAN = torch.randn(2, 4, 3, generator=GEN)
LOGVAR = 0.5 * torch.randn(2, 4, 3, generator=GEN)
AUDIO = 0.1 * torch.randn(2, 1, 400, generator=GEN)
REF = AUDIO + 0.01 * torch.randn(2, 1, 400, generator=GEN)
FINITE_FLOAT = lambda v: isinstance(v, float) and math.isfinite(v)  # noqa: E731


@FUZZ.covers(beta_schedule, matched_uniform_beta)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_beta_schedule(data):
    valid = {"channels": 8, "beta_min": 1e-5, "beta_max": 1e-2, "gamma": 2.0}
    related = {"beta_min": ["beta_max"], "beta_max": ["beta_min"]}
    fuzz_call(
        data,
        beta_schedule,
        valid,
        check=lambda b: b.shape[0] >= 1 and bool((b.diff() >= 0).all()),
        related=related,
    )
    fuzz_call(data, matched_uniform_beta, valid, check=FINITE_FLOAT, related=related)


@FUZZ.covers(STARLoss)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_star_loss(data):
    def build_and_apply(channels, beta_min, beta_max, gamma, channel_dim, reduction, posterior):
        return STARLoss(channels, beta_min, beta_max, gamma, channel_dim, reduction)(posterior)

    fuzz_call(
        data,
        build_and_apply,
        {
            "channels": 4,
            "beta_min": 0.0,
            "beta_max": 0.1,
            "gamma": 2.0,
            "channel_dim": 1,
            "reduction": "mean",
            "posterior": (MEAN, LOGVAR),
        },
        check=lambda v: v.ndim == 0 and v.item() >= 0,
        related={
            "beta_min": ["beta_max"],
            "beta_max": ["beta_min"],
            "channels": ["posterior"],
            "posterior": ["channels", "channel_dim"],
            "channel_dim": ["posterior", "channels"],
        },
        strategies={
            "posterior": st.sampled_from(
                [None, MEAN, (MEAN,), (MEAN, LOGVAR[:1]), (MEAN[0, 0], LOGVAR[0, 0]), (MEAN.long(), LOGVAR)]
            )
        },
    )


@FUZZ.covers(per_channel_kl, posterior_moments)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_per_channel_kl(data):
    fuzz_call(
        data,
        per_channel_kl,
        {"posterior": (MEAN, LOGVAR), "channel_dim": 1, "reduction": "sum"},
        check=lambda kl: kl.ndim == 1 and bool((kl >= -1e-6).all()),
        related={"posterior": ["channel_dim"], "channel_dim": ["posterior"]},
        strategies={
            "posterior": st.sampled_from(
                [
                    None,
                    "normal",
                    MEAN,
                    (MEAN, LOGVAR, LOGVAR),
                    (MEAN, LOGVAR.transpose(1, 2)),
                    (MEAN[0, 0], LOGVAR[0, 0]),
                ]
            )
        },
    )
    fuzz_call(
        data,
        posterior_moments,
        {"posterior": torch.distributions.Normal(MEAN, LOGVAR.exp())},
        check=lambda m: len(m) == 2,
        strategies={
            "posterior": st.sampled_from([None, 3, MEAN, (MEAN,), (MEAN, "logvar"), (MEAN, LOGVAR[:1])])
        },
    )


@FUZZ.covers(channel_correlation, latent_correlation)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_channel_correlation(data):
    fuzz_call(
        data,
        channel_correlation,
        {"latents": MEAN, "channel_dim": 1},
        check=lambda c: c.shape == (c.shape[0], c.shape[0]) and bool((c.abs() <= 1).all()),
        related={"latents": ["channel_dim"], "channel_dim": ["latents"]},
    )
    fuzz_call(
        data,
        latent_correlation,
        {"latents": MEAN, "channel_dim": 1},
        check=lambda v: FINITE_FLOAT(v) and 0 <= v <= 1,
        related={"latents": ["channel_dim"], "channel_dim": ["latents"]},
    )


@FUZZ.covers(channel_ordering)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_channel_ordering(data):
    fuzz_call(
        data,
        channel_ordering,
        {"kl": torch.tensor([3.0, 2.0, 2.5, 0.1])},
        check=lambda r: isinstance(r, float) and (math.isnan(r) or -1 <= r <= 1),  # NaN comes with a warning
    )


@FUZZ.covers(truncate_channels, truncation_curve)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_truncation(data):
    fuzz_call(
        data,
        truncate_channels,
        {"latents": MEAN, "keep": 2, "channel_dim": 1},
        check=lambda z: z.shape == MEAN.shape or z.ndim >= 2,
        related={"latents": ["keep", "channel_dim"], "keep": ["latents"], "channel_dim": ["latents", "keep"]},
    )
    fuzz_call(
        data,
        truncation_curve,
        {
            "decode": lambda z: z,
            "latents": MEAN,
            "reference": MEAN,
            "distance": lambda a, b: (a - b).abs().sum(),
            "keeps": [1, 4],
            "channel_dim": 1,
        },
        check=lambda curve: isinstance(curve, dict),
        related={
            "latents": ["keeps", "channel_dim", "reference"],
            "reference": ["latents"],
            "keeps": ["latents"],
            "channel_dim": ["latents", "keeps"],
        },
    )


@FUZZ.covers(stft_distance, si_sdr, spectral_features)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_audio_metrics(data):
    related = {"estimate": ["reference"], "reference": ["estimate"]}
    fuzz_call(
        data,
        stft_distance,
        {"estimate": AUDIO, "reference": REF, "fft_sizes": (128, 64), "eps": 1e-7},
        check=lambda d: d.shape == (2,) and bool((d >= 0).all()),
        related={**related, "estimate": ["reference", "fft_sizes"], "reference": ["estimate", "fft_sizes"]},
    )
    fuzz_call(data, si_sdr, {"estimate": AUDIO, "reference": REF, "eps": 1e-8}, related=related)
    fuzz_call(
        data,
        spectral_features,
        {"audio": AUDIO, "n_fft": 128, "bands": 8},
        check=lambda f: f.shape[1] == 16,
        related={"audio": ["n_fft"], "n_fft": ["audio", "bands"], "bands": ["n_fft"]},
    )


@FUZZ.covers(selective_scan, selective_scan_reference)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_selective_scan(data):
    valid = {
        "u": torch.randn(1, 3, 5, generator=GEN),
        "delta": torch.rand(1, 3, 5, generator=GEN),
        "A": -torch.rand(3, 2, generator=GEN),
        "B": torch.randn(1, 2, 5, generator=GEN),
        "C": torch.randn(1, 2, 5, generator=GEN),
        "D": torch.ones(3),
    }
    related = {k: [n for n in valid if n != k] for k in valid}  # a wrong shape breaks agreement with the rest
    for fn in (selective_scan, selective_scan_reference):
        fuzz_call(data, fn, valid, related=related, allow_non_finite=True)  # an inf delta · A is the user's


@FUZZ.covers(Mamba, BiMamba)
@settings(max_examples=25, deadline=None)
@given(st.data())
def test_mamba_blocks(data):
    x = torch.randn(2, 6, 8, generator=GEN)

    def run(cls, d_model, d_state, scan, hidden):
        return cls(d_model, d_state=d_state, scan=scan)(hidden)

    for cls in (Mamba, BiMamba):
        fuzz_call(
            data,
            lambda d_model, d_state, scan, hidden, cls=cls: run(cls, d_model, d_state, scan, hidden),
            {"d_model": 8, "d_state": 4, "scan": "parallel", "hidden": x},
            check=lambda y: y.ndim == 3 and y.shape[-1] == 8,
            related={"d_model": ["hidden"], "hidden": ["d_model"]},
        )


@FUZZ.covers(STARVAE)
@settings(max_examples=25, deadline=None)
@given(st.data())
def test_star_vae(data):
    def build_and_run(latent_channels, channel_multiples, strides, mamba_layers, audio):
        vae = STARVAE(
            latent_channels=latent_channels,
            base_channels=2,
            channel_multiples=channel_multiples,
            strides=strides,
            mamba_layers=mamba_layers,
        )
        return vae(audio, sample_posterior=False).sample

    fuzz_call(
        data,
        build_and_run,
        {
            "latent_channels": 3,
            "channel_multiples": (1, 2),
            "strides": (4, 5),
            "mamba_layers": 0,
            "audio": AUDIO,
        },
        check=lambda y: y.shape[-1] == AUDIO.shape[-1] or y.ndim == 3,
        related={
            "channel_multiples": ["strides"],
            "strides": ["channel_multiples", "audio", "hop_length"],
            "audio": ["hop_length"],
        },
    )


@FUZZ.covers(LatentFlowTransformer, flow_matching_loss, sample_flow, logit_normal_times)
@settings(max_examples=25, deadline=None)
@given(st.data())
def test_flow(data):
    model = LatentFlowTransformer(latent_channels=3, max_frames=5, width=8, layers=1, heads=2, context_dim=4)
    z = torch.randn(2, 3, 5, generator=GEN)
    ctx = torch.randn(2, 2, 4, generator=GEN)
    fuzz_call(
        data,
        lambda z_t, t, context: model(z_t, t, context=context),
        {"z_t": z, "t": torch.tensor([0.1, 0.9]), "context": ctx},
        check=lambda v: v.ndim == 3 and v.shape[1] == 3,
        related={"z_t": ["t", "context", "max_frames"], "t": ["z_t"], "context": ["z_t"]},
    )
    fuzz_call(
        data,
        flow_matching_loss,
        {"model": model, "latents": z, "context": ctx},
        check=lambda v: v.ndim == 0,
        related={"latents": ["z_t", "context", "max_frames"], "context": ["latents", "z_t"]},
    )
    fuzz_call(
        data,
        sample_flow,
        {"model": model, "noise": z, "steps": 2, "method": "heun", "context": ctx},
        check=lambda v: v.ndim == 3 and v.shape[1] == 3,
        related={"noise": ["z_t", "context", "max_frames"], "context": ["noise", "z_t"]},
    )
    fuzz_call(
        data,
        logit_normal_times,
        {"n": 5, "mean": 0.0, "std": 1.0},
        check=lambda t: bool(((t >= 0) & (t <= 1)).all()),
    )


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(star)
