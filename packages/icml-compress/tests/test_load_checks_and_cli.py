"""Issue 22, items 6 and 7: ``load_quantized`` on missing, truncated, corrupted or inconsistent files raises
:class:`CorruptQuantizedModelError` naming the file; ``quantize_model`` checks calibration token ids up
front; the ``icml-compress`` CLI checks every argument before any work and fails with one line, status 2."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("transformers")

from icml_compress.quantize import (
    CorruptQuantizedModelError,
    QuantConfig,
    load_quantized,
    quantize_model,
    save_quantized,
)
from icml_compress.quantize.model import CONFIG_FILE, WEIGHTS_FILE, read_quantization

RTN = {"method": "rtn", "group_size": 32, "n_calibration": 1, "seq_len": 32}


def tiny(seed=0, **kw):
    from icml_tools.assets import tiny_llama

    return tiny_llama(seed, **kw)


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, 256, (256,), generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def saved(ids, tmp_path_factory):
    """A valid save_quantized directory of a tiny RTN model (read-only: tests copy it)."""
    path = tmp_path_factory.mktemp("saved") / "q"
    save_quantized(quantize_model(tiny(), QuantConfig(**RTN), ids, progress=False), path)
    return path


def copy_of(saved, tmp_path) -> Path:
    out = tmp_path / "copy"
    shutil.copytree(saved, out)
    return out


# --- load_quantized ----------------------------------------------------------------------------------
def test_a_valid_save_loads(saved):
    assert read_quantization(saved)["format"] == "icml-compress-quantized"
    assert load_quantized(saved).icml_quantization["config"]["method"] == "rtn"


def test_missing_files_raise_the_one_error_naming_them(saved, tmp_path):
    with pytest.raises(CorruptQuantizedModelError, match="not a save_quantized directory"):
        load_quantized(tmp_path / "nowhere")
    q = copy_of(saved, tmp_path)
    (q / WEIGHTS_FILE).unlink()
    with pytest.raises(CorruptQuantizedModelError, match=f"no {WEIGHTS_FILE}"):
        load_quantized(q)
    (q / CONFIG_FILE).unlink()
    with pytest.raises(CorruptQuantizedModelError, match=f"no {CONFIG_FILE}"):
        load_quantized(q)
    assert issubclass(CorruptQuantizedModelError, ValueError)


@pytest.mark.parametrize("keep", [0, 7, 100, 0.5, -1])
def test_truncated_weights_raise_the_one_error(saved, tmp_path, keep):
    q = copy_of(saved, tmp_path)
    data = (q / WEIGHTS_FILE).read_bytes()
    (q / WEIGHTS_FILE).write_bytes(data[: int(keep * len(data)) if isinstance(keep, float) else keep])
    with pytest.raises(CorruptQuantizedModelError, match=rf"{WEIGHTS_FILE} is not a readable safetensors"):
        load_quantized(q)


@pytest.mark.parametrize(
    "text", ["", '{"format": "icml-compress-quan', "[1, 2]", "\udcff".encode("utf-8", "surrogatepass")]
)
def test_truncated_or_corrupted_json_raises_the_one_error(saved, tmp_path, text):
    q = copy_of(saved, tmp_path)
    if isinstance(text, bytes):
        (q / CONFIG_FILE).write_bytes(text)
    else:
        (q / CONFIG_FILE).write_text(text)
    with pytest.raises(CorruptQuantizedModelError, match=CONFIG_FILE):
        load_quantized(q)
    with pytest.raises(CorruptQuantizedModelError, match=CONFIG_FILE):
        read_quantization(q)


def _edit(doc: dict, where: str, value) -> None:
    *keys, last = where.split("/")
    for k in keys:
        doc = doc[k]
    if value is KeyError:
        del doc[last]
    else:
        doc[last] = value


Q = "model.layers.0.self_attn.q_proj"


@pytest.mark.parametrize(
    "where, value, match",
    [
        ("format", "other", "has format 'other'"),
        ("layers", KeyError, "lacks 'layers'"),
        ("layers", [], "layers must be a JSON object"),
        (f"layers/{Q}/kind", "gptq", "kind must be one of"),
        (f"layers/{Q}/bits", 3, f"layer {Q}"),
        (f"layers/{Q}/in_features", KeyError, f"layer {Q}"),
        ("layers/model.layers.0.nope", {"kind": "rtn"}, "not an nn.Linear of the model"),
        # shapes that disagree with the stored tensors or with the model config
        (f"layers/{Q}/group_size", 64, rf"{Q}\.(offset|scale)"),
        (f"layers/{Q}/out_features", 32, "out_features=32, the model's layer has 64"),
        ("dtype", "float16", "float16"),  # the tensors are float32: silently cast before
        ("dtype", "int8", "dtype must be one of"),
        ("model_config/num_hidden_layers", 3, "lacks"),
        ("model_config/hidden_size", 32, "model_config"),
        ("model_config/hidden_size", "x", "model_config does not describe"),  # huggingface_hub's own error
        ("model_config/model_type", "nope", "model_config has model_type 'nope'"),
        ("model_class", "os", "not a transformers model class"),
    ],
)
def test_metadata_that_disagrees_with_the_tensors_raises_the_one_error(saved, tmp_path, where, value, match):
    q = copy_of(saved, tmp_path)
    doc = json.loads((q / CONFIG_FILE).read_text())
    _edit(doc, where, value)
    (q / CONFIG_FILE).write_text(json.dumps(doc))
    with pytest.raises(CorruptQuantizedModelError, match=match) as info:
        load_quantized(q)
    assert str(q) in str(info.value)  # the message names the file


def test_tensors_that_disagree_with_the_metadata_raise_the_one_error(saved, tmp_path):
    from safetensors.torch import load_file, save_file

    q = copy_of(saved, tmp_path)
    state = load_file(q / WEIGHTS_FILE)
    for change, match in (
        (lambda s: s.pop(f"{Q}.codes"), f"lacks tensors.*{Q}.codes"),
        (lambda s: s.update(extra=torch.zeros(1)), "holds tensor 'extra'"),
        (lambda s: s.update({f"{Q}.codes": s[f"{Q}.codes"].int()}), "torch.int32"),
        (lambda s: s.update({f"{Q}.scale": s[f"{Q}.scale"][:1]}), r"\(1, 2\)"),
    ):
        edited = dict(state)
        change(edited)
        save_file(edited, q / WEIGHTS_FILE)
        with pytest.raises(CorruptQuantizedModelError, match=match):
            load_quantized(q)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.sampled_from([WEIGHTS_FILE, CONFIG_FILE]), fraction=st.floats(0, 1, exclude_max=True))
def test_a_save_truncated_anywhere_raises_the_one_error(saved, which, fraction):
    with tempfile.TemporaryDirectory() as d:
        q = Path(d) / "q"
        shutil.copytree(saved, q)
        data = (q / which).read_bytes()
        (q / which).write_bytes(data[: int(fraction * len(data))])
        with pytest.raises(CorruptQuantizedModelError, match=which):
            load_quantized(q)


def test_save_is_atomic_and_flushed(ids, tmp_path, monkeypatch):
    """The files are fsynced before the temporary directory is renamed into place (a crash cannot leave a
    renamed directory with truncated files)."""
    import icml_compress.quantize.model as qm

    events = []
    real_fsync, real_replace = qm.os.fsync, qm.os.replace
    monkeypatch.setattr(qm.os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(qm.os, "replace", lambda a, b: (events.append("replace"), real_replace(a, b))[1])
    model = quantize_model(tiny(), QuantConfig(**RTN), ids, progress=False)
    save_quantized(model, tmp_path / "q")
    assert events[:2] == ["fsync", "fsync"] and "replace" in events  # both files first
    assert events[-1] == "fsync"  # then the directory that holds the renamed one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q"]


def test_a_failed_final_rename_puts_the_earlier_save_back(saved, ids, tmp_path, monkeypatch):
    """Replacing an earlier save takes two renames (the earlier save aside, the new one into place). Before,
    when the second failed (simulated: ``os.replace`` raising ``OSError`` on its second call) ``path`` was
    left missing, the earlier save hidden as ``.q.old-<pid>``. The earlier save must be back at ``path``,
    whole and loadable, with nothing left beside it."""
    import icml_compress.quantize.model as qm

    path = copy_of(saved, tmp_path)
    before = {p.name: p.read_bytes() for p in path.iterdir()}
    expected = load_quantized(path)(ids[None, :24]).logits
    real_replace, calls = qm.os.replace, []

    def second_rename_fails(a, b):
        calls.append((a, b))
        if len(calls) == 2:
            raise OSError("simulated: rename failed")
        return real_replace(a, b)

    monkeypatch.setattr(qm.os, "replace", second_rename_fails)
    model = quantize_model(tiny(seed=1), QuantConfig(**RTN), ids, progress=False)
    with pytest.raises(OSError, match="simulated"):
        save_quantized(model, path)
    monkeypatch.undo()
    assert path.is_dir(), sorted(p.name for p in tmp_path.iterdir())
    assert {p.name: p.read_bytes() for p in path.iterdir()} == before
    assert len(calls) == 3  # aside, into place (failed), back
    assert torch.equal(load_quantized(path)(ids[None, :24]).logits, expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy"]  # no temporary or set-aside directory


def test_a_save_without_the_tokenizer_keeps_the_one_saved_before(saved, ids, tmp_path):
    """``save_pretrained`` leaves a directory's other files when it overwrites it; ``save_quantized`` did not:
    saving again without ``tokenizer=`` (a re-quantized model, say) deleted the tokenizer saved the first
    time, and a model card. They are kept; the earlier weights are not."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel({f"w{i}": i for i in range(256)}, unk_token="w0"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="w0")
    path = tmp_path / "q"
    save_quantized(load_quantized(saved), path, tokenizer=tokenizer)
    (path / "README.md").write_text("model card")
    model = quantize_model(tiny(seed=1), QuantConfig(**RTN), ids, progress=False)
    save_quantized(model, path)
    names = {p.name for p in path.iterdir()}
    assert {"README.md", "tokenizer.json", "tokenizer_config.json"} <= names, sorted(names)
    assert AutoTokenizer.from_pretrained(path)("w3 w5")["input_ids"] == [3, 5]
    x = ids[None, :24]
    assert torch.equal(load_quantized(path)(x).logits, model(x).logits)  # the new weights


