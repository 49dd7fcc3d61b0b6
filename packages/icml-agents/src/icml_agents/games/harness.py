"""The two-player harness: players over any :class:`~icml_agents.backends.Backend`, the :class:`Game` base
class, transcripts (:class:`Turn`, :class:`Round`) and :class:`GameResult`.

A game draws its rounds' items from the seed (:meth:`Game.rounds`), asks the players in batches (one backend
call per player per step, all rounds at once, so Hugging Face models decode them together) and scores the
transcript with :meth:`Game.evaluate`, a pure function of the rounds. Every backend call gets its own seed,
derived from the game's seed, the game, the player's role (``"a"`` or ``"b"``) and the step: a game is
reproducible given its seed, and two copies of one model sampling at a temperature above 0 draw independent
samples (agreement then comes from shared distributions, not shared random numbers).
"""

from __future__ import annotations

import hashlib
import string
import zlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from icml_agents.backends import Backend
from icml_agents.validation import check_int, check_real

__all__ = ["DEFAULT_ROUNDS", "ROLES", "Game", "GameResult", "Player", "Round", "Turn"]

DEFAULT_ROUNDS = 4
MAX_ROUNDS = 10_000
MAX_TOKENS = 4096
ROLES = ("a", "b")
KINDS = ("cooperation", "novelty")


