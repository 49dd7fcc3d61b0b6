"""The four novelty games: brainstorm, story novelty, word chain and build-on. Each round's novelty lies in
[0, 1] (with the default embedding); the game's score is the mean over rounds.

Our design, as the cooperation games (:mod:`icml_agents.games.cooperation`): the paper's eight games were
not available. No embedding model is needed: the brainstorm's spread uses bags of character trigrams
unless another embedding function is passed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from icml_agents.games.cooperation import OPENINGS, StoryGame
from icml_agents.games.harness import (
    ROLES,
    Game,
    Player,
    Round,
    Turn,
    check_pool,
    check_template,
    draw,
    other,
)
from icml_agents.games.metrics import (
    distinct_n,
    distinct_share,
    embedding_spread,
    first_word,
    novel_share,
    rarity,
    self_bleu,
    split_ideas,
    trigram_embedding,
    unigram_counts,
)
from icml_agents.validation import check_int

__all__ = ["BrainstormGame", "BuildOnGame", "StoryNoveltyGame", "WordChainGame"]

Embedder = Callable[[Sequence[str]], np.ndarray]

TOPICS = (
    "uses for a brick", "names for a pet", "things that are red", "ways to travel", "things in a kitchen",
    "gifts for a friend", "games to play outside", "foods for breakfast", "things that fly", "jobs on a farm",
)  # fmt: skip
PROJECTS = (
    "a new game", "a better umbrella", "a school trip", "a small garden", "a birthday party",
    "a robot helper", "a city park", "a rainy weekend",
)  # fmt: skip
START_WORDS = ("river", "music", "winter", "bread", "light", "ocean", "garden", "night", "stone", "fire")


class BrainstormGame(Game):
    """Joint brainstorming: both players list ideas for the same topic; novelty of the pooled ideas.

    Rules: each round draws a topic (from ``topics``); both players complete ``template`` (default
    ``"Ideas for {topic}:"``), one batched call each with the player's ``max_new_tokens``. A player's ideas
    are the first ``n_ideas`` pieces of its answer split at newlines, commas and semicolons, list markers
    removed (:func:`~icml_agents.games.metrics.split_ideas`). Scorer, on the union (concatenation) of both
    players' ideas: distinct-1 and distinct-2 (:func:`~icml_agents.games.metrics.distinct_n`, n-grams within
    an idea) and the embedding spread, the mean pairwise cosine distance of ``embed(ideas)``
    (:func:`~icml_agents.games.metrics.embedding_spread`; default
    :func:`~icml_agents.games.metrics.trigram_embedding`; 0 with fewer than two ideas). Round novelty: the
    mean of the three, in [0, 1] with a non-negative embedding (in [0, 4/3] with one of any sign).
    Two players repeating each other halve distinct-n and lower the spread.
    """

    name = "brainstorm"
    kind = "novelty"

    def __init__(
        self,
        topics: tuple[str, ...] | list[str] = TOPICS,
        n_ideas: int = 5,
        template: str = "Ideas for {topic}:",
        embed: Embedder = trigram_embedding,
    ) -> None:
        self.topics = check_pool(topics, "topics")
        self.n_ideas = check_int(n_ideas, "n_ideas", minimum=1, maximum=256)
        self.template = check_template(template, "template", ["topic"])
        if not callable(embed):
            raise TypeError(f"embed must be a callable (texts -> (n, d) array), got {type(embed).__name__}")
        self.embed = embed

    def _items(self, rng: np.random.Generator, n_rounds: int) -> list[dict[str, Any]]:
        return [{"topic": t} for t in draw(rng, self.topics, n_rounds)]

    def _play(self, players: dict[str, Player], items: list[dict[str, Any]], seed: int) -> list[Round]:
        prompts = [self.template.format(topic=it["topic"]) for it in items]
        n = len(items)
        texts = self._ask(players, ["a"] * n + ["b"] * n, prompts * 2, seed, 0)
        return [
            Round(
                i,
                item,
                (
                    Turn("a", prompts[i], texts[i], split_ideas(texts[i])[: self.n_ideas]),
                    Turn("b", prompts[i], texts[n + i], split_ideas(texts[n + i])[: self.n_ideas]),
                ),
            )
            for i, item in enumerate(items)
        ]

    def spread(self, ideas: list[str]) -> float:
        """The embedding spread of ``ideas`` under this game's ``embed``."""
        if len(ideas) < 2:
            return 0.0
        vectors = self.embed(ideas)
        if not isinstance(vectors, np.ndarray) or vectors.ndim != 2 or len(vectors) != len(ideas):
            raise TypeError(
                f"embed must return a 2-D numpy array with one row per text ({len(ideas)}), "
                f"got {type(vectors).__name__} {getattr(vectors, 'shape', '')}"
            )
        return embedding_spread(vectors)

    def _evaluate(self, rounds: list[Round]) -> tuple[list[float], dict[str, list[float]]]:
        d1, d2, spread = [], [], []
        for i, r in enumerate(rounds):
            ideas = [
                idea for role in ROLES for idea in split_ideas(self._turn(r, i, role).text)[: self.n_ideas]
            ]
            d1.append(distinct_n(ideas, 1))
            d2.append(distinct_n(ideas, 2))
            spread.append(self.spread(ideas))
        scores = [(x + y + z) / 3 for x, y, z in zip(d1, d2, spread, strict=True)]
        return scores, {"distinct_1": d1, "distinct_2": d2, "spread": spread}