# --- quantize_model: calibration token ids ---------------------------------------------------------------
@pytest.mark.parametrize("bad, match", [(256, "0..255"), (-1, "0..255"), (10**6, "0..255")])
def test_calibration_ids_and_tile_length_are_checked_up_front(ids, bad, match, monkeypatch):
    import icml_compress.quantize.model as qm

    monkeypatch.setattr(qm, "collect_hessians", lambda *a, **k: pytest.fail("calibration started"))
    wrong = ids.clone()
    wrong[-1] = bad  # past the first sequence too: every id is checked
    with pytest.raises(ValueError, match=rf"calibration_texts must hold token ids in {match}.*1 of 256"):
        quantize_model(tiny(), QuantConfig(**{**RTN, "method": "trellis", "code": "1mad"}), wrong)
    with pytest.raises(TypeError, match="integer tensor"):
        quantize_model(tiny(), QuantConfig(**RTN), ids > 0)
    with pytest.raises(ValueError, match=r"T=48 must divide the input size of model\.layers\.0"):
        quantize_model(tiny(), QuantConfig(method="trellis", code="1mad", T=48, L=8, seq_len=32), ids)


# --- the CLI -------------------------------------------------------------------------------------------
@pytest.fixture
def never_work(monkeypatch):
    """Loading, quantizing or saving a model fails the test: the CLI must refuse before any work."""
    import icml_compress.cli as cli
    import icml_compress.quantize as q
    import icml_compress.quantize.model as qm

    def work(*a, **k):
        pytest.fail("the CLI started working before checking its arguments")

    monkeypatch.setattr(cli, "load_float_model", work)
    for mod in (q, qm):
        for name in ("quantize_model", "save_quantized", "load_quantized"):
            monkeypatch.setattr(mod, name, work)


