"""Fuzz tests (GUIDE "Bad input", issue 22) of the tensor-facing APIs: sparse autoencoders, model diffing and
latent interventions. Every public callable gets hostile inputs (wrong types, NaN/inf, empty or re-shaped
arrays, other dtypes, out-of-range numbers): each call returns a checked result or raises ValueError/TypeError
naming the argument. Models are tiny (a two-conv net, a tiny GPT-2 of conftest.py for the spliced loss)."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

import icml_interp.diffing
import icml_interp.intervene
import icml_interp.sae
from icml_interp.diffing import (
    Alignment,
    BestPartners,
    activation_alignment,
    best_partner,
    cohort_latent_table,
    correlation_matrix,
    decoder_alignment,
    diff_report,
    exclusive_latents,
    firing_frequency,
    latent_attribution,
    latent_maps,
    layer_activations,
    plot_diff_report,
    specific_latents,
)
from icml_interp.hooks import HookedModel
from icml_interp.intervene import Add, Clamp, LatentEdit, Scale, apply_edit, intervene, reference_mean
from icml_interp.sae import (
    SAE,
    ActivationSource,
    SAEConfig,
    TrainLog,
    auxk_ablation,
    evaluate_sae,
    firing_counts,
    firing_frequencies,
    from_tokens,
    geometric_median,
    load_sae,
    save_sae,
    splice,
    spliced_loss,
    to_tokens,
    topk_activation,
    train_sae,
)
from icml_tools.fuzz import Coverage, fuzz_call

FUZZ = Coverage()
FUZZ.exempt(TrainLog, "the training record train_sae builds; its fields are checked in test_train_sae")
FUZZ.exempt(
    Alignment, "the result decoder_alignment / activation_alignment build; checked in their fuzz tests"
)
FUZZ.exempt(BestPartners, "the result best_partner (fuzzed) builds; its quantile method is fuzzed with it")

FEW = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
SOME = settings(max_examples=30, deadline=None)
CHEAP = settings(max_examples=60, deadline=None)
NOT_SAES = st.sampled_from([None, "sae", 3, object(), nn.Linear(6, 10), {"W_dec": torch.zeros(10, 6)}])
TMP = Path(tempfile.mkdtemp(prefix="icml_interp_fuzz_"))

G = torch.Generator().manual_seed(0)
X = torch.randn(64, 6, generator=G)  # activations (tokens, d_in = 6)
MAPS = torch.randn(2, 6, 4, 4, generator=G)  # conv activations (B, C = d_in, H, W)


def finite(t) -> bool:
    return bool(torch.isfinite(torch.as_tensor(t)).all())


def make_sae(arch: str = "relu", d_in: int = 6, d_sae: int = 10) -> SAE:
    return SAE(
        SAEConfig(d_in=d_in, d_sae=d_sae, architecture=arch, k=3, batch_size=16, total_tokens=64)
    ).eval()


SAE6 = make_sae()


class Net(nn.Module):
    """Two convolutions: the first one's output (6 channels) is where SAEs read and edit."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(1, 6, 3, padding=1)
        self.head = nn.Conv2d(6, 2, 1)

    def forward(self, x):
        return self.head(torch.relu(self.conv(x)))


NET = Net().eval()
IMAGES = torch.randn(3, 1, 4, 4, generator=G)


# ---------------------------------------------------------------------------------------------------- SAE
@FUZZ.covers(SAEConfig)
@CHEAP
@given(st.data())
def test_sae_config(data):
    valid = {
        "d_in": 6,
        "d_sae": 10,
        "architecture": "topk",
        "k": 3,
        "l1_coefficient": 0.3,
        "l0_coefficient": 0.01,
        "jumprelu_init_threshold": 0.5,
        "jumprelu_bandwidth": 0.1,
        "threshold_lr": 0.01,
        "aux_k": 2,
        "aux_coefficient": 0.03,
        "dead_steps": 10,
        "lr": 1e-3,
        "batch_size": 16,
        "total_tokens": 64,
        "lr_warmup_steps": 0,
        "lr_decay_fraction": 0.2,
        "normalize_activations": "none",
        "b_dec_init": "mean",
        "seed": 0,
    }
    related = {"d_sae": ["k", "aux_k"], "batch_size": ["total_tokens"], "total_tokens": ["batch_size"]}
    fuzz_call(
        data,
        SAEConfig,
        valid,
        related=related,
        check=lambda c: c.steps >= 1 and c.k <= c.d_sae and c.effective_lr > 0,
    )


