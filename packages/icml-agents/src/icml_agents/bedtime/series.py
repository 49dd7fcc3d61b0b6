"""Time series with attribute-controlled descriptions: the generator, the describer's templates, the parser.

A series of ``length`` steps on ``t ∈ [0, 1]`` is the sum of

- a **trend** ``a·t`` with ``a = ±3 · U(0.8, 1.2)`` (``increasing`` / ``decreasing``) or ``0`` (``flat``);
- a **seasonality**: ``0.8 · sin(2π · step / period + φ)`` with period 6 (``fast``) or 20 (``slow``) steps,
  or nothing (``none``);
- **noise**: Gaussian with std 0.1 (``low``) or 0.5 (``high``);
- an **event** at a **position**: a ``spike`` (+4 at one step), a ``shift up`` / ``shift down`` (±2.5 from
  that step on), or ``none``; positions ``beginning`` (10–25 % of the length), ``middle`` (40–60 %), ``end``
  (75–90 %); the position is ``None`` when there is no event;
- an offset ``U(−1, 1)``.

This mimics the synthetic parts of BEDTime (SUSHI-style pattern series and TaxoSynth's attribute taxonomy,
Sen et al., arXiv 2509.05215); the attributes, values and magnitudes are ours. :func:`describe` writes one of
three paraphrase templates; :func:`parse_description` reads any of them back (and free text using the same
vocabulary); :func:`hard_negative` changes exactly one applicable attribute.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from icml_agents.validation import check_choice, check_int, check_seed

ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "trend": ("increasing", "decreasing", "flat"),
    "seasonality": ("none", "fast", "slow"),
    "noise": ("low", "high"),
    "event": ("none", "spike", "shift up", "shift down"),
    "position": ("beginning", "middle", "end"),
}
PERIODS = {"fast": 6, "slow": 20}
NOISE_STD = {"low": 0.1, "high": 0.5}
POSITION_SPAN = {"beginning": (0.10, 0.25), "middle": (0.40, 0.60), "end": (0.75, 0.90)}
TREND_SLOPE, SEASON_AMPLITUDE, SPIKE_HEIGHT, SHIFT_HEIGHT = 3.0, 0.8, 4.0, 2.5
MIN_LENGTH, MAX_LENGTH = 24, 100_000


@dataclasses.dataclass(frozen=True)
class Attributes:
    """The attributes of one series; ``position`` is ``None`` exactly when ``event == "none"``."""

    trend: str
    seasonality: str
    noise: str
    event: str
    position: str | None

    def __post_init__(self) -> None:
        for name in ("trend", "seasonality", "noise", "event"):
            check_choice(getattr(self, name), name, ATTRIBUTES[name])
        if self.event == "none":
            if self.position is not None:
                raise ValueError(f"position must be None when event is 'none', got {self.position!r}")
        else:
            check_choice(self.position, "position", ATTRIBUTES["position"])

    def applicable(self) -> tuple[str, ...]:
        """The attribute names that describe this series (``position`` only with an event)."""
        return tuple(n for n in ATTRIBUTES if n != "position" or self.event != "none")

    def as_dict(self) -> dict[str, str | None]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Attributes:
        if not isinstance(values, Mapping):
            raise TypeError(
                f"attributes must be a mapping of {tuple(ATTRIBUTES)}, got {type(values).__name__}"
            )
        unknown = set(values) - set(ATTRIBUTES)
        if unknown:
            raise ValueError(f"unknown attributes {sorted(unknown)}: expected names in {tuple(ATTRIBUTES)}")
        missing = [n for n in ATTRIBUTES if n != "position" and n not in values]
        if missing:
            raise ValueError(f"attributes are missing {missing}")
        v: dict[str, Any] = {n: values.get(n) for n in ATTRIBUTES}
        return cls(v["trend"], v["seasonality"], v["noise"], v["event"], v["position"])


def random_attributes(seed: int | np.random.Generator = 0) -> Attributes:
    """Attributes drawn uniformly per attribute (the position only with an event)."""
    rng = check_seed(seed)
    values: dict[str, Any] = {n: str(rng.choice(v)) for n, v in ATTRIBUTES.items()}
    if values["event"] == "none":
        values["position"] = None
    return Attributes(**values)


def generate_series(
    attributes: Attributes | Mapping[str, Any], length: int = 120, seed: int | np.random.Generator = 0
) -> np.ndarray:
    """A float64 series of ``length`` steps with the given attributes (module docstring)."""
    attrs = attributes if isinstance(attributes, Attributes) else Attributes.from_dict(attributes)
    check_int(length, "length", MIN_LENGTH, MAX_LENGTH)
    rng = check_seed(seed)
    t = np.linspace(0.0, 1.0, length)
    slope = (
        {"increasing": 1.0, "decreasing": -1.0, "flat": 0.0}[attrs.trend]
        * TREND_SLOPE
        * rng.uniform(0.8, 1.2)
    )
    x = rng.uniform(-1, 1) + slope * t
    if attrs.seasonality != "none":
        period = PERIODS[attrs.seasonality]
        x = x + SEASON_AMPLITUDE * np.sin(
            2 * math.pi * np.arange(length) / period + rng.uniform(0, 2 * math.pi)
        )
    x = x + NOISE_STD[attrs.noise] * rng.standard_normal(length)
    if attrs.event != "none":
        lo, hi = POSITION_SPAN[attrs.position]  # type: ignore[index]
        at = int(rng.integers(int(lo * length), int(hi * length) + 1))
        if attrs.event == "spike":
            x[at] += SPIKE_HEIGHT
        else:
            x[at:] += SHIFT_HEIGHT if attrs.event == "shift up" else -SHIFT_HEIGHT
    return x


# -- descriptions ------------------------------------------------------------------------------------------
_TREND_WORDS = {
    "increasing": ("trends upward", "rises overall", "increases steadily"),
    "decreasing": ("trends downward", "falls overall", "decreases steadily"),
    "flat": ("stays level", "has no overall trend", "remains flat"),
}
_SEASON_WORDS = {
    "none": ("no seasonality", "no repeating cycle", "no periodic pattern"),
    "fast": ("a fast seasonal cycle", "short repeating cycles", "a high-frequency periodic pattern"),
    "slow": ("a slow seasonal cycle", "long repeating cycles", "a low-frequency periodic pattern"),
}
_NOISE_WORDS = {
    "low": ("little noise", "smooth variation", "low noise"),
    "high": ("strong noise", "jagged variation", "high noise"),
}
_EVENT_WORDS = {
    "spike": ("a sharp spike", "a sudden spike", "a single spike"),
    "shift up": ("an upward level shift", "a jump up to a higher level", "a step up in level"),
    "shift down": ("a downward level shift", "a drop down to a lower level", "a step down in level"),
}
_POSITION_WORDS = {
    "beginning": ("near the beginning", "early on", "at the start"),
    "middle": ("in the middle", "midway through", "around the middle"),
    "end": ("near the end", "late in the series", "toward the end"),
}
_EVENT_NONE = ("no abrupt events", "no sudden changes", "no spikes or shifts")


def describe(attributes: Attributes | Mapping[str, Any], seed: int | np.random.Generator = 0) -> str:
    """One sentence naming every applicable attribute, in one of three paraphrase templates (from ``seed``)."""
    attrs = attributes if isinstance(attributes, Attributes) else Attributes.from_dict(attributes)
    rng = check_seed(seed)
    pick = lambda words: words[int(rng.integers(len(words)))]  # noqa: E731
    trend = pick(_TREND_WORDS[attrs.trend])
    season = pick(_SEASON_WORDS[attrs.seasonality])
    noise = pick(_NOISE_WORDS[attrs.noise])
    if attrs.event == "none":
        event = pick(_EVENT_NONE)
    else:
        event = f"{pick(_EVENT_WORDS[attrs.event])} {pick(_POSITION_WORDS[attrs.position])}"  # type: ignore[index]
    template = int(rng.integers(3))
    if template == 0:
        return f"The series {trend}, with {season} and {noise}, and shows {event}."
    if template == 1:
        return f"A series that {trend} with {noise}; it has {season} and {event}."
    return f"With {season} and {noise}, this series {trend} and has {event}."


def parse_description(text: str) -> dict[str, str | None]:
    """The attributes a description names: ``{name: value or None}`` (``None``: not mentioned or ambiguous).

    Reads :func:`describe`'s vocabulary (and the bare value words, e.g. "increasing", "level shift up"), case
    insensitive; the first attribute phrase found wins when two values of one attribute appear.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    low = " ".join(text.lower().split())
    found: dict[str, str | None] = {}
    tables = {
        "trend": _TREND_WORDS,
        "seasonality": _SEASON_WORDS,
        "noise": _NOISE_WORDS,
        "event": {**_EVENT_WORDS, "none": _EVENT_NONE},
        "position": _POSITION_WORDS,
    }
    extra: dict[str, dict[str, tuple[str, ...]]] = {
        "trend": {
            "increasing": ("increasing", "upward trend"),
            "decreasing": ("decreasing", "downward trend"),
            "flat": ("flat",),
        },
        "seasonality": {"fast": ("fast season",), "slow": ("slow season",), "none": ("not seasonal",)},
        "noise": {"low": ("low noise",), "high": ("high noise", "noisy")},
        "event": {"shift up": ("level shift up",), "shift down": ("level shift down",), "spike": ("spike",)},
        "position": {},
    }
    for name, table in tables.items():
        best: tuple[int, str] | None = None
        for value, phrases in table.items():
            for phrase in (*phrases, *extra[name].get(value, ())):
                m = re.search(r"\b" + re.escape(phrase) + r"\b", low)
                if m and (best is None or m.start() < best[0]):
                    best = (m.start(), value)
        found[name] = None if best is None else best[1]
    if found["event"] in (None, "none"):
        found["position"] = None
    return found


def hard_negative(attributes: Attributes, seed: int | np.random.Generator = 0) -> tuple[Attributes, str]:
    """Attributes that differ from ``attributes`` in exactly one applicable attribute, and which one.

    Changing ``event`` to or from ``"none"`` also sets or clears the position (the one attribute that
    differs is still ``event``: the position is not applicable on one side).
    """
    if not isinstance(attributes, Attributes):
        raise TypeError(f"attributes must be an Attributes, got {type(attributes).__name__}")
    rng = check_seed(seed)
    name = str(rng.choice(attributes.applicable()))
    current = getattr(attributes, name)
    value = str(rng.choice([v for v in ATTRIBUTES[name] if v != current]))
    changes: dict[str, Any] = {name: value}
    if name == "event":
        if value == "none":
            changes["position"] = None
        elif attributes.position is None:
            changes["position"] = str(rng.choice(ATTRIBUTES["position"]))
    return dataclasses.replace(attributes, **changes), name
