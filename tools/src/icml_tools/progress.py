"""Signs of life from inside a reproduction: a status line for each step that can take more than ~10 s.

``icml-repro`` prints ``[k/n] name`` before each reproduction; the reproduction's own bars (tqdm) and the
lines of :func:`status` come under it, so a long run is never silent::

    from icml_tools.progress import status

    status("quantizing 4 blocks with Proteus")  # ->   · 14:02:31 quantizing 4 blocks with Proteus
"""

from __future__ import annotations

import sys
import time


def status(text: str) -> None:
    """Print ``text`` as one status line (with the wall-clock time) on standard error, at once."""
    print(f"  · {time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)