class StoryNoveltyGame(StoryGame):
    """Collaborative storytelling scored by how much new text the two players bring.

    Rules as the story-consistency game (an opening, ``n_turns`` alternating continuations). Scorer, on the
    players' turns (the opening excluded): distinct-2 of all turns
    (:func:`~icml_agents.games.metrics.distinct_n`) and 1 - self-BLEU between the players
    (:func:`~icml_agents.games.metrics.self_bleu` with ``others``: each turn against all of the partner's
    turns, BLEU up to ``max_n``-grams with add-one smoothing for n >= 2, Lin & Och 2004). Round novelty:
    the mean of the two, in [0, 1].
    """

    name = "story_novelty"
    kind = "novelty"

    def __init__(
        self,
        openings: tuple[str, ...] | list[str] = OPENINGS,
        n_turns: int = 4,
        template: str = "{story}",
        max_n: int = 4,
    ) -> None:
        super().__init__(openings, n_turns, template)
        self.max_n = check_int(max_n, "max_n", minimum=1, maximum=8)

    def _evaluate(self, rounds: list[Round]) -> tuple[list[float], dict[str, list[float]]]:
        d2, bleu = [], []
        for r in rounds:
            d2.append(distinct_n([t.text for t in r.turns], 2))
            bleu.append(
                self_bleu([t.text for t in r.by_role("a")], [t.text for t in r.by_role("b")], self.max_n)
            )
        scores = [(x + 1.0 - b) / 2 for x, b in zip(d2, bleu, strict=True)]
        return scores, {"distinct_2": d2, "self_bleu": bleu}


class WordChainGame(Game):
    """A word-association chain: the players alternate adding one word each.

    Rules: each round draws a start word (from ``start_words``); the players alternate ``n_turns`` turns
    (player a first in even rounds, player b in odd rounds), each completing ``template`` (field
    ``{chain}``: the words so far joined by ", "; default ``"Word associations: {chain},"``) with at most
    ``word_tokens`` new tokens; the turn's word is the first word of the answer (an empty answer adds
    nothing to the chain). Scorer, on the players' words of a round: the distinct share
    (:func:`~icml_agents.games.metrics.distinct_share`: distinct non-empty words other than the start word,
    over ``n_turns``) and the mean rarity (:func:`~icml_agents.games.metrics.rarity`: -log p(w) / log(N + V
    + 1) under add-one smoothed unigram frequencies). The frequencies come from ``reference`` (word ->
    count, e.g. :func:`~icml_agents.games.metrics.unigram_counts` of a corpus) or, when it is ``None``, are
    estimated from the chains themselves: the players' words over all rounds of the transcript, so a word
    both players keep returning to is common. Round novelty: the mean of the two, in [0, 1].
    """

    name = "word_chain"
    kind = "novelty"

    def __init__(
        self,
        start_words: tuple[str, ...] | list[str] = START_WORDS,
        n_turns: int = 6,
        template: str = "Word associations: {chain},",
        reference: Mapping[str, float] | None = None,
        word_tokens: int = 8,
    ) -> None:
        self.start_words = check_pool(start_words, "start_words")
        self.n_turns = check_int(n_turns, "n_turns", minimum=2, maximum=256)
        self.template = check_template(template, "template", ["chain"])
        if reference is not None:
            rarity([], reference)  # validates the reference now, not at the end of a game
        self.reference = None if reference is None else dict(reference)
        self.word_tokens = check_int(word_tokens, "word_tokens", minimum=1, maximum=256)

    def _items(self, rng: np.random.Generator, n_rounds: int) -> list[dict[str, Any]]:
        return [
            {"start": w, "first": ROLES[i % 2]} for i, w in enumerate(draw(rng, self.start_words, n_rounds))
        ]

    def _play(self, players: dict[str, Player], items: list[dict[str, Any]], seed: int) -> list[Round]:
        turns: list[list[Turn]] = [[] for _ in items]
        for step in range(self.n_turns):
            roles = [it["first"] if step % 2 == 0 else other(it["first"]) for it in items]
            chains = [
                [it["start"], *(t.value for t in done if t.value)]
                for it, done in zip(items, turns, strict=True)
            ]
            prompts = [self.template.format(chain=", ".join(c)) for c in chains]
            texts = self._ask(players, roles, prompts, seed, step, self.word_tokens)
            for done, role, prompt, text in zip(turns, roles, prompts, texts, strict=True):
                done.append(Turn(role, prompt, text, first_word(text)))
        return [Round(i, item, tuple(t)) for i, (item, t) in enumerate(zip(items, turns, strict=True))]

    def _evaluate(self, rounds: list[Round]) -> tuple[list[float], dict[str, list[float]]]:
        chains = [[t.text for t in r.turns] for r in rounds]
        starts = []
        for i, r in enumerate(rounds):
            start = self._field(r, i, "start")
            if not isinstance(start, str):
                raise ValueError(f"rounds[{i}].item['start'] must be a word, got {start!r}")
            starts.append(start)
        reference: Mapping[str, float] = (
            self.reference
            if self.reference is not None
            else unigram_counts([first_word(t) for c in chains for t in c])
        )
        distinct = [distinct_share(c, [s]) for c, s in zip(chains, starts, strict=True)]
        rare = [rarity(c, reference) for c in chains]
        scores = [(x + y) / 2 for x, y in zip(distinct, rare, strict=True)]
        return scores, {"distinct": distinct, "rarity": rare}