@FUZZ.covers(SAE)
@SOME
@given(st.data())
def test_sae_constructor_and_encode(data):
    cfg = SAEConfig(d_in=6, d_sae=10, architecture="jumprelu", batch_size=16, total_tokens=64)
    fuzz_call(
        data,
        SAE,
        {"cfg": cfg},
        strategies={"cfg": st.sampled_from([None, "topk", {}, cfg.to_dict()])},
        check=lambda s: s.W_dec.shape == (10, 6) and s.threshold.shape == (10,),
    )
    sae = make_sae("topk")
    fuzz_call(data, sae.encode, {"x": X[:8]}, check=lambda f: f.shape[-1] == 10 and bool((f >= 0).all()))
    fuzz_call(data, sae.decode, {"f": sae.encode(X[:8])}, check=lambda r: r.shape[-1] == 6 and finite(r))


@FUZZ.covers(topk_activation)
@CHEAP
@given(st.data())
def test_topk_activation(data):
    pre = torch.randn(4, 10, generator=torch.Generator().manual_seed(1))

    def ok(f):
        return bool((f >= 0).all()) and f.shape[-1] >= 1 and bool(((f > 0).sum(-1) <= f.shape[-1]).all())

    fuzz_call(data, topk_activation, {"pre": pre, "k": 3}, related={"pre": ["k"]}, check=ok)


@FUZZ.covers(to_tokens, from_tokens)
@CHEAP
@given(st.data())
def test_to_and_from_tokens(data):
    # a pure re-layout: NaN and inf in the activations are passed through unchanged (documented), so a
    # non-finite result from non-finite input is the correct answer here
    fuzz_call(
        data,
        to_tokens,
        {"x": MAPS, "layout": "bchw"},
        check=lambda t: t.ndim == 2,
        allow_non_finite=True,
    )
    tokens = to_tokens(MAPS, "bchw")
    fuzz_call(
        data,
        from_tokens,
        {"tokens": tokens, "like": MAPS, "layout": "bchw"},
        related={"like": ["tokens", "layout"], "tokens": ["like"]},  # the tokens must fit like's shape
        check=lambda r: r.numel() == MAPS.numel(),
        allow_non_finite=True,
    )
    assert torch.equal(from_tokens(tokens, MAPS, "bchw"), MAPS)


@FUZZ.covers(ActivationSource)
@SOME
@given(st.data())
def test_activation_source(data):
    def take(
        module, inputs, layout, buffer_tokens, shuffle, seed, hook, input_batch_size, stop_early, keep_mode
    ):
        src = ActivationSource(
            module,
            inputs,
            layout=layout,
            buffer_tokens=buffer_tokens,
            shuffle=shuffle,
            seed=seed,
            hook=hook,
            input_batch_size=input_batch_size,
            stop_early=stop_early,
            keep_mode=keep_mode,
        )
        return src.take()

    valid = {
        "module": (NET, "conv"),
        "inputs": IMAGES,
        "layout": "bchw",
        "buffer_tokens": 16,
        "shuffle": True,
        "seed": 0,
        "hook": "output",
        "input_batch_size": 2,
        "stop_early": True,
        "keep_mode": False,
    }
    fuzz_call(
        data,
        take,
        valid,
        strategies={
            "module": st.sampled_from([None, NET, (NET,), (NET, "nope"), (NET, 3), ("x", "conv"), "conv"])
        },
        check=lambda t: t.ndim == 2 and t.shape[1] in (6, 2, 1),  # conv, net output, input (NaN: warned)
    )


