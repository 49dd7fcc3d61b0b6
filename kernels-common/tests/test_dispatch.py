"""The implementation choice: automatic, forced by ICML_KERNELS_IMPL, and impossible requests."""

from __future__ import annotations

import pytest
import torch

from icml_kernels import KernelUnavailableError, fwht
from icml_kernels import _dispatch as dispatch

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


@pytest.fixture
def env(monkeypatch):
    monkeypatch.delenv("ICML_KERNELS_IMPL", raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    return monkeypatch


def test_auto_picks_reference_on_cpu_and_kernel_on_cuda(env):
    env.setattr(dispatch, "triton_import_error", lambda: None)
    assert dispatch.select_impl("fwht", CPU) == "torch"
    assert dispatch.select_impl("fwht", CUDA) == "triton"
    assert dispatch.select_impl("fwht", CUDA, kernel_reason="unsupported dtype") == "torch"


def test_auto_falls_back_silently_without_triton(env):
    env.setattr(dispatch, "triton_import_error", lambda: "ImportError: no triton")
    assert dispatch.select_impl("fwht", CUDA) == "torch"


def test_forced_torch_wins_everywhere(env):
    env.setenv("ICML_KERNELS_IMPL", "torch")
    env.setattr(dispatch, "triton_import_error", lambda: None)
    assert dispatch.select_impl("fwht", CUDA) == "torch"


def test_explicit_impossible_request_raises(env):
    env.setenv("ICML_KERNELS_IMPL", "triton")
    env.setattr(dispatch, "triton_import_error", lambda: None)
    with pytest.raises(KernelUnavailableError, match="need CUDA"):
        dispatch.select_impl("fwht", CPU)
    with pytest.raises(KernelUnavailableError, match="unsupported dtype"):
        dispatch.select_impl("fwht", CUDA, kernel_reason="unsupported dtype")
    env.setattr(dispatch, "triton_import_error", lambda: "ImportError: no triton")
    with pytest.raises(KernelUnavailableError, match="no triton"):
        dispatch.select_impl("fwht", CUDA)


def test_interpreter_allows_the_kernel_on_cpu(env):
    env.setenv("TRITON_INTERPRET", "1")
    env.setattr(dispatch, "triton_import_error", lambda: None)
    assert dispatch.select_impl("fwht", CPU) == "triton"


def test_unknown_value_raises(env):
    env.setenv("ICML_KERNELS_IMPL", "cuda")
    with pytest.raises(ValueError, match="ICML_KERNELS_IMPL must be one of"):
        dispatch.select_impl("fwht", CPU)


def test_fwht_honours_the_request(env):
    env.setenv("ICML_KERNELS_IMPL", "triton")
    with pytest.raises(KernelUnavailableError, match="fwht"):
        fwht(torch.randn(2, 8))  # CPU tensor, no interpreter
    env.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(KernelUnavailableError, match="float64"):
        fwht(torch.randn(2, 8, dtype=torch.float64))  # the kernel takes no float64
    env.setenv("ICML_KERNELS_IMPL", "torch")
    assert fwht(torch.ones(1, 4)).sum().item() == pytest.approx(2.0)
