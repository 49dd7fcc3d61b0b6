"""The bad-input contract (GUIDE "Bad input") for icml_generative.jepa_guidance: one fuzz test per public API.

Every case either returns a result its check verifies, or raises ValueError/TypeError naming the argument.
"""

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml_generative import jepa_guidance
from icml_generative.jepa_guidance import (
    JEPAGuidance,
    MinorityGuidance,
    TweedieGuidance,
    encoder_jvp,
    jepa_score,
    jepa_singular_values,
    minority_score,
    mlp_encoder,
    sigreg_loss,
    train_jepa_encoder,
    tweedie_x0,
    vicreg_regularizer,
)
from icml_tools.fuzz import Coverage, fuzz_call

FUZZ = Coverage()
torch.manual_seed(0)
ENC = mlp_encoder(6, 4, (8,))
X = torch.randn(3, 6)
Z = torch.randn(3, 6)
FINITE = lambda t: bool(torch.isfinite(t).all())  # noqa: E731
ENCODERS = st.sampled_from(
    [None, "f", mlp_encoder(6, 4, (8,)).double(), lambda t: t.detach(), lambda t: t[:1], lambda t: t.long()]
)


def _x0(v):
    return 0.9 * v


@FUZZ.covers(jepa_score, jepa_singular_values)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_jepa_score(data):
    valid = {
        "encoder": ENC,
        "x": X,
        "k": 3,
        "method": "randomized",
        "power_iters": 1,
        "oversample": 2,
        "jvp": "finite_difference",
        "fd_eps": 1e-3,
        "seed": 0,
        "create_graph": False,
    }
    strategies = {"encoder": ENCODERS}
    related = {"encoder": ["x"], "x": ["encoder", "k"], "k": ["x", "encoder"]}
    fuzz_call(
        data, jepa_score, valid, check=lambda s: s.shape == (3,), strategies=strategies, related=related
    )
    fuzz_call(
        data,
        jepa_singular_values,
        valid,
        check=lambda s: s.shape[0] == 3 and s.shape[1] in (3, 4) and bool((s >= 0).all()),  # k=None: all 4
        strategies=strategies,
        related=related,
    )


@FUZZ.covers(encoder_jvp)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_encoder_jvp(data):
    fuzz_call(
        data,
        encoder_jvp,
        {"encoder": ENC, "x": X, "tangent": Z, "method": "forward", "eps": 1e-4},
        check=lambda out: out.shape == (3, 4) and FINITE(out),
        strategies={"encoder": ENCODERS},
        related={"x": ["tangent", "encoder"], "tangent": ["x"], "encoder": ["x"]},
    )


def _guide(guidance, z, step, num_steps, variance=None):
    return guidance(z, _x0, step, num_steps, variance)


@FUZZ.covers(JEPAGuidance)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_jepa_guidance(data):
    def build_and_step(
        encoder, eta, top_k, power_iters, start_fraction, interval, schedule, normalize, z, step
    ):
        guidance = JEPAGuidance(
            encoder, eta, top_k, power_iters, start_fraction, interval, schedule, normalize
        )
        return _guide(guidance, z, step, 10, variance=0.1)

    fuzz_call(
        data,
        build_and_step,
        {
            "encoder": ENC,
            "eta": 0.5,
            "top_k": 2,
            "power_iters": 1,
            "start_fraction": 1.0,
            "interval": 1,
            "schedule": "constant",
            "normalize": True,
            "z": Z,
            "step": 2,
        },
        check=lambda out: out.ndim >= 2 and FINITE(out),
        strategies={"encoder": ENCODERS},
        related={"encoder": ["x", "z"], "z": ["encoder", "x"], "top_k": ["k"]},
    )


@FUZZ.covers(TweedieGuidance)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_tweedie_guidance(data):
    def build_and_step(objective, eta, schedule, z, step, num_steps, variance):
        return TweedieGuidance(objective, eta, start_fraction=1.0, schedule=schedule)(
            z, _x0, step, num_steps, variance
        )

    fuzz_call(
        data,
        build_and_step,
        {
            "objective": lambda x: (x**2).sum(1),
            "eta": 0.3,
            "schedule": "variance",
            "z": Z,
            "step": 1,
            "num_steps": 5,
            "variance": 0.2,
        },
        check=lambda out: out.ndim == 2 and FINITE(out),
        strategies={"objective": st.sampled_from([None, 3, lambda x: x, lambda x: x.sum()])},
        related={"step": ["num_steps"], "num_steps": ["step"], "z": ["x0_fn", "objective"]},
    )