@FUZZ.covers(splice)
@SOME
@given(st.data())
def test_splice(data):
    def run(sae, target, layout, keep_error, edit, hook):
        with splice(sae, target, layout=layout, keep_error=keep_error, edit=edit, hook=hook) as forward:
            return forward(IMAGES)

    fuzz_call(
        data,
        run,
        {
            "sae": SAE6,
            "target": (NET, "conv"),
            "layout": "bchw",
            "keep_error": True,
            "edit": torch.relu,
            "hook": "output",
        },
        strategies={
            "sae": NOT_SAES,
            "target": st.sampled_from([None, (NET,), (NET, "nope"), "conv", (3, "conv")]),
        },
        check=lambda out: out.shape == (3, 2, 4, 4) and finite(out),
    )


@FUZZ.covers(evaluate_sae, firing_counts, firing_frequencies)
@SOME
@given(st.data())
def test_evaluate_sae_and_firing(data):
    valid = {"sae": SAE6, "activations_or_source": X, "n_tokens": 40, "batch_size": 16}

    def ok_eval(r):
        return (
            (r["fvu"] >= 0 or math.isnan(r["fvu"]))  # NaN, with a warning, for zero-variance activations
            and 0 <= r["dead_fraction"] <= 1
            and 0 <= r["dense_fraction"] <= 1
            and 0 <= r["l0"] <= 10
            and 1 <= r["n_tokens"] <= 64
        )

    fuzz_call(
        data,
        evaluate_sae,
        {**valid, "dense_threshold": 0.1},
        strategies={"sae": NOT_SAES},
        check=ok_eval,
    )

    def ok_counts(r):
        counts, n = r
        return counts.shape == (10,) and bool(((counts >= 0) & (counts <= n)).all())

    fuzz_call(data, firing_counts, valid, strategies={"sae": NOT_SAES}, check=ok_counts)
    fuzz_call(
        data,
        firing_frequencies,
        valid,
        strategies={"sae": NOT_SAES},
        check=lambda f: f.shape == (10,) and bool(((f >= 0) & (f <= 1)).all()),
    )


@FUZZ.covers(spliced_loss)
@FEW
@given(data=st.data())
def test_spliced_loss(zoo, data):
    hooked = HookedModel(zoo.gpt2(0))
    sae = make_sae("topk", d_in=64, d_sae=16)
    ids = torch.tensor([[5, 17, 42, 9], [3, 77, 12, 8]])

    def ok(r):
        return all(r[k] > 0 for k in ("clean_loss", "spliced_loss", "zero_ablation_loss")) and np.isfinite(
            r["fraction_recovered"]
        )

    fuzz_call(
        data,
        spliced_loss,
        {
            "sae": sae,
            "target": (hooked, "blocks.0.hook_resid_post"),
            "inputs": ids,
            "loss_fn": None,
            "layout": "auto",
        },
        strategies={
            "sae": NOT_SAES,
            "target": st.sampled_from([None, (hooked,), (hooked, "nope"), "x", hooked]),
        },
        check=ok,
    )


SMALL_CFG = SAEConfig(d_in=6, d_sae=10, k=3, batch_size=16, total_tokens=48, dead_steps=1, aux_k=2)
BAD_CFGS = st.sampled_from([None, "topk", SMALL_CFG.to_dict(), 3])


@FUZZ.covers(train_sae)
@FEW
@given(st.data())
def test_train_sae(data):
    def ok(r):
        sae, log = r
        return isinstance(sae, SAE) and len(log.fvu) >= 1 and all(np.isfinite(log.loss)) and not sae.training

    fuzz_call(
        data,
        train_sae,
        {
            "source": X,
            "cfg": SMALL_CFG,
            "progress": False,
            "log_every": 1,
            "distributed": False,
            "checkpoint": None,
            "checkpoint_every": 0,
            "resume_from": None,
        },
        # True: no process group is initialized here (test_sae_distributed.py trains with one)
        strategies={"cfg": BAD_CFGS, "distributed": st.sampled_from([True, 0, 1, "yes", None])},
        check=ok,
    )