@pytest.fixture
def files(tmp_path):
    model = tmp_path / "float"
    model.mkdir()
    (model / "config.json").write_text("{}")
    text = tmp_path / "text.txt"
    text.write_text("some calibration text")
    return model, text


def run_cli(argv, capsys) -> str:
    from icml_compress.cli import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def test_cli_refuses_a_non_empty_out_before_any_work(files, tmp_path, capsys, never_work):
    model, text = files
    out = tmp_path / "busy"
    out.mkdir()
    (out / "result.txt").write_text("an earlier result")
    t0 = time.perf_counter()
    err = run_cli(["quantize", "--model", str(model), "--calibration", str(text), "--out", str(out)], capsys)
    assert time.perf_counter() - t0 < 5
    assert "--out" in err and "not empty" in err
    assert (out / "result.txt").read_text() == "an earlier result"


@pytest.mark.parametrize(
    "change, match",
    [
        ({"--model": "missing"}, "--model must be a local Hugging Face model directory"),
        ({"--model": "text.txt"}, "--model must be a local Hugging Face model directory"),
        ({"--model": "."}, "has no config.json"),
        ({"--calibration": "missing.txt"}, "--calibration must be a text file"),
        ({"--calibration": "empty.txt"}, "--calibration .* is empty"),
        ({"--out": "text.txt"}, "--out .* is not a directory"),
        ({"--out": "text.txt/q"}, "--out .* cannot be created"),
        ({"--method": "rtn", "--code": "1mad"}, "--code does not apply to --method rtn"),
        ({"--method": "rtn", "--L": "12"}, "--L does not apply to --method rtn"),
        ({"--method": "trellis", "--group-size": "32"}, "--group-size applies to --method rtn only"),
        ({"--method": "proteus", "--code": "hyb"}, "invalid options: method 'proteus' uses code 'mulbal'"),
        ({"--L": "99"}, r"invalid options: L must be in 8\.\.16"),
    ],
)
def test_cli_quantize_refuses_bad_arguments_in_one_line(files, tmp_path, capsys, never_work, change, match):
    model, text = files
    (tmp_path / "empty.txt").write_text(" \n")
    args = {"--model": str(model), "--calibration": str(text), "--out": str(tmp_path / "new" / "q")}
    paths = ("--model", "--calibration", "--out")
    args.update({k: str(tmp_path / v) if k in paths else v for k, v in change.items()})
    err = run_cli(["quantize", *(x for kv in args.items() for x in kv)], capsys)
    assert err.startswith("icml-compress quantize: error: ")
    assert re.search(match, err), err
    assert not (tmp_path / "new").exists()


def test_cli_evaluate_refuses_bad_arguments_in_one_line(saved, files, tmp_path, capsys, never_work):
    _, text = files
    err = run_cli(["evaluate", str(tmp_path / "missing"), "--text", str(text)], capsys)
    assert "not a save_quantized directory" in err
    err = run_cli(["evaluate", str(saved), "--text", str(tmp_path / "missing.txt")], capsys)
    assert "--text must be a text file" in err
    err = run_cli(["evaluate", str(saved), "--text", str(text)], capsys)  # saved without extra["source"]
    assert "does not record its float model" in err
    q = copy_of(saved, tmp_path)
    (q / CONFIG_FILE).write_text((q / CONFIG_FILE).read_text()[:100])
    err = run_cli(["evaluate", str(q), "--text", str(text)], capsys)
    assert CONFIG_FILE in err and "not valid JSON" in err
    err = run_cli(["evaluate", str(saved), "--text", str(text), "--n-seq", "0"], capsys)
    assert "--n-seq must be 1 or more" in err
