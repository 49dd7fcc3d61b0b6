"""``icml-compress``: quantize a causal LM and evaluate a quantized one.

    icml-compress quantize --model MODEL_DIR --calibration TEXT_FILE --method proteus --bits 2 --L 10 --out DIR
    icml-compress evaluate DIR --text HELD_OUT_TEXT_FILE

``--model`` is a local Hugging Face model directory (loaded with ``local_files_only=True``; nothing is
downloaded). ``quantize`` calibrates on the text of ``--calibration``; ``evaluate`` reports KL to the float
model it was quantized from, perplexities and bytes per token on the text of ``--text``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


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


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="icml-compress", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    q = sub.add_parser("quantize", help="quantize a causal LM and save it")
    q.add_argument("--model", required=True, help="a local Hugging Face model directory")
    q.add_argument("--method", choices=("rtn", "trellis", "proteus"), default="proteus")
    q.add_argument(
        "--code", default=None, help="trellis code (trellis: 1mad, 3inst, hyb, lut; proteus: mulbal)"
    )
    q.add_argument("--bits", type=int, default=2)
    q.add_argument("--L", type=int, default=10)
    q.add_argument("--T", type=int, default=64)
    q.add_argument("--group-size", type=int, default=64)
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
    q.add_argument("--out", type=Path, required=True)
    e = sub.add_parser("evaluate", help="KL to the float model and perplexity on held-out text")
    e.add_argument("dir", type=Path)
    e.add_argument("--text", type=Path, required=True, help="held-out text file to evaluate on")
    e.add_argument("--n-seq", type=int, default=8)
    e.add_argument("--seq-len", type=int, default=256)
    return p


def _quantize(args) -> dict:
    from icml_compress.quantize import QuantConfig, quantize_model, save_quantized

    code = args.code or {"proteus": "mulbal", "trellis": "1mad", "rtn": "mulbal"}[args.method]
    try:
        cfg = QuantConfig(
            method=args.method,
            code=code,
            bits=args.bits,
            L=args.L,
            T=args.T,
            group_size=args.group_size,
            compensation=args.compensation,
            distill_steps=args.distill_steps,
            distill_chat=args.distill_chat,
            n_calibration=args.n_calibration,
            seq_len=args.seq_len,
            max_blocks=args.max_blocks,
            seed=args.seed,
        )
    except (TypeError, ValueError) as exc:
        raise SystemExit(f"invalid options: {exc}") from None
    model, tokenizer = load_float_model(args.model)
    text = args.calibration.read_text()
    t0 = time.perf_counter()
    quantize_model(model, cfg, text, tokenizer=tokenizer)
    seconds = time.perf_counter() - t0
    save_quantized(model, args.out, tokenizer=tokenizer, extra={"source": args.model, "seconds": seconds})
    return {"out": str(args.out), "method": cfg.label, "seconds": round(seconds, 1)}


def _evaluate(args) -> dict:
    import torch

    from icml_compress.quantize import bytes_per_token, evaluate, load_quantized
    from icml_compress.quantize.calibration import encode_texts, make_sequences
    from icml_compress.quantize.model import read_quantization

    doc = read_quantization(args.dir)
    source = doc.get("extra", {}).get("source")
    if source is None:
        raise SystemExit(f"{args.dir} does not record its float model (saved without extra['source'])")
    reference, tokenizer = load_float_model(source)
    model = load_quantized(args.dir)
    text = args.text.read_text()
    seqs = make_sequences(encode_texts(text, tokenizer), args.n_seq, args.seq_len)
    with torch.no_grad():
        metrics = evaluate(model, seqs, reference=reference)
    return {
        "dir": str(args.dir),
        "config": doc["quantization"]["config"],
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
