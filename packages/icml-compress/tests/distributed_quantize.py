"""Run by ``test_distributed.py``: quantize a tiny random Llama with ``quantize_model``, under ``torchrun``
(``distributed=True``, gloo) or alone (``--plain``: ``distributed=False``, no process group).

    python -m torch.distributed.run --standalone --nproc-per-node N distributed_quantize.py OUT
    python distributed_quantize.py OUT --plain

Two quantizations of the same seeded model: Proteus (compensation, 2 distillation steps) and RTN. Rank 0
saves the Proteus model to ``OUT/proteus`` (``save_quantized``) and writes ``OUT/result.json``: the SHA-256
of every tensor of both quantized models, their ``packed_hash`` and the ``distributed`` record. With the
environment variable ``ICML_TEST_DIE_RANK=R``, rank ``R`` exits with status 3 (``os._exit``, no clean-up)
when its first layer's quantization starts: the other ranks are then blocked in a collective. With
``ICML_TEST_OTHER_TEXT_RANK=R``, rank ``R`` gets other calibration token ids.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import sys
from pathlib import Path

import torch

import icml_compress.quantize.model as qm
from icml_compress.quantize import QuantConfig, packed_hash, quantize_model, save_quantized
from icml_tools.assets import tiny_llama

FAST = {"L": 8, "T": 32, "n_calibration": 5, "seq_len": 32, "n_candidates": 2, "select_rows": 8}
PROTEUS = QuantConfig(compensation=True, distill_steps=2, **FAST)
RTN = QuantConfig(method="rtn", group_size=32, n_calibration=5, seq_len=32)


def tensor_hashes(model: torch.nn.Module) -> dict[str, str]:
    """SHA-256 of every tensor of ``model`` (its dtype and shape included), by name."""
    out = {}
    for name, t in model.state_dict().items():
        h = hashlib.sha256(f"{t.dtype} {tuple(t.shape)}".encode())
        h.update(t.detach().cpu().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())
        out[name] = h.hexdigest()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--plain", action="store_true", help="distributed=False, no process group")
    args = p.parse_args()
    torch.set_num_threads(1)
    distributed = not args.plain
    rank = 0
    if distributed:
        import torch.distributed as dist

        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
        rank = dist.get_rank()
    if os.environ.get("ICML_TEST_DIE_RANK") == str(rank):

        def die(*args, **kwargs):
            os._exit(3)

        qm.quantize_linear_trellis = die  # quantize_model looks it up at each call
    text_seed = 2 if os.environ.get("ICML_TEST_OTHER_TEXT_RANK") == str(rank) else 1
    ids = torch.randint(0, 256, (2048,), generator=torch.Generator().manual_seed(text_seed))
    result: dict = {}
    for label, config in (("proteus", PROTEUS), ("rtn", RTN)):
        model = quantize_model(tiny_llama(0), config, ids, progress=False, distributed=distributed)
        result[label] = {
            "packed_hash": packed_hash(model),
            "tensors": tensor_hashes(model),
            "distributed": model.icml_quantization.get("distributed"),
        }
        if rank == 0 and label == "proteus":
            save_quantized(model, args.out / "proteus")
    if rank == 0:
        (args.out / "result.json").write_text(json.dumps(result, indent=1))
    if distributed:
        dist.barrier()  # every rank is done and rank 0 has written: the group is torn down together
        dist.destroy_process_group()
        # skip the interpreter's teardown: gloo's threads, destroyed there, now and then abort a rank
        # ("terminate called without an active exception") after its work is done and written
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
