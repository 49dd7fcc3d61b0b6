from __future__ import annotations

import numpy as np
import pytest

from icml_tools.protocol import ProtocolError, format_number, validate_result


def good() -> dict:
    return {
        "system": "s",
        "claim": "c",
        "metric": "m (lower is better)",
        "ours": 1.0,
        "baseline": 2,
        "criterion": "ours < baseline",
        "passed": True,
        "rows": [{"method": "a", "value": 1.0}],
        "figures": [
            {"name": "f", "title": "t", "xlabel": "x", "ylabel": "y", "x": [1, 2], "series": {"a": [1, 2]}}
        ],
    }


def test_valid_result_is_returned_unchanged():
    r = good()
    assert validate_result(r) is r


@pytest.mark.parametrize("key", ["system", "claim", "metric", "ours", "baseline", "criterion", "passed"])
def test_missing_required_key(key):
    r = good()
    del r[key]
    with pytest.raises(ProtocolError, match=key):
        validate_result(r)


@pytest.mark.parametrize("key, value", [("ours", True), ("ours", "1.0"), ("passed", 1), ("claim", None)])
def test_wrong_types(key, value):
    r = good()
    r[key] = value
    with pytest.raises(ProtocolError, match=key):
        validate_result(r)


def test_figure_and_rows_checks():
    r = good()
    r["figures"][0]["series"]["b"] = [1.0]
    with pytest.raises(ProtocolError, match="has 1 values for 2"):
        validate_result(r)
    r = good()
    r["figures"][0]["kind"] = "pie"
    with pytest.raises(ProtocolError, match="kind"):
        validate_result(r)
    r = good()
    r["rows"] = [1, 2]
    with pytest.raises(ProtocolError, match="rows"):
        validate_result(r)


def test_non_json_data_is_rejected():
    r = good()
    r["rows"] = [{"v": np.arange(3)}]
    with pytest.raises(ProtocolError, match="plain JSON"):
        validate_result(r)
    with pytest.raises(ProtocolError, match="dict"):
        validate_result([good()])


def test_format_number():
    assert format_number(0.123456) == "0.1235"
    assert format_number(1.5e-7) == "1.5e-07"
    assert format_number(0) == "0"
    assert format_number(float("inf")) == "inf"


def test_cache_note_must_be_text():
    r = good()
    r["cache"] = "built: trained testbed"
    assert validate_result(r) is r
    r["cache"] = True
    with pytest.raises(ProtocolError, match="cache"):
        validate_result(r)
