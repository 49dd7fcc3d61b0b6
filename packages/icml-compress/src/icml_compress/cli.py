"""``icml-compress``: quantize a causal LM and evaluate a quantized one.

    icml-compress quantize --model MODEL_DIR --calibration TEXT_FILE --method proteus --bits 2 --L 10 --out DIR
    icml-compress evaluate DIR --text HELD_OUT_TEXT_FILE

``--model`` is a local Hugging Face model directory (loaded with ``local_files_only=True``; nothing is
downloaded). ``quantize`` calibrates on the text of ``--calibration``; ``evaluate`` reports KL to the float
model it was quantized from, perplexities and bytes per token on the text of ``--text``.

Every argument is checked before any work (no model is loaded before ``--out`` is known to be new or an
empty directory); a bad one ends the command with one line ``icml-compress COMMAND: error: ...`` on
stderr and exit status 2 (argparse's convention).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import NoReturn


def load_float_model(source: str):
    """``(model, tokenizer)`` of a local Hugging Face directory."""
    path = Path(source)
    if not path.is_dir():
        raise SystemExit(f"--model must be a local Hugging Face model directory, got {source!r}")
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise SystemExit(
            "loading a Hugging Face model needs transformers: pip install icml-compress[hf]"
        ) from None
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, torch_dtype="auto").eval()
    return model, AutoTokenizer.from_pretrained(path, local_files_only=True)


DEFAULTS = {"L": 10, "T": 64, "group_size": 64}  # --L, --T (trellis, proteus) and --group-size (rtn)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="icml-compress", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    q = sub.add_parser("quantize", help="quantize a causal LM and save it")
    q.add_argument("--model", required=True, help="a local Hugging Face model directory")
    q.add_argument("--method", choices=("rtn", "trellis", "proteus"), default="proteus")
    q.add_argument(
        "--code",
        default=None,
        help="trellis code (trellis: 1mad (default), 3inst, hyb, lut; proteus: mulbal); not with rtn",
    )
    q.add_argument("--bits", type=int, default=2)
    q.add_argument(
        "--L", type=int, default=None, help=f"trellis state bits (default {DEFAULTS['L']}); not with rtn"
    )
    q.add_argument(
        "--T", type=int, default=None, help=f"trellis tile length (default {DEFAULTS['T']}); not with rtn"
    )
    q.add_argument(
        "--group-size",
        type=int,
        default=None,
        help=f"rtn group size (default {DEFAULTS['group_size']}); rtn only",
    )
    q.add_argument("--compensation", action="store_true")
    q.add_argument("--distill-steps", type=int, default=0)
    q.add_argument(
        "--distill-chat",
        type=int,
        default=0,
        help="chat transcripts (pydoc topics answered by the float model) mixed into distillation",
    )
    q.add_argument("--n-calibration", type=int, default=32)
    q.add_argument("--seq-len", type=int, default=256)
    q.add_argument(
        "--max-blocks", type=int, default=None, help="quantize only the first N transformer blocks"
    )
    q.add_argument("--calibration", type=Path, required=True, help="text file to calibrate on")
    q.add_argument("--seed", type=int, default=0)
    q.add_argument(
        "--out", type=Path, required=True, help="directory to write; must not exist yet or be empty"
    )
    e = sub.add_parser("evaluate", help="KL to the float model and perplexity on held-out text")
    e.add_argument("dir", type=Path)
    e.add_argument("--text", type=Path, required=True, help="held-out text file to evaluate on")
    e.add_argument("--n-seq", type=int, default=8)
    e.add_argument("--seq-len", type=int, default=256)
    return p


def _fail(command: str, message: str) -> NoReturn:
    """End the command as argparse does for a bad argument, in one line: the message on stderr, status 2."""
    print(f"icml-compress {command}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _read_text(command: str, flag: str, path: Path) -> str:
    """The text of the file ``path`` given as ``flag``: an existing, readable, UTF-8, non-blank file."""
    if not path.is_file():
        _fail(command, f"{flag} must be a text file, got {str(path)!r}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        _fail(command, f"{flag} {str(path)!r} cannot be read as UTF-8 text: {exc}")
    if not text.strip():
        _fail(command, f"{flag} {str(path)!r} is empty")
    return text


def _check_model_dir(command: str, flag: str, source: str) -> None:
    """``source`` (given as ``flag``) is a local Hugging Face model directory: it holds a ``config.json``."""
    path = Path(source)
    if not path.is_dir():
        _fail(command, f"{flag} must be a local Hugging Face model directory, got {source!r}")
    if not (path / "config.json").is_file():
        _fail(command, f"{flag} {source!r} has no config.json: not a Hugging Face model directory")


def _check_out(out: Path) -> None:
    """``--out`` does not exist yet (its nearest existing ancestor is a writable directory) or is an empty
    directory: nothing is overwritten, and nothing found only after quantizing stops the save."""
    if out.exists():
        if not out.is_dir():
            _fail("quantize", f"--out {str(out)!r} exists and is not a directory")
        if any(out.iterdir()):
            _fail("quantize", f"--out {str(out)!r} is a directory that is not empty; give a new or empty one")
    parent = out.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        _fail(
            "quantize", f"--out {str(out)!r} cannot be created: {str(parent)!r} is not a writable directory"
        )


def _check_quantize(args):
    """``(QuantConfig, calibration text)`` of valid ``quantize`` arguments; a bad one fails in one line."""
    from icml_compress.quantize import QuantConfig

    given = {"--code": args.code, "--L": args.L, "--T": args.T, "--group-size": args.group_size}
    for flag in ("--code", "--L", "--T") if args.method == "rtn" else ("--group-size",):
        if given[flag] is not None:
            applies = (
                "does not apply to --method rtn" if args.method == "rtn" else "applies to --method rtn only"
            )
            _fail("quantize", f"{flag} {applies} (got --method {args.method} {flag} {given[flag]})")
    code = args.code or {"proteus": "mulbal", "trellis": "1mad", "rtn": "mulbal"}[args.method]
    try:
        cfg = QuantConfig(
            method=args.method,
            code=code,
            bits=args.bits,
            L=DEFAULTS["L"] if args.L is None else args.L,
            T=DEFAULTS["T"] if args.T is None else args.T,
            group_size=DEFAULTS["group_size"] if args.group_size is None else args.group_size,
            compensation=args.compensation,
            distill_steps=args.distill_steps,
            distill_chat=args.distill_chat,
            n_calibration=args.n_calibration,
            seq_len=args.seq_len,
            max_blocks=args.max_blocks,
            seed=args.seed,
        )
    except (TypeError, ValueError) as exc:
        _fail("quantize", f"invalid options: {exc}")
    _check_model_dir("quantize", "--model", args.model)
    text = _read_text("quantize", "--calibration", args.calibration)
    _check_out(args.out)
    return cfg, text


def _quantize(args) -> dict:
    from icml_compress.quantize import quantize_model, save_quantized

    cfg, text = _check_quantize(args)
    model, tokenizer = load_float_model(args.model)
    t0 = time.perf_counter()
    quantize_model(model, cfg, text, tokenizer=tokenizer)
    seconds = time.perf_counter() - t0
    save_quantized(model, args.out, tokenizer=tokenizer, extra={"source": args.model, "seconds": seconds})
    return {"out": str(args.out), "method": cfg.label, "seconds": round(seconds, 1)}


def _check_evaluate(args):
    """``(quantization.json document, float model directory, text)`` of valid ``evaluate`` arguments; a bad
    one fails in one line."""
    from icml_compress.quantize.model import CorruptQuantizedModelError, read_quantization

    try:
        doc = read_quantization(args.dir)
    except CorruptQuantizedModelError as exc:
        _fail("evaluate", str(exc))
    text = _read_text("evaluate", "--text", args.text)
    for flag, value, minimum in (("--n-seq", args.n_seq, 1), ("--seq-len", args.seq_len, 2)):
        if value < minimum:
            _fail("evaluate", f"{flag} must be {minimum} or more, got {value}")
    source = doc.get("extra", {}).get("source")
    if not isinstance(source, str):
        _fail("evaluate", f"{args.dir} does not record its float model (saved without extra['source'])")
    _check_model_dir("evaluate", f"the float model recorded in {args.dir}", source)
    return doc, source, text


def _evaluate(args) -> dict:
    import torch

    from icml_compress.quantize import bytes_per_token, evaluate, load_quantized
    from icml_compress.quantize.calibration import encode_texts, make_sequences
    from icml_compress.quantize.model import CorruptQuantizedModelError

    doc, source, text = _check_evaluate(args)
    try:
        model = load_quantized(args.dir)
    except CorruptQuantizedModelError as exc:
        _fail("evaluate", str(exc))
    reference, tokenizer = load_float_model(source)
    seqs = make_sequences(encode_texts(text, tokenizer), args.n_seq, args.seq_len)
    with torch.no_grad():
        metrics = evaluate(model, seqs, reference=reference)
    return {
        "dir": str(args.dir),
        "config": doc["quantization"].get("config"),
        **metrics,
        **bytes_per_token(model),
    }


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    result = _quantize(args) if args.command == "quantize" else _evaluate(args)
    json.dump(result, sys.stdout, indent=1, default=str)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