class BuildOnGame(Game):
    """Build on the partner's idea: one proposes, the other must extend it.

    Rules: each round draws a project (from ``projects``); the proposer (player a in even rounds, player b in
    odd rounds) completes ``proposer_template`` (field ``{topic}``); the builder then completes
    ``builder_template`` (fields ``{topic}`` and ``{idea}``, the proposal with its whitespace collapsed),
    both with the player's ``max_new_tokens``. Scorer
    (:func:`~icml_agents.games.metrics.novel_share`): the share of the builder's content-word tokens
    (stop words removed, repeats counted) that are not content words of the proposal; 0 when the builder
    wrote no content word. Round novelty in [0, 1]: a builder that only repeats the proposal scores 0.
    """

    name = "build_on"
    kind = "novelty"

    def __init__(
        self,
        projects: tuple[str, ...] | list[str] = PROJECTS,
        proposer_template: str = "An idea for {topic}:",
        builder_template: str = "An idea for {topic}: {idea}\nA new idea that builds on it:",
    ) -> None:
        self.projects = check_pool(projects, "projects")
        self.proposer_template = check_template(proposer_template, "proposer_template", ["topic"])
        self.builder_template = check_template(builder_template, "builder_template", ["idea"], ["topic"])

    def _items(self, rng: np.random.Generator, n_rounds: int) -> list[dict[str, Any]]:
        return [
            {"topic": t, "proposer": ROLES[i % 2]} for i, t in enumerate(draw(rng, self.projects, n_rounds))
        ]

    def _play(self, players: dict[str, Player], items: list[dict[str, Any]], seed: int) -> list[Round]:
        proposers = [it["proposer"] for it in items]
        first = [self.proposer_template.format(topic=it["topic"]) for it in items]
        proposals = self._ask(players, proposers, first, seed, 0)
        second = [
            self.builder_template.format(topic=it["topic"], idea=" ".join(p.split()))
            for it, p in zip(items, proposals, strict=True)
        ]
        builders = [other(p) for p in proposers]
        built = self._ask(players, builders, second, seed, 1)
        return [
            Round(
                i, item, (Turn(proposers[i], first[i], proposals[i]), Turn(builders[i], second[i], built[i]))
            )
            for i, item in enumerate(items)
        ]

    def _evaluate(self, rounds: list[Round]) -> tuple[list[float], dict[str, list[float]]]:
        scores = []
        for i, r in enumerate(rounds):
            proposer = self._role_field(r, i, "proposer")
            scores.append(
                novel_share(self._turn(r, i, proposer).text, self._turn(r, i, other(proposer)).text)
            )
        return scores, {"novel_share": scores}