@FUZZ.covers(auxk_ablation)
@settings(max_examples=10, deadline=None)
@given(st.data())
def test_auxk_ablation(data):
    def ok(r):
        return set(r) == {"auxk", "no_auxk"} and all(0 <= r[k]["dead_fraction"] <= 1 for k in r)

    fuzz_call(
        data,
        auxk_ablation,
        {"source": X, "cfg": SMALL_CFG, "eval_activations": X[:20], "progress": False},
        strategies={"cfg": BAD_CFGS},
        check=ok,
    )


@FUZZ.covers(geometric_median)
@CHEAP
@given(st.data())
def test_geometric_median(data):
    def ok(y):  # the geometric median lies in the convex hull, so inside the bounding box
        return y.ndim == 1 and finite(y)

    x = X[:9]
    fuzz_call(data, geometric_median, {"x": x, "max_iter": 50, "tol": 1e-6}, check=ok)
    y = geometric_median(x.double() * 1e300)
    assert finite(y) and bool((y <= x.double().max(0).values * 1e300 * (1 + 1e-9)).all())
    assert torch.equal(geometric_median(x[:1]), x[0])


@FUZZ.covers(save_sae, load_sae)
@SOME
@given(st.data())
def test_save_and_load_sae(data):
    folder = TMP / "sae"
    a_file = TMP / "file.txt"
    a_file.write_text("x")
    paths = st.sampled_from([None, 3, b"x", "", " ", ".", a_file, str(a_file)])
    fuzz_call(
        data,
        save_sae,
        {"sae": SAE6, "path": folder},
        strategies={"sae": NOT_SAES, "path": paths},
        check=lambda p: (Path(p) / "cfg.json").is_file(),
    )
    save_sae(SAE6, folder)

    def ok(sae):
        return all(
            torch.equal(a, b)
            for a, b in zip(sae.state_dict().values(), SAE6.state_dict().values(), strict=True)
        )

    fuzz_call(
        data,
        load_sae,
        {"path": folder, "device": "cpu"},
        strategies={"path": st.one_of(paths, st.just(TMP / "missing"))},
        check=ok,
    )


# ---------------------------------------------------------------------------------------------------- diffing
LATENT_MAPS_A = torch.relu(torch.randn(3, 4, 4, 4, generator=G))
LATENT_MAPS_B = torch.relu(torch.randn(3, 5, 2, 2, generator=G))


def _ok_alignment(d_a, d_b):
    def ok(al):
        n = len(al.pairs)
        return (
            al.matrix.shape[0] in d_a
            and al.matrix.shape[1] in d_b
            and n <= min(al.matrix.shape)
            and bool(np.all(np.abs(al.score) <= 1 + 1e-9))
            and bool(np.all(np.isfinite(al.matrix)))
        )

    return ok


@FUZZ.covers(decoder_alignment)
@CHEAP
@given(st.data())
def test_decoder_alignment(data):
    w_a, w_b = torch.randn(6, 5, generator=G), torch.randn(4, 5, generator=G)
    fuzz_call(
        data,
        decoder_alignment,
        {"w_dec_a": w_a, "w_dec_b": w_b, "threshold": 0.7},
        related={"w_dec_a": ["w_dec_b"], "w_dec_b": ["w_dec_a"]},  # both decoders must share d_in
        check=_ok_alignment(range(1, 13), range(1, 9)),
    )