@FUZZ.covers(MinorityGuidance, minority_score)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_minority(data):
    def build_and_step(denoise, scale, noise_scale, eta, draws, z):
        return _guide(
            MinorityGuidance(denoise, scale, noise_scale, eta, draws=draws, start_fraction=1.0), z, 0, 4
        )

    denoisers = st.sampled_from([None, "d", lambda t: t[:1], lambda t: t.sum()])
    fuzz_call(
        data,
        build_and_step,
        {"denoise": lambda t: 0.5 * t, "scale": 1.0, "noise_scale": 0.5, "eta": 0.2, "draws": 2, "z": Z},
        check=lambda out: out.ndim >= 2 and FINITE(out),  # any (n, ...) batch
        strategies={"denoise": denoisers},
        related={"z": ["x0"], "denoise": ["x0"]},
    )
    fuzz_call(
        data,
        minority_score,
        {"x0": X, "denoise": lambda t: 0.5 * t, "scale": 1.0, "noise_scale": 0.5, "draws": 2, "seed": 0},
        check=lambda s: s.ndim == 1 and bool((s >= 0).all()),
        strategies={"denoise": denoisers},
        related={"denoise": ["x0"], "x0": ["denoise"]},
    )


@FUZZ.covers(tweedie_x0)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_tweedie_x0(data):
    fuzz_call(
        data,
        tweedie_x0,
        {"sample": X, "model_output": Z, "alpha_bar": 0.5, "sigma": None, "prediction_type": "epsilon"},
        check=lambda out: out.shape == X.shape,
        related={
            "sample": ["model_output"],
            "model_output": ["sample"],
            "alpha_bar": ["sigma"],
            "sigma": ["alpha_bar"],
            "prediction_type": ["alpha_bar", "sigma"],
        },
    )


@FUZZ.covers(mlp_encoder, train_jepa_encoder)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_encoder_and_trainer(data):
    fuzz_call(
        data,
        mlp_encoder,
        {"in_features": 6, "embed_dim": 3, "hidden": (8,)},
        check=lambda m: m(torch.randn(2, m[1].in_features)).shape[0] == 2,
    )

    def build_and_train(data_, steps, batch_size, lr, noise, mask_ratio, anti_collapse, weight, seed):
        torch.manual_seed(0)
        enc = mlp_encoder(6, 2, (8,))
        return train_jepa_encoder(
            enc,
            data_,
            steps=steps,
            batch_size=batch_size,
            lr=lr,
            noise=noise,
            mask_ratio=mask_ratio,
            anti_collapse=anti_collapse,
            weight=weight,
            seed=seed,
        )

    fuzz_call(
        data,
        build_and_train,
        {
            "data_": torch.randn(16, 6),
            "steps": 2,
            "batch_size": 8,
            "lr": 1e-3,
            "noise": 0.1,
            "mask_ratio": 0.2,
            "anti_collapse": "vicreg",
            "weight": 1.0,
            "seed": 0,
        },
        check=lambda log: len(log["loss"]) == 2 and all(math.isfinite(v) for v in log["loss"]),
        strategies={
            "steps": st.sampled_from([0, -1, 1.5, None, "2", True, 10**8]),
            "batch_size": st.sampled_from([0, 1, -3, 2.0, None, 2**40]),
            "lr": st.sampled_from([math.nan, -1.0, 0.0, "x", None]),
            "data_": st.sampled_from(
                [
                    None,
                    torch.randn(1, 6),
                    torch.randn(16, 5),
                    torch.randn(16, 6).double(),
                    torch.full((16, 6), math.nan),
                ]
            ),
        },
        related={"data_": ["data", "x", "mat1"]},
    )


@FUZZ.covers(sigreg_loss, vicreg_regularizer)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_regularizers(data):
    emb = torch.randn(10, 3)
    fuzz_call(
        data,
        sigreg_loss,
        {"z": emb, "projections": 8, "seed": 0},
        check=lambda v: v.ndim == 0 and not v.item() < 0,  # NaN only with the overflow warning
    )
    fuzz_call(
        data, vicreg_regularizer, {"z": emb, "eps": 1e-4}, check=lambda v: v.ndim == 0 and v.item() >= 0
    )


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(jepa_guidance)
