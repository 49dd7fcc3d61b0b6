"""The registry of the eight games, playing them by name, and a pair's two outcomes.

:func:`cooperation_score` and :func:`novelty_score` average the scores of a pair's games of each kind: every
game's score lies in [0, 1] (the brainstorm's only with a non-negative embedding, the default), so the
outcomes do too. These are the per-pair outcomes that :mod:`icml_agents.games.analysis` relates to the
pair's representational similarity.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from icml_agents.games.cooperation import NamingGame, ReferentialGame, StoryConsistencyGame, UltimatumGame
from icml_agents.games.harness import DEFAULT_ROUNDS, KINDS, Game, GameResult, Player, check_player
from icml_agents.games.novelty import BrainstormGame, BuildOnGame, StoryNoveltyGame, WordChainGame

__all__ = ["GAMES", "cooperation_score", "novelty_score", "play_all", "play_game"]

GAMES: dict[str, type[Game]] = {
    game.name: game
    for game in (
        NamingGame,
        ReferentialGame,
        UltimatumGame,
        StoryConsistencyGame,
        BrainstormGame,
        StoryNoveltyGame,
        WordChainGame,
        BuildOnGame,
    )
}


def _game_class(name: Any) -> type[Game]:
    if not isinstance(name, str):
        raise TypeError(
            f"name must be a game name (str), got {type(name).__name__}; known games: {sorted(GAMES)}"
        )
    if name not in GAMES:
        raise ValueError(f"name: unknown game {name!r}; known games: {', '.join(sorted(GAMES))}")
    return GAMES[name]


def play_game(
    name: str,
    player_a: Player,
    player_b: Player,
    n_rounds: int = DEFAULT_ROUNDS,
    seed: int = 0,
    **options: Any,
) -> GameResult:
    """Play the game registered as ``name`` (:data:`GAMES`), built with ``options`` (its constructor's
    keyword arguments, e.g. ``categories=...``), for ``n_rounds`` rounds from ``seed``."""
    game = _game_class(name)(**options)
    return game.play(player_a, player_b, n_rounds=n_rounds, seed=seed)


def play_all(
    player_a: Player,
    player_b: Player,
    games: Sequence[str | Game] | None = None,
    n_rounds: int = DEFAULT_ROUNDS,
    seed: int = 0,
) -> dict[str, GameResult]:
    """Play several games (all eight by default; names or :class:`Game` instances) with the same
    ``n_rounds`` and ``seed``; the results by game name."""
    check_player(player_a, "player_a")
    check_player(player_b, "player_b")
    if games is None:
        chosen: list[Game] = [cls() for cls in GAMES.values()]
    else:
        if isinstance(games, str) or not isinstance(games, (list, tuple)):
            raise TypeError(f"games must be None or a list of game names or Game objects, got {games!r}")
        if not games:
            raise ValueError("games must name at least one game, got []")
        chosen = []
        for i, g in enumerate(games):
            if isinstance(g, Game):
                chosen.append(g)
            elif isinstance(g, str):
                if g not in GAMES:
                    raise ValueError(
                        f"games[{i}]: unknown game {g!r}; known games: {', '.join(sorted(GAMES))}"
                    )
                chosen.append(GAMES[g]())
            else:
                raise TypeError(f"games[{i}] must be a game name or a Game, got {type(g).__name__}")
        names = [g.name for g in chosen]
        if len(set(names)) != len(names):
            raise ValueError(f"games must not repeat a game, got {names}")
    return {g.name: g.play(player_a, player_b, n_rounds=n_rounds, seed=seed) for g in chosen}


def _score_of_kind(results: Any, kind: str) -> float:
    if isinstance(results, Mapping):
        items = list(results.values())
    elif isinstance(results, (list, tuple)):
        items = list(results)
    else:
        raise TypeError(f"results must be a list or dict of GameResult, got {type(results).__name__}")
    for i, r in enumerate(items):
        if not isinstance(r, GameResult):
            raise TypeError(f"results[{i}] must be a GameResult, got {type(r).__name__}")
        if r.kind not in KINDS:
            raise ValueError(f"results[{i}].kind must be one of {KINDS}, got {r.kind!r}")
    scores = [r.score for r in items if r.kind == kind]
    if not scores:
        raise ValueError(f"results must hold at least one {kind} game, got {[r.game for r in items]}")
    return float(np.mean(scores))


def cooperation_score(results: Mapping[str, GameResult] | Sequence[GameResult]) -> float:
    """A pair's cooperation: the mean score of its cooperation games (each in [0, 1])."""
    return _score_of_kind(results, "cooperation")


def novelty_score(results: Mapping[str, GameResult] | Sequence[GameResult]) -> float:
    """A pair's novelty: the mean score of its novelty games (each in [0, 1] with the default embedding)."""
    return _score_of_kind(results, "novelty")