@FUZZ.covers(activation_alignment, correlation_matrix)
@SOME
@given(st.data())
def test_activation_alignment(data):
    related = {"maps_a": ["maps_b"], "maps_b": ["maps_a"]}  # the two must come from the same images
    fuzz_call(
        data,
        activation_alignment,
        {
            "maps_a": LATENT_MAPS_A,
            "maps_b": LATENT_MAPS_B,
            "grid": (2, 2),
            "threshold": 0.5,
            "null": True,
            "null_draws": 2,
            "seed": 0,
        },
        related=related,
        # null_draws is a work count: a valid huge one (2**40 matchings) only takes long, so no huge ints here
        strategies={"null_draws": st.sampled_from([0, -1, 0.5, None, "x", True, math.nan, 3])},
        check=_ok_alignment(range(1, 9), range(1, 11)),
    )
    fuzz_call(
        data,
        correlation_matrix,
        {"maps_a": LATENT_MAPS_A, "maps_b": LATENT_MAPS_B, "grid": (2, 2)},
        related=related,
        check=lambda c: c.ndim == 2 and bool(np.all(np.abs(c) <= 1 + 1e-9)),
    )
    big = correlation_matrix(LATENT_MAPS_A.double() * 1e300, LATENT_MAPS_B.double() * 1e300, grid=(2, 2))
    assert np.allclose(big, correlation_matrix(LATENT_MAPS_A, LATENT_MAPS_B, grid=(2, 2)), atol=1e-6)


@FUZZ.covers(best_partner)
@SOME
@given(st.data())
def test_best_partner(data):
    def ok(bp):
        p = bp.p_values()
        return (
            bp.score.shape == bp.partner.shape == (len(bp.latents),)
            and bp.null.shape[0] == len(bp.latents)
            and bool(np.all(np.abs(bp.score) <= 1 + 1e-9) and np.all(np.isfinite(bp.null)))
            and bool(np.all((p > 0) & (p <= 1)))
        )

    fuzz_call(
        data,
        best_partner,
        {
            "maps_a": LATENT_MAPS_A,
            "maps_b": LATENT_MAPS_B,
            "latents": [0, 2],
            "grid": (2, 2),
            "null_draws": 5,
            "seed": 0,
        },
        related={"maps_a": ["maps_b", "latents"], "maps_b": ["maps_a"], "latents": ["maps_a"]},
        # null_draws is a work count: a valid huge one only takes long, so no huge ints here
        strategies={"null_draws": st.sampled_from([0, -1, 0.5, None, "x", True, math.nan, 3])},
        check=ok,
    )
    bp = best_partner(LATENT_MAPS_A, LATENT_MAPS_B, grid=(2, 2), null_draws=5)
    fuzz_call(
        data, bp.null_quantile, {"q": 0.99}, check=lambda q: q.shape == (4,) and bool(np.isfinite(q).all())
    )


@FUZZ.covers(exclusive_latents)
@CHEAP
@given(st.data())
def test_exclusive_latents(data):
    al = decoder_alignment(torch.randn(6, 5, generator=G), torch.randn(4, 5, generator=G), threshold=0.3)

    def ok(r):
        a, b = r
        return all(0 <= i < 6 for i in a) and all(0 <= j < 4 for j in b)

    fuzz_call(
        data,
        exclusive_latents,
        {"alignment": al, "alive_a": np.ones(6, bool), "alive_b": np.array([True, False, True, True])},
        strategies={"alignment": st.sampled_from([None, "x", al.matrix, al.rows()])},
        check=ok,
    )


CODES = {
    "A": torch.relu(torch.randn(30, 8, generator=G)),
    "B": torch.relu(torch.randn(20, 8, generator=G) - 0.5),
}


@FUZZ.covers(firing_frequency)
@CHEAP
@given(st.data())
def test_firing_frequency(data):
    fuzz_call(
        data,
        firing_frequency,
        {"codes": CODES["A"], "threshold": 0.0},
        check=lambda f: f.ndim == 1 and bool(((f >= 0) & (f <= 1)).all()),
    )


BAD_CODES = st.sampled_from(
    [
        None,
        {},
        {"A": CODES["A"]},
        {"A": CODES["A"], "B": "x"},
        {"A": CODES["A"], "B": CODES["B"][:, :3]},
        {"A": CODES["A"], "B": CODES["B"] * float("nan")},
        [CODES["A"], CODES["B"]],
    ]
)