def call_seed(seed: int, game: str, role: str, step: int) -> int:
    """The 63-bit seed of one backend call: a hash of the game's seed, the game, the role and the step."""
    digest = hashlib.sha256(f"{seed}:{game}:{role}:{step}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def other(role: str) -> str:
    return "b" if role == "a" else "a"


class Player:
    """A model taking part in games: a backend and its decoding settings.

    ``temperature=0`` decodes greedily (the answers then do not depend on the seed); above 0 each call
    samples with the seed the game derives for it (nucleus ``top_p``). ``max_new_tokens`` is the budget of
    one turn (a story turn, a list of ideas); games that ask for one word cap it by their ``word_tokens``.
    """

    def __init__(
        self,
        name: str,
        backend: Backend,
        temperature: float = 0.0,
        max_new_tokens: int = 32,
        top_p: float = 1.0,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise TypeError(f"name must be a non-empty str, got {name!r}")
        if not isinstance(backend, Backend):
            raise TypeError(f"backend must be an icml_agents Backend, got {type(backend).__name__}")
        self.name = name
        self.backend = backend
        self.temperature = check_real(temperature, "temperature", "[0, inf)")
        self.max_new_tokens = check_int(max_new_tokens, "max_new_tokens", minimum=1, maximum=MAX_TOKENS)
        self.top_p = check_real(top_p, "top_p", "(0, 1]")

    def __repr__(self) -> str:
        return (
            f"Player(name={self.name!r}, backend={self.backend!r}, temperature={self.temperature}, "
            f"max_new_tokens={self.max_new_tokens})"
        )

    def generate(self, prompts: Sequence[str], *, seed: int, max_new_tokens: int | None = None) -> list[str]:
        """The player's completions of ``prompts``, in one backend call (``max_new_tokens`` caps the
        player's own budget; the smaller one is used)."""
        budget = self.max_new_tokens
        if max_new_tokens is not None:
            budget = min(budget, check_int(max_new_tokens, "max_new_tokens", minimum=1, maximum=MAX_TOKENS))
        completions = self.backend.generate(
            prompts, max_new_tokens=budget, temperature=self.temperature, top_p=self.top_p, seed=seed
        )
        return [c.text for c in completions]

    def logprobs(self, prompts: Sequence[str], continuations: Sequence[str]) -> list[float]:
        """The log-likelihood of each continuation given its prompt (the sum over its tokens), one call."""
        return [lp.total for lp in self.backend.logprobs(prompts, continuations)]


@dataclass(frozen=True)
class Turn:
    """One move: the ``role`` (``"a"`` or ``"b"``) that made it, the ``prompt`` it saw, the ``text`` it
    produced and ``value``, what the game parsed from it (a word, an offer, a listener's candidate scores)."""

    role: str
    prompt: str
    text: str
    value: Any = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {self.role!r}")
        if not isinstance(self.prompt, str):
            raise TypeError(f"prompt must be a str, got {type(self.prompt).__name__}")
        if not isinstance(self.text, str):
            raise TypeError(f"text must be a str, got {type(self.text).__name__}")


@dataclass(frozen=True)
class Round:
    """One round's transcript: its ``index``, the ``item`` the game drew for it (JSON-able) and its turns."""

    index: int
    item: Mapping[str, Any]
    turns: tuple[Turn, ...]

    def __post_init__(self) -> None:
        check_int(self.index, "index", minimum=0)
        if not isinstance(self.item, Mapping):
            raise TypeError(f"item must be a mapping, got {type(self.item).__name__}")
        if not isinstance(self.turns, tuple) or not all(isinstance(t, Turn) for t in self.turns):
            raise TypeError("turns must be a tuple of Turn")

    def by_role(self, role: str) -> list[Turn]:
        """The turns of one role, in order."""
        return [t for t in self.turns if t.role == role]


@dataclass(frozen=True)
class GameResult:
    """A played game: the ``game``'s name and ``kind``, the two players' names, the seed, the transcript,
    ``score`` (the mean of ``round_scores``, in the game's documented range) and ``details`` (the score's
    components, averaged over rounds)."""

    game: str
    kind: str
    players: tuple[str, str]
    seed: int
    rounds: tuple[Round, ...]
    score: float
    round_scores: tuple[float, ...]
    details: Mapping[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON-able data: the scores and the whole transcript."""
        return {
            "game": self.game,
            "kind": self.kind,
            "players": list(self.players),
            "seed": self.seed,
            "score": self.score,
            "round_scores": list(self.round_scores),
            "details": dict(self.details),
            "rounds": [
                {
                    "index": r.index,
                    "item": dict(r.item),
                    "turns": [
                        {"role": t.role, "prompt": t.prompt, "text": t.text, "value": t.value}
                        for t in r.turns
                    ],
                }
                for r in self.rounds
            ],
        }


def check_player(player: Any, name: str) -> Player:
    if not isinstance(player, Player):
        raise TypeError(f"{name} must be a Player, got {type(player).__name__}")
    return player


def check_pool(values: Any, name: str, minimum: int = 1) -> tuple[str, ...]:
    """A list of distinct non-empty strings, at least ``minimum`` of them."""
    if isinstance(values, str) or not isinstance(values, (list, tuple)):
        raise TypeError(f"{name} must be a list of strings, got {type(values).__name__}")
    for i, v in enumerate(values):
        if not isinstance(v, str) or not v.strip():
            raise TypeError(f"{name}[{i}] must be a non-empty str, got {v!r}")
    if len(set(values)) != len(values):
        raise ValueError(f"{name} must not repeat an entry, got {list(values)!r:.80}")
    if len(values) < minimum:
        raise ValueError(f"{name} must hold at least {minimum} entries, got {len(values)}")
    return tuple(values)


def check_template(value: Any, name: str, required: Sequence[str], optional: Sequence[str] = ()) -> str:
    """A ``str.format`` template with the named fields ``required`` (and possibly ``optional``), no others."""
    if not isinstance(value, str) or not value.strip():
        raise TypeError(f"{name} must be a non-empty str template, got {value!r}")
    try:
        fields = {f for _, f, _, _ in string.Formatter().parse(value) if f is not None}
    except ValueError as err:
        raise ValueError(f"{name} is not a valid format template: {err}") from None
    missing = [f for f in required if f not in fields]
    unknown = sorted(fields - set(required) - set(optional))
    if missing or unknown:
        allowed = ", ".join("{" + f + "}" for f in [*required, *optional])
        raise ValueError(
            f"{name} must use the fields {allowed} (required: {list(required)}), got {value!r}"
            f" (missing {missing}, unknown {unknown})"
        )
    return value


def draw(rng: np.random.Generator, pool: Sequence[str], n: int) -> list[str]:
    """``n`` entries of ``pool``: shuffled passes through the whole pool, so nothing repeats before all
    entries were used."""
    out: list[str] = []
    while len(out) < n:
        out.extend(pool[int(i)] for i in rng.permutation(len(pool)))
    return out[:n]


class Game(ABC):
    """A two-player game over backends.

    Subclasses set ``name`` and ``kind`` (``"cooperation"`` or ``"novelty"``) and implement ``_items``
    (the rounds' items from a generator), ``_play`` (the transcript) and ``_evaluate`` (one score per round
    and the components, from the transcript only). The class docstring of each game states its rules,
    prompts and scorer; the eight games are our design (the paper's list of games was not available).
    """

    name: ClassVar[str] = ""
    kind: ClassVar[str] = ""
    score_range: ClassVar[tuple[float, float]] = (0.0, 1.0)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def rounds(self, seed: int = 0, n_rounds: int = DEFAULT_ROUNDS) -> list[dict[str, Any]]:
        """The items of ``n_rounds`` rounds (categories, candidates, topics, openings...), drawn from
        ``seed``: the same seed gives the same items whoever plays."""
        seed = check_int(seed, "seed", minimum=0)
        n_rounds = check_int(n_rounds, "n_rounds", minimum=1, maximum=MAX_ROUNDS)
        rng = np.random.default_rng([seed, zlib.crc32(self.name.encode())])
        return self._items(rng, n_rounds)

    def play(
        self, player_a: Player, player_b: Player, n_rounds: int = DEFAULT_ROUNDS, seed: int = 0
    ) -> GameResult:
        """Play ``n_rounds`` rounds; the transcript and the score (see the class docstring)."""
        players = {"a": check_player(player_a, "player_a"), "b": check_player(player_b, "player_b")}
        items = self.rounds(seed, n_rounds)
        played = tuple(self._play(players, items, int(seed)))
        score, per_round, details = self.evaluate(played)
        return GameResult(
            self.name, self.kind, (player_a.name, player_b.name), int(seed), played, score, per_round, details
        )

    def evaluate(self, rounds: Sequence[Round]) -> tuple[float, tuple[float, ...], dict[str, float]]:
        """The game's score from a transcript alone: ``(score, round_scores, details)``, ``score`` being the
        mean of the round scores and ``details`` the mean of each score component."""
        if isinstance(rounds, (str, bytes)) or not isinstance(rounds, (list, tuple)):
            raise TypeError(f"rounds must be a list of Round, got {type(rounds).__name__}")
        if not rounds:
            raise ValueError("rounds must hold at least one Round, got []")
        for i, r in enumerate(rounds):
            if not isinstance(r, Round):
                raise TypeError(f"rounds[{i}] must be a Round, got {type(r).__name__}")
        per_round, components = self._evaluate(list(rounds))
        details = {k: float(np.mean(v)) for k, v in components.items()}
        return float(np.mean(per_round)), tuple(float(s) for s in per_round), details

    # the pieces each game implements -----------------------------------------------------------------
    @abstractmethod
    def _items(self, rng: np.random.Generator, n_rounds: int) -> list[dict[str, Any]]: ...

    @abstractmethod
    def _play(self, players: dict[str, Player], items: list[dict[str, Any]], seed: int) -> list[Round]: ...

    @abstractmethod
    def _evaluate(self, rounds: list[Round]) -> tuple[list[float], dict[str, list[float]]]: ...

    # helpers ------------------------------------------------------------------------------------------
    def _ask(
        self,
        players: dict[str, Player],
        roles: Sequence[str],
        prompts: Sequence[str],
        seed: int,
        step: int,
        word_tokens: int | None = None,
    ) -> list[str]:
        """Each prompt answered by its role's player: one batched call per player for this step."""
        out = [""] * len(prompts)
        for role in ROLES:
            index = [i for i, r in enumerate(roles) if r == role]
            if index:
                texts = players[role].generate(
                    [prompts[i] for i in index],
                    seed=call_seed(seed, self.name, role, step),
                    max_new_tokens=word_tokens,
                )
                for i, text in zip(index, texts, strict=True):
                    out[i] = text
        return out

    @staticmethod
    def _turn(rnd: Round, i: int, role: str, k: int = 0) -> Turn:
        """The ``k``-th turn of ``role`` in round ``i`` of a transcript being scored."""
        turns = rnd.by_role(role)
        if len(turns) <= k:
            raise ValueError(f"rounds[{i}].turns must hold at least {k + 1} turn(s) of player {role!r}")
        return turns[k]

    @staticmethod
    def _field(rnd: Round, i: int, key: str) -> Any:
        if key not in rnd.item:
            raise ValueError(f"rounds[{i}].item must hold {key!r}, got keys {sorted(rnd.item)}")
        return rnd.item[key]

    @staticmethod
    def _role_field(rnd: Round, i: int, key: str) -> str:
        role = Game._field(rnd, i, key)
        if role not in ROLES:
            raise ValueError(f"rounds[{i}].item[{key!r}] must be one of {ROLES}, got {role!r}")
        return str(role)
