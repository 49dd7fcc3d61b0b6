"""Issue 23, items 2 and 7: a ``save_quantized`` directory loads through transformers'
``AutoModelForCausalLM.from_pretrained`` (the ``icml-proteus`` quantizer registered by ``import
icml_compress``) with logits identical to ``load_quantized``; saves without ``config.json`` still load; a
dtype other than the saved one is refused; a corrupted ``config.json`` raises a clear error; calibration
shows progress; the per-layer error plot."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("transformers")

from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from icml_compress.quantize import (
    CorruptQuantizedModelError,
    ProteusLinear,
    QuantConfig,
    RTNLinear,
    load_quantized,
    plot_layer_errors,
    quantize_model,
    register_hf_quantizer,
    save_quantized,
)
from icml_compress.quantize.model import (
    CONFIG_FILE,
    GENERATION_CONFIG_FILE,
    HF_CONFIG_FILE,
    WEIGHTS_FILE,
    default_dtype,
)
from icml_compress.quantize.plot import layer_errors

FAST = {"L": 8, "T": 32, "n_calibration": 2, "seq_len": 32, "n_candidates": 2, "select_rows": 8}
X = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(3))
Q = "model.layers.0.self_attn.q_proj"


def tiny(seed=0, **kw):
    from icml_tools.assets import tiny_llama

    return tiny_llama(seed, **kw)


def untied_with_bias(seed=0) -> LlamaForCausalLM:
    """A one-block Llama with separate lm_head and biases on every projection (RTN and hyb cover them)."""
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        attention_bias=True,
        mlp_bias=True,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, 256, (512,), generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def saves(ids, tmp_path_factory):
    """``{name: (quantized model, its save directory)}``: Proteus (mulbal + compensation, tied embeddings,
    float32), trellis hyb (a table, biases, untied, float32) and RTN (biases, untied, bfloat16). Read-only:
    tests that edit a save copy it."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("saves")
    with default_dtype(torch.bfloat16):  # as from_pretrained builds it: rotary inv_freq stays float32
        bf16 = untied_with_bias(1)
    models = {
        "proteus": quantize_model(tiny(), QuantConfig(compensation=True, **FAST), ids, progress=False),
        "hyb": quantize_model(
            untied_with_bias(), QuantConfig(method="trellis", code="hyb", **FAST), ids, progress=False
        ),
        "rtn": quantize_model(
            bf16,
            QuantConfig(method="rtn", group_size=32, n_calibration=1, seq_len=32),
            ids,
            progress=False,
        ),
    }
    return {name: (m, save_quantized(m, root / name)) for name, m in models.items()}


def logits(model, x=X) -> torch.Tensor:
    with torch.no_grad():
        return model(x).logits


def copy_of(path: Path, tmp_path: Path) -> Path:
    out = tmp_path / "copy"
    shutil.copytree(path, out)
    return out


def edit_config(path: Path, edit) -> None:
    doc = json.loads((path / HF_CONFIG_FILE).read_text())
    edit(doc)
    (path / HF_CONFIG_FILE).write_text(json.dumps(doc))


# --- from_pretrained == load_quantized -----------------------------------------------------------------
@pytest.mark.parametrize("name", ["proteus", "hyb", "rtn"])
def test_from_pretrained_gives_the_logits_of_load_quantized(saves, name):
    model, path = saves[name]
    hf = AutoModelForCausalLM.from_pretrained(path)
    ref = load_quantized(path)
    assert type(hf) is type(ref) is LlamaForCausalLM
    assert hf.dtype == ref.dtype == model.dtype
    out = logits(hf)
    assert torch.equal(out, logits(ref))
    assert torch.equal(out, logits(model))  # and both are the model that was saved
    # the same modules and tensors (names, dtypes, values), frozen
    assert {n: type(m) for n, m in hf.named_modules()} == {n: type(m) for n, m in ref.named_modules()}
    a, b = hf.state_dict(), ref.state_dict()
    assert a.keys() == b.keys()
    assert all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)
    quantized = [m for m in hf.modules() if isinstance(m, ProteusLinear | RTNLinear)]
    assert len(quantized) == 14 if name == "proteus" else 7
    assert not any(p.requires_grad for m in quantized for p in m.parameters())
    assert hf.icml_quantization == json.loads(json.dumps(model.icml_quantization))
    assert hf.is_quantized and hf.config.quantization_config.quant_method == "icml-proteus"