@FUZZ.covers(cohort_latent_table, specific_latents)
@SOME
@given(st.data())
def test_cohort_tables(data):
    def ok_table(rows):
        return len(rows) == 8 and all(
            r["status"] in ("A", "B", "shared", "mixed", "dead") and 0 <= r["freq_A"] <= 1 for r in rows
        )

    fuzz_call(
        data,
        cohort_latent_table,
        {"codes": CODES, "min_freq": 0.01, "ratio": 2.0, "eps": 1e-4},
        strategies={"codes": BAD_CODES},
        check=ok_table,
    )
    fuzz_call(
        data,
        specific_latents,
        {"codes": CODES, "cohort": "A"},
        strategies={"codes": BAD_CODES},
        check=lambda r: all(0 <= j < 8 for j in r),
    )


@FUZZ.covers(layer_activations, latent_maps)
@SOME
@given(st.data())
def test_layer_activations_and_latent_maps(data):
    fuzz_call(
        data,
        layer_activations,
        {"model": NET, "module": NET.conv, "inputs": IMAGES, "batch": 2},
        strategies={
            "model": st.sampled_from([None, "x", nn.Linear(3, 3)]),
            "module": st.sampled_from([None, "conv", nn.Linear(3, 3)]),
        },
        related={"model": ["module"], "module": ["module"]},
        check=lambda a: a.shape == (3, 6, 4, 4) or (a.ndim == 4 and a.shape[1] == 6),
    )
    acts = layer_activations(NET, NET.conv, IMAGES)
    fuzz_call(
        data,
        latent_maps,
        {"sae": SAE6, "activations": acts, "batch": 2},
        strategies={"sae": NOT_SAES},
        check=lambda m: m.ndim in (3, 4) and m.shape[1] == 10 and bool((m >= 0).all()),
    )


@FUZZ.covers(latent_attribution)
@SOME
@given(st.data())
def test_latent_attribution(data):
    def metric(out, sl):
        return out[:, 0].mean()

    fuzz_call(
        data,
        latent_attribution,
        {
            "model": NET,
            "module": NET.conv,
            "sae": SAE6,
            "inputs": IMAGES,
            "metric": metric,
            "batch": 2,
            "layout": "bchw",
        },
        strategies={
            "model": st.sampled_from([None, "x", nn.Linear(3, 3)]),
            "module": st.sampled_from([None, "conv", nn.Linear(3, 3)]),
            "sae": NOT_SAES,
            "metric": st.sampled_from(
                [None, "x", lambda out, sl: out, lambda out, sl: out.sum() * float("nan")]
            ),
        },
        related={"model": ["module"], "module": ["module"]},
        check=lambda a: a.shape == (10,) and finite(a),
    )


def _table():
    return cohort_latent_table(CODES, min_freq=0.01, ratio=2.0)


@FUZZ.covers(diff_report)
@SOME
@given(st.data())
def test_diff_report(data):
    table = _table()
    al = decoder_alignment(SAE6.W_dec, make_sae(d_sae=12).W_dec)  # d_a = 10 <= d_b: every latent matched
    al8 = decoder_alignment(torch.randn(8, 6, generator=G), torch.randn(9, 6, generator=G))

    def ok(rows):
        diffs = [r["freq_diff"] for r in rows]
        return len(rows) >= 1 and diffs == sorted(diffs, reverse=True)

    fuzz_call(
        data,
        diff_report,
        {"table": table, "attribution": torch.randn(8, generator=G), "alignment": al8, "labels": {0: "zero"}},
        strategies={"alignment": st.sampled_from([None, "x", al8.matrix, 3])},
        related={"table": ["attribution"]},  # one attribution per latent of the table
        check=ok,
    )
    assert al.pairs.shape == (10, 2)


