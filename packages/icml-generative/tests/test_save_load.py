"""Saving and loading the package's models (the shared atomic folder format): exact float64 round trips and
an interrupted save that leaves the old folder in place."""

import os

import pytest
import torch

from icml_generative.echo_attention import EchoPolicy, VideoLayout
from icml_generative.kinematics_gs import KinematicsGS
from icml_generative.viewmask import LFQTokenizer, MultiViewTransformer

MODELS = {
    "KinematicsGS": lambda: KinematicsGS(4),
    "LFQTokenizer": lambda: LFQTokenizer(8, 3, 4, 2, 8),
    "MultiViewTransformer": lambda: MultiViewTransformer(16, (2, 2), 2, 16, 1, 2),
    "EchoPolicy": lambda: EchoPolicy(1, 2, 8, VideoLayout(4, 4)),
}


def float64_model(name: str) -> torch.nn.Module:
    """The model in float64, every floating tensor nudged by 1e-12 relative: values float32 cannot hold."""
    torch.manual_seed(0)
    model = MODELS[name]().double()
    with torch.no_grad():
        for t in model.state_dict().values():
            if t.is_floating_point():
                t.add_(t.abs().add(1.0) * 1e-12 * torch.randn_like(t))
    return model


@pytest.mark.parametrize("name", MODELS)
def test_float64_round_trip_is_exact(tmp_path, name):
    model = float64_model(name)
    saved = model.state_dict()
    assert any(t.dtype == torch.float64 and not torch.equal(t, t.float().double()) for t in saved.values())
    assert model.save(tmp_path / name) == tmp_path / name  # every save returns the folder
    loaded = type(model).load(tmp_path / name).state_dict()
    assert list(loaded) == list(saved)
    for key, t in saved.items():
        assert loaded[key].dtype == t.dtype and torch.equal(loaded[key], t), key
    assert all(p.requires_grad for p in type(model).load(tmp_path / name).parameters())


@pytest.mark.parametrize("name", ["KinematicsGS", "EchoPolicy"])
@pytest.mark.parametrize("error", [KeyboardInterrupt, OSError])
def test_interrupted_replace_restores_the_old_folder(tmp_path, monkeypatch, name, error):
    """An interruption between moving the old folder aside (first ``os.replace``) and moving the new one in
    (the second) puts the old folder back: it stays loadable, and nothing else is left in the parent."""
    old = float64_model(name)
    path = tmp_path / "model"
    old.save(path)
    real, calls = os.replace, []

    def flaky(src, dst):
        calls.append((src, dst))
        if len(calls) == 2:
            raise error("interrupted")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", flaky)
    with pytest.raises(error, match="interrupted"):
        MODELS[name]().save(path)
    monkeypatch.setattr(os, "replace", real)
    assert len(calls) == 3  # aside, the failed move in, the restore
    assert [p.name for p in tmp_path.iterdir()] == ["model"]
    loaded = type(old).load(path).state_dict()
    assert all(torch.equal(loaded[k], t) for k, t in old.state_dict().items())