def test_generate_after_from_pretrained_matches(saves):
    _, path = saves["proteus"]
    hf = AutoModelForCausalLM.from_pretrained(path)
    prompt = X[:1, :5]
    out = hf.generate(prompt, max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert out.shape == (1, 11) and torch.equal(out[:, :5], prompt)
    ref = load_quantized(path).generate(prompt, max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert torch.equal(out, ref)


def test_the_generation_config_round_trips_and_generate_keeps_its_defaults(ids, tmp_path):
    """A model loaded from a folder with its own ``generation_config.json`` (an instruct model's
    ``max_new_tokens``, ``eos_token_id`` list, repetition penalty), quantized and saved: ``load_quantized`` and
    ``from_pretrained`` give it back, so ``generate()`` without arguments stops where the saved model does.
    Before, the save dropped it: the reloaded models generated 20 new tokens (the default ``max_length``)
    where the saved model stopped after 3, with ``eos_token_id`` 2 from config.json instead of [7, 9]."""
    from transformers import GenerationConfig

    tiny().save_pretrained(tmp_path / "float")
    GenerationConfig(
        max_new_tokens=3, do_sample=False, eos_token_id=[7, 9], pad_token_id=0, repetition_penalty=1.3
    ).save_pretrained(tmp_path / "float")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "float")
    config = QuantConfig(method="rtn", group_size=32, n_calibration=1, seq_len=32)
    model = quantize_model(model, config, ids, progress=False)
    path = save_quantized(model, tmp_path / "q")
    prompt = X[:1, :4]
    expected = model.generate(prompt)
    assert expected.shape == (1, 7)
    for loaded in (load_quantized(path), AutoModelForCausalLM.from_pretrained(path)):
        assert loaded.generation_config.to_diff_dict() == model.generation_config.to_diff_dict()
        assert torch.equal(loaded.generate(prompt), expected)
    q = copy_of(path, tmp_path)  # a truncated generation_config.json is reported as a corrupt save
    (q / GENERATION_CONFIG_FILE).write_text((path / GENERATION_CONFIG_FILE).read_text()[:20])
    with pytest.raises(CorruptQuantizedModelError, match=f"{GENERATION_CONFIG_FILE} is not a readable"):
        load_quantized(q)
    (q / GENERATION_CONFIG_FILE).unlink()  # a save from before: the config derived from config.json
    assert load_quantized(q).generation_config.eos_token_id == model.config.eos_token_id


def test_tied_embeddings_stay_tied_and_are_stored_once(saves):
    from safetensors import safe_open

    for name, tied in (("proteus", True), ("hyb", False)):
        _, path = saves[name]
        hf = AutoModelForCausalLM.from_pretrained(path)
        assert (hf.lm_head.weight is hf.get_input_embeddings().weight) is tied
        with safe_open(str(path / WEIGHTS_FILE), framework="pt") as fh:
            stored = set(fh.keys())
        assert len({"lm_head.weight", "model.embed_tokens.weight"} & stored) == (1 if tied else 2)
        assert torch.equal(hf.lm_head.weight, load_quantized(path).lm_head.weight)


def test_save_writes_a_transformers_config(saves):
    model, path = saves["proteus"]
    assert sorted(p.name for p in path.iterdir()) == [
        HF_CONFIG_FILE,
        GENERATION_CONFIG_FILE,
        WEIGHTS_FILE,
        CONFIG_FILE,
    ]
    cfg = AutoConfig.from_pretrained(path)
    assert isinstance(cfg, LlamaConfig) and cfg.architectures == ["LlamaForCausalLM"]
    assert cfg.hidden_size == model.config.hidden_size and cfg.tie_word_embeddings
    doc = json.loads((path / CONFIG_FILE).read_text())
    qc = json.loads((path / HF_CONFIG_FILE).read_text())["quantization_config"]
    assert qc == {
        "quant_method": "icml-proteus",
        "format": "icml-compress-quantized",
        "version": 1,
        "dtype": "float32",
        "layers": doc["layers"],
        "quantization": doc["quantization"],
    }
    assert len(qc["layers"]) == 14 and qc["layers"][Q]["kind"] == "trellis"


def test_a_from_pretrained_model_saves_again_both_ways(saves, tmp_path):
    _, path = saves["hyb"]
    hf = AutoModelForCausalLM.from_pretrained(path)
    again = save_quantized(hf, tmp_path / "again")
    assert (
        json.loads((again / HF_CONFIG_FILE).read_text())["quantization_config"]
        == json.loads((path / HF_CONFIG_FILE).read_text())["quantization_config"]
    )
    assert "quantization_config" not in json.loads((again / CONFIG_FILE).read_text())["model_config"]
    assert torch.equal(logits(load_quantized(again)), logits(hf))
    hf.save_pretrained(tmp_path / "hf")  # transformers' own save: the quantizer is serializable
    assert torch.equal(logits(AutoModelForCausalLM.from_pretrained(tmp_path / "hf")), logits(hf))
    hf.save_pretrained(tmp_path / "shards", max_shard_size="40KB")  # checked as one checkpoint
    assert len(list((tmp_path / "shards").glob("*.safetensors"))) > 1
    assert torch.equal(logits(AutoModelForCausalLM.from_pretrained(tmp_path / "shards")), logits(hf))


def test_a_bfloat16_model_loaded_by_from_pretrained_round_trips_exactly(ids, tmp_path):
    """``load_quantized`` builds the model under the saved dtype as ``from_pretrained`` does: Llama's rotary
    ``inv_freq`` stays float32 (it was cast to bfloat16 before, and the logits differed from the model
    that was quantized)."""
    untied_with_bias(2).save_pretrained(tmp_path / "float")
    model = LlamaForCausalLM.from_pretrained(tmp_path / "float", dtype=torch.bfloat16)
    assert model.model.rotary_emb.inv_freq.dtype == torch.float32
    model = quantize_model(model, QuantConfig(method="rtn", group_size=32, seq_len=32), ids, progress=False)
    path = save_quantized(model, tmp_path / "q")
    ref = load_quantized(path)
    assert ref.model.rotary_emb.inv_freq.dtype == torch.float32
    assert torch.equal(logits(ref), logits(model))
    assert torch.equal(logits(AutoModelForCausalLM.from_pretrained(path)), logits(model))


# --- dtype ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, saved", [("proteus", torch.float32), ("rtn", torch.bfloat16)])
def test_from_pretrained_refuses_another_dtype(saves, name, saved):
    _, path = saves[name]
    for same in ("auto", saved, str(saved).removeprefix("torch.")):
        assert AutoModelForCausalLM.from_pretrained(path, dtype=same).dtype == saved
    for other in {torch.float32, torch.float16, torch.bfloat16} - {saved}:
        with pytest.raises(ValueError, match=rf"dtype={other} differs .* saved in \({saved}\)"):
            AutoModelForCausalLM.from_pretrained(path, dtype=other)


# --- old format, registration --------------------------------------------------------------------------
def test_a_save_without_config_json_still_loads(saves, tmp_path):
    model, path = saves["proteus"]
    old = copy_of(path, tmp_path)
    (old / HF_CONFIG_FILE).unlink()  # the format before config.json was written
    assert torch.equal(logits(load_quantized(old)), logits(model))
    with pytest.raises(ValueError, match=f"model_type` key in its {HF_CONFIG_FILE}"):  # transformers' error
        AutoModelForCausalLM.from_pretrained(old)


def test_registration_is_idempotent_and_lazy(saves):
    from transformers.quantizers.auto import AUTO_QUANTIZATION_CONFIG_MAPPING, AUTO_QUANTIZER_MAPPING

    from icml_compress.quantize.hf_quantizer import ProteusHfQuantizer, ProteusQuantizationConfig
    from icml_compress.quantize.hf_registry import register_on_import

    register_hf_quantizer()
    register_hf_quantizer()
    AUTO_QUANTIZER_MAPPING.pop("icml-proteus")
    register_on_import()  # the registry is imported already: registers at once
    assert AUTO_QUANTIZER_MAPPING["icml-proteus"] is ProteusHfQuantizer
    assert AUTO_QUANTIZATION_CONFIG_MAPPING["icml-proteus"] is ProteusQuantizationConfig
    assert AutoModelForCausalLM.from_pretrained(saves["proteus"][1]).is_quantized
    # a fresh interpreter: import icml_compress does not import transformers' registry; importing it
    # later (from_pretrained does, through transformers.modeling_utils) registers the quantizer
    code = (
        "import sys, icml_compress; print('transformers.quantizers.auto' in sys.modules); "
        "from transformers.quantizers.auto import AUTO_QUANTIZER_MAPPING as m; "
        "print(m['icml-proteus'].__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "ProteusHfQuantizer"]


def test_icml_compress_imports_without_transformers():
    code = (
        "import sys; sys.modules['transformers'] = None; import icml_compress; "
        "from icml_compress.quantize import register_hf_quantizer\n"
        "try:\n    register_hf_quantizer()\nexcept ImportError as e:\n    print(e)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'icml-compress[hf]'" in out.stdout


# --- corrupted config.json / checkpoint ----------------------------------------------------------------
def _set(where: str, value):
    def edit(doc):
        *keys, last = where.split("/")
        d = doc
        for k in keys:
            d = d[k]
        if value is KeyError:
            del d[last]
        else:
            d[last] = value

    return edit


QC = "quantization_config"


@pytest.mark.parametrize(
    "where, value, match",
    [
        (f"{QC}/layers/{Q}/kind", "gptq", f"{HF_CONFIG_FILE} quantization_config: layer {Q}: kind must be"),
        (f"{QC}/layers", {}, "layers must be a non-empty JSON object"),
        (f"{QC}/layers", KeyError, "lacks 'layers'"),
        (f"{QC}/dtype", KeyError, "lacks 'dtype'"),
        (f"{QC}/dtype", "int8", "dtype must be one of"),
        (f"{QC}/format", "other", "format must be 'icml-compress-quantized' version 1"),
        (f"{QC}/extra_field", 1, r"unknown fields \['extra_field'\]"),
        (f"{QC}/quantization", [1], "quantization must be a JSON object or null"),
        (f"{QC}/layers/{Q}/L", 99, rf"layer {Q}: ValueError: L must be in 8\.\.16"),
        (f"{QC}/layers/{Q}/out_features", 32, "out_features=32, the model's layer has 64"),
        (f"{QC}/layers/model.layers.0.nope", {"kind": "rtn"}, "not an nn.Linear of the model"),
        (f"{QC}/layers/{Q}/T", 64, rf"tensor '{Q}\.packed' is torch\.int32 \(64, 2, 2\), but"),
        (f"{QC}/layers/{Q}/bias", True, rf"lacks tensors \['{Q}\.bias'\]"),
    ],
)
def test_a_corrupted_quantization_config_raises_a_clear_error(saves, tmp_path, where, value, match):
    q = copy_of(saves["proteus"][1], tmp_path)
    edit_config(q, _set(where, value))
    with pytest.raises(CorruptQuantizedModelError, match=match):
        AutoModelForCausalLM.from_pretrained(q)


def test_a_corrupted_checkpoint_raises_a_clear_error(saves, tmp_path):
    from safetensors.torch import load_file, save_file

    q = copy_of(saves["rtn"][1], tmp_path)
    state = load_file(q / WEIGHTS_FILE)
    for change, match in (
        (lambda s: s.pop(f"{Q}.codes"), rf"lacks tensors \['{Q}\.codes'\]"),
        (lambda s: s.update(extra=torch.zeros(1)), "holds tensor 'extra'"),
        (lambda s: s.update({f"{Q}.scale": s[f"{Q}.scale"].float()}), r"torch\.float32 \(64, 2\), but"),
    ):
        edited = dict(state)
        change(edited)
        save_file(edited, q / WEIGHTS_FILE)
        with pytest.raises(CorruptQuantizedModelError, match=match):
            AutoModelForCausalLM.from_pretrained(q)
    (q / WEIGHTS_FILE).write_bytes((saves["rtn"][1] / WEIGHTS_FILE).read_bytes()[:100])
    with pytest.raises(CorruptQuantizedModelError, match="not a readable safetensors file"):
        AutoModelForCausalLM.from_pretrained(q)


def test_a_truncated_config_json_raises(saves, tmp_path):
    q = copy_of(saves["proteus"][1], tmp_path)
    (q / HF_CONFIG_FILE).write_text((saves["proteus"][1] / HF_CONFIG_FILE).read_text()[:200])
    with pytest.raises(OSError, match="not a valid JSON file"):
        AutoModelForCausalLM.from_pretrained(q)


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
FIELDS = ["kind", "in_features", "out_features", "code", "L", "K", "V", "T", "mulbal", "table_shape", "bias"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(FIELDS), value=JSON, layer=st.sampled_from([Q, "model.layers.1.mlp.down_proj"]))
def test_fuzz_a_layer_of_quantization_config(saves, field, value, layer):
    """Any JSON value in any field of a layer's metadata: from_pretrained raises the one clear error or
    loads exactly the model load_quantized builds from the same metadata (then the logits agree)."""
    _, path = saves["proteus"]
    with tempfile.TemporaryDirectory() as d:
        q = copy_of(path, Path(d))
        edit_config(q, _set(f"{QC}/layers/{layer}/{field}", value))
        doc = json.loads((q / CONFIG_FILE).read_text())
        doc["layers"][layer][field] = value
        (q / CONFIG_FILE).write_text(json.dumps(doc))
        try:
            hf = AutoModelForCausalLM.from_pretrained(q)
        except CorruptQuantizedModelError as exc:
            assert HF_CONFIG_FILE in str(exc)
            with pytest.raises(CorruptQuantizedModelError):
                load_quantized(q)
        else:
            assert torch.equal(logits(hf), logits(load_quantized(q)))


# --- progress and the per-layer error plot --------------------------------------------------------------
def test_calibration_shows_progress_unless_switched_off(ids, capsys):
    cfg = QuantConfig(method="trellis", code="1mad", **{**FAST, "n_candidates": 1})
    quantize_model(tiny(), cfg, ids, progress=True)
    err = capsys.readouterr().err
    assert "calibration: 100%" in err and "2/2" in err and "quantize trellis-1mad: 100%" in err
    quantize_model(tiny(), cfg, ids, progress=False)
    assert capsys.readouterr().err == ""


def test_layer_errors_are_the_recorded_proxies(saves):
    model, path = saves["proteus"]
    stats = model.icml_quantization["layers"]
    errors = layer_errors(model)
    assert errors["layers"] == list(stats) and len(errors["layers"]) == 14
    assert errors["proxy"] == [stats[n]["proxy"] for n in stats]
    assert errors["proxy_compensated"] == [stats[n]["proxy_compensated"] for n in stats]
    assert all(c <= p * (1 + 1e-9) for p, c in zip(errors["proxy"], errors["proxy_compensated"], strict=True))
    assert layer_errors(AutoModelForCausalLM.from_pretrained(path)) == errors  # the record is loaded too
    assert layer_errors(model.icml_quantization) == layer_errors(stats) == errors
    assert "proxy_compensated" not in layer_errors(saves["hyb"][0])  # no compensation: one series
    with pytest.raises(ValueError, match="records no per-layer proxy error"):
        layer_errors(saves["rtn"][0])
    with pytest.raises(ValueError, match="model without icml_quantization"):
        layer_errors(tiny())
    bad = copy.deepcopy(stats)
    bad[Q]["proxy"] = float("nan")
    with pytest.raises(ValueError, match=f"layer {Q} has proxy=nan"):
        layer_errors(bad)
    with pytest.raises(TypeError, match="model_or_stats must be"):
        layer_errors([1.0])


def test_plot_layer_errors_writes_a_png(saves, tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    model, _ = saves["proteus"]
    fig = plot_layer_errors(model, tmp_path / "errors.png", title="tiny")
    ax = fig.axes[0]
    heights = [b.get_height() for b in ax.patches]
    errors = layer_errors(model)
    assert heights == errors["proxy"] + errors["proxy_compensated"]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == [n.removeprefix("model.layers.") for n in errors["layers"]]
    assert labels[0] == "0.self_attn.q_proj"
    assert ax.get_yscale() == "log" and ax.get_title() == "tiny"
    assert (tmp_path / "errors.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    plt.close(fig)
    with pytest.raises(TypeError, match=r"path must be a str or os\.PathLike"):
        plot_layer_errors(model, 3)


def test_plot_layer_errors_leaves_the_users_backend_and_figures(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    stats = {Q: {"proxy": 0.1}, "model.layers.0.self_attn.k_proj": {"proxy": 0.2}}
    backend = matplotlib.get_backend()
    matplotlib.use("svg")  # the user's choice (a notebook has its inline backend)
    try:
        user = plt.figure()
        open_before = plt.get_fignums()
        fig = plot_layer_errors(stats, tmp_path / "errors.png")
        assert matplotlib.get_backend() == "svg"  # was switched to Agg
        assert plt.get_fignums() == open_before  # no pyplot figure added
        assert isinstance(fig, matplotlib.figure.Figure)
        assert [b.get_height() for b in fig.axes[0].patches] == [0.1, 0.2]
        assert (tmp_path / "errors.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        plt.close(user)
    finally:
        matplotlib.use(backend)