@FUZZ.covers(plot_diff_report)
@settings(max_examples=8, deadline=None)
@given(st.data())
def test_plot_diff_report(data):
    rows = diff_report(_table())
    fuzz_call(
        data,
        plot_diff_report,
        {"rows": rows, "path": TMP / "report.png", "cohorts": ("A", "B"), "top": 4},
        strategies={"path": st.sampled_from([None, 3, b"x", "", object()])},
        check=lambda p: Path(p).is_file() and Path(p).stat().st_size > 0,
    )


# ---------------------------------------------------------------------------------------------------- intervene
F = torch.rand(5, 10, generator=G)


@FUZZ.covers(LatentEdit, Add, Scale, Clamp)
@CHEAP
@given(st.data())
def test_latent_edits(data):
    def changed_only_chosen(edit_cls, field):
        def run(latents, value):
            return edit_cls(latents, **{field: value})(F)

        def ok(out):
            return out.shape == F.shape and finite(out) and torch.equal(out[:, 3:], F[:, 3:])

        return run, ok

    fuzz_call(data, LatentEdit, {"latents": [0, 2]}, check=lambda e: e.index(2**41).numel() >= 1)
    for cls, field, value in (
        (Add, "amount", 1.5),
        (Scale, "factor", torch.tensor([2.0, 0.5])),
        (Clamp, "value", 0.3),
    ):
        run, ok = changed_only_chosen(cls, field)
        fuzz_call(
            data,
            run,
            {"latents": [0, 2], "value": value},
            related={"latents": ["value", "amount", "factor"], "value": ["latents", "amount", "factor"]},
            check=ok,
        )


@FUZZ.covers(apply_edit)
@SOME
@given(st.data())
def test_apply_edit(data):
    h = layer_activations(NET, NET.conv, IMAGES)  # (3, 6, 4, 4)
    mask = torch.zeros(4, 4, dtype=torch.bool)
    mask[1:3, 1:3] = True

    def ok(out):
        outside = ~mask.expand(3, 4, 4)
        return (
            out.shape == h.shape
            and finite(out)
            and torch.equal(out.permute(0, 2, 3, 1)[outside], h.permute(0, 2, 3, 1)[outside])
        )

    fuzz_call(
        data,
        apply_edit,
        {"h": h, "sae": SAE6, "edit": Add([1, 4], 2.0), "mask": mask, "layout": "bchw"},
        strategies={"sae": NOT_SAES, "edit": st.sampled_from([None, "add", lambda f: f, (1, 2.0)])},
        related={"h": ["mask", "layout"], "mask": ["h"]},
        check=lambda out: out.ndim == 4 and out.shape[1] == 6 and finite(out),
    )
    assert ok(apply_edit(h, SAE6, Add([1, 4], 2.0), mask=mask))


@FUZZ.covers(intervene)
@SOME
@given(st.data())
def test_intervene(data):
    clean = NET(IMAGES)

    def run(module, sae, edit, mask, layout):
        with intervene(module, sae, edit, mask=mask, layout=layout):
            return NET(IMAGES)

    fuzz_call(
        data,
        run,
        {"module": NET.conv, "sae": SAE6, "edit": Scale([0, 1, 2], 0.0), "mask": None, "layout": "bchw"},
        strategies={
            "module": st.sampled_from([None, "conv", NET.head]),
            "sae": NOT_SAES,
            "edit": st.sampled_from([None, "add", lambda f: f, Scale([99], 1.0)]),
        },
        related={"module": ["sae", "x", "h"]},  # another module's output does not fit the SAE
        check=lambda out: out.shape == clean.shape and finite(out),
    )


@FUZZ.covers(reference_mean)
@CHEAP
@given(st.data())
def test_reference_mean(data):
    mask = torch.tensor([True, False, True, True, False])

    fuzz_call(
        data,
        reference_mean,
        {"codes": F, "mask": mask},
        related={"codes": ["mask"], "mask": ["codes"]},
        check=lambda m: m.ndim == 1 and finite(m),
    )
    assert torch.allclose(reference_mean(F, mask), F[mask].mean(0))


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(icml_interp.sae, icml_interp.diffing, icml_interp.intervene)
