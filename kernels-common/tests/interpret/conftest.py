"""The Triton interpreter tier. ``@triton.jit`` reads TRITON_INTERPRET when a kernel module is imported,
so these tests need their own process with the variable set from the start:

    TRITON_INTERPRET=1 uv run pytest -m interpret kernels-common/tests/interpret
"""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config, items):
    if os.environ.get("TRITON_INTERPRET") == "1":
        return
    skip = pytest.mark.skip(
        reason="needs its own process: TRITON_INTERPRET=1 uv run pytest -m interpret "
        "kernels-common/tests/interpret"
    )
    for item in items:
        if "interpret" in item.keywords:
            item.add_marker(skip)
