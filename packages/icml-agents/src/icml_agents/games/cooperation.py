"""The four cooperation games: naming (Schelling coordination), referential (clue and guess), ultimatum
(offer and accept) and story consistency. Each round scores in [0, 1]; the game's score is their mean.

Our design: the paper (Potter et al., arXiv 2606.07818) plays 8 games spanning cooperation and novelty, but
its list of games was not available. Prompts are short completion-style lines so that any text model, down
to a tiny model trained on short synthetic text, can play; every template and word list can be replaced.
"""

from __future__ import annotations

from typing import Any

import numpy as np

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
    acceptance_rate,
    agreement,
    consistency,
    first_word,
    parse_offer,
    parse_response,
    referential_accuracy,
)
from icml_agents.validation import check_bool, check_int

__all__ = ["NamingGame", "ReferentialGame", "StoryConsistencyGame", "UltimatumGame"]

CATEGORIES = (
    "fruit", "color", "animal", "number", "country", "vegetable", "flower", "tree", "bird", "fish",
    "drink", "sport", "tool", "metal", "planet", "city", "instrument", "vehicle", "weekday", "month",
)  # fmt: skip
WORDS = (
    "apple", "river", "dog", "moon", "chair", "bread", "snow", "fire", "ship", "tree",
    "book", "cat", "sun", "rain", "shoe", "cake", "bird", "car", "milk", "gold",
    "horse", "house", "salt", "king", "door", "ice", "egg", "star", "fish", "road",
    "glass", "lion", "sand", "clock", "bell", "rose", "rock", "wind", "cow", "key",
)  # fmt: skip
OPENINGS = (
    "Once upon a time, a fox found a key.",
    "The old ship sailed into the storm.",
    "A girl opened the door of the empty house.",
    "The robot woke up in a quiet city.",
    "Two friends walked into the dark forest.",
    "The king lost his golden crown.",
    "A small dog ran across the snowy field.",
    "The baker made a very strange cake.",
)


def _word_tokens(value: Any) -> int:
    return check_int(value, "word_tokens", minimum=1, maximum=256)


class NamingGame(Game):
    """Schelling coordination: name the same thing without talking.

    Rules: each round draws a category (from ``categories``, each used once before any repeats); both players
    independently complete ``template`` (default ``"Name a {category}:"``) in one batched call each, with
    at most ``word_tokens`` new tokens. Scorer: a round scores 1 when the two answers' normalized first words
    (:func:`~icml_agents.games.metrics.first_word`) are equal and non-empty, else 0
    (:func:`~icml_agents.games.metrics.agreement`). Score: the agreement rate, in [0, 1].
    """

    name = "naming"
    kind = "cooperation"

    def __init__(
        self,
        categories: tuple[str, ...] | list[str] = CATEGORIES,
        template: str = "Name a {category}:",
        word_tokens: int = 8,
    ) -> None:
        self.categories = check_pool(categories, "categories")
        self.template = check_template(template, "template", ["category"])
        self.word_tokens = _word_tokens(word_tokens)

    def _items(self, rng: np.random.Generator, n_rounds: int) -> list[dict[str, Any]]:
        return [{"category": c} for c in draw(rng, self.categories, n_rounds)]

    def _play(self, players: dict[str, Player], items: list[dict[str, Any]], seed: int) -> list[Round]:
        prompts = [self.template.format(category=it["category"]) for it in items]
        n = len(items)
        texts = self._ask(players, ["a"] * n + ["b"] * n, prompts * 2, seed, 0, self.word_tokens)
        return [
            Round(
                i,
                item,
                (
                    Turn("a", prompts[i], texts[i], first_word(texts[i])),
                    Turn("b", prompts[i], texts[n + i], first_word(texts[n + i])),
                ),
            )
            for i, item in enumerate(items)
        ]

    def _evaluate(self, rounds: list[Round]) -> tuple[list[float], dict[str, list[float]]]:
        scores = [
            agreement([self._turn(r, i, "a").text], [self._turn(r, i, "b").text])
            for i, r in enumerate(rounds)
        ]
        return scores, {"agreement": scores}


class ReferentialGame(Game):
    """A referential game: the speaker gives a one-word clue, the listener picks the target by likelihood.

    Rules: each round draws ``n_candidates`` distinct words from ``words`` (shuffled) and a target among them;
    the speaker is player a in even rounds and player b in odd rounds (so both roles are balanced). The
    speaker completes ``speaker_template`` (fields ``{candidates}``, the words joined by ", ", and
    ``{target}``); its clue is the first word of the answer. The listener never generates: it scores every
    candidate with its own log-likelihood of ``" " + candidate`` after ``listener_template`` (fields
    ``{candidates}`` and ``{clue}``) through ``backend.logprobs`` (one call per listener), and its guess is
    the most likely candidate. Scorer (:func:`~icml_agents.games.metrics.referential_accuracy`): 1 when the
    target is the listener's top candidate, 1/k when it ties with k - 1 others, 0 otherwise; a round whose
    clue is empty, or (``forbid_candidates``, the default, as in Codenames) is one of the candidate words,
    scores 0. Score: accuracy in [0, 1]; chance is 1/``n_candidates`` for valid clues (1/4 by default).
    Log-likelihoods are sums over tokens, so a listener prefers candidates of fewer tokens; that bias is the
    same whoever the speaker is.
    """

    name = "referential"
    kind = "cooperation"

    def __init__(
        self,
        words: tuple[str, ...] | list[str] = WORDS,
        n_candidates: int = 4,
        speaker_template: str = "Words: {candidates}. A one-word clue for {target}:",
        listener_template: str = "Words: {candidates}. Clue: {clue}. The word is",
        forbid_candidates: bool = True,
        word_tokens: int = 8,
    ) -> None:
        self.n_candidates = check_int(n_candidates, "n_candidates", minimum=2, maximum=64)
        self.words = check_pool(words, "words", minimum=self.n_candidates)
        self.speaker_template = check_template(
            speaker_template, "speaker_template", ["target"], ["candidates"]
        )
        self.listener_template = check_template(
            listener_template, "listener_template", ["clue"], ["candidates"]
        )
        self.forbid_candidates = check_bool(forbid_candidates, "forbid_candidates")
        self.word_tokens = _word_tokens(word_tokens)

    def _items(self, rng: np.random.Generator, n_rounds: int) -> list[dict[str, Any]]:
        items = []
        for i in range(n_rounds):
            chosen = rng.choice(len(self.words), size=self.n_candidates, replace=False)
            items.append(
                {
                    "candidates": [self.words[int(j)] for j in chosen],
                    "target": int(rng.integers(self.n_candidates)),
                    "speaker": ROLES[i % 2],
                }
            )
        return items

    def _play(self, players: dict[str, Player], items: list[dict[str, Any]], seed: int) -> list[Round]:
        shown = [", ".join(it["candidates"]) for it in items]
        speakers = [it["speaker"] for it in items]
        speaker_prompts = [
            self.speaker_template.format(candidates=s, target=it["candidates"][it["target"]])
            for s, it in zip(shown, items, strict=True)
        ]
        texts = self._ask(players, speakers, speaker_prompts, seed, 0, self.word_tokens)
        clues = [first_word(t) for t in texts]
        listener_prompts = [
            self.listener_template.format(candidates=s, clue=c) for s, c in zip(shown, clues, strict=True)
        ]
        scores: list[list[float]] = [[] for _ in items]
        for role in ROLES:  # the listener of a round is the other role: one logprobs call per listener
            index = [i for i, s in enumerate(speakers) if other(s) == role]
            if not index:
                continue
            prompts = [listener_prompts[i] for i in index for _ in items[i]["candidates"]]
            conts = [" " + c for i in index for c in items[i]["candidates"]]
            totals = players[role].logprobs(prompts, conts)
            for k, i in enumerate(index):
                scores[i] = totals[k * self.n_candidates : (k + 1) * self.n_candidates]
        return [
            Round(
                i,
                item,
                (
                    Turn(speakers[i], speaker_prompts[i], texts[i], clues[i]),
                    Turn(other(speakers[i]), listener_prompts[i], "", scores[i]),
                ),
            )
            for i, item in enumerate(items)
        ]

    def _evaluate(self, rounds: list[Round]) -> tuple[list[float], dict[str, list[float]]]:
        scores, valid_clues = [], []
        for i, r in enumerate(rounds):
            speaker = self._role_field(r, i, "speaker")
            candidates = self._field(r, i, "candidates")
            if not isinstance(candidates, (list, tuple)) or not all(isinstance(c, str) for c in candidates):
                raise ValueError(
                    f"rounds[{i}].item['candidates'] must be a list of words, got {candidates!r}"
                )
            target = check_int(
                self._field(r, i, "target"),
                f"rounds[{i}].item['target']",
                minimum=0,
                maximum=len(candidates) - 1,
            )
            clue = first_word(self._turn(r, i, speaker).text)
            listened = self._turn(r, i, other(speaker)).value
            banned = {first_word(c) for c in candidates} if self.forbid_candidates else set()
            valid = bool(clue) and clue not in banned
            if not isinstance(listened, (list, tuple)) or len(listened) != len(candidates):
                raise ValueError(
                    f"rounds[{i}]: the listener's value must hold one score per candidate ({len(candidates)})"
                )
            scores.append(referential_accuracy([listened], [target], [valid]))
            valid_clues.append(float(valid))
        return scores, {"accuracy": scores, "valid_clue": valid_clues}


class UltimatumGame(Game):
    """The ultimatum game: the proposer offers a share of a pot, the responder accepts or rejects.

    Rules: the proposer is player a in even rounds and player b in odd rounds. It completes
    ``proposer_template`` (field ``{pot}``; default: share 10 coins, "You offer your partner this many
    coins:"). Its offer is parsed by :func:`~icml_agents.games.metrics.parse_offer`: the first number
    (digits, or a word from zero to ten); none, a negative or fractional one or one above the pot is an
    unparseable offer and the round fails without asking the responder. Otherwise the responder completes
    ``responder_template`` (fields ``{pot}``, ``{offer}``), parsed by
    :func:`~icml_agents.games.metrics.parse_response` (the first accept/reject word decides; none: a fail).
    Scorer: 1 when the deal is made (offer parsed and accepted), else 0
    (:func:`~icml_agents.games.metrics.acceptance_rate`). Score: the share of deals made, in [0, 1].
    ``details`` also reports ``offer_parsed`` (share of parseable offers) and ``offer_share`` (the mean
    offer over the pot, over parsed offers; 0 in a round whose offer did not parse).
    """

    name = "ultimatum"
    kind = "cooperation"

    def __init__(
        self,
        pot: int = 10,
        proposer_template: str = (
            "You have {pot} coins to share with a partner. You offer your partner this many coins:"
        ),
        responder_template: str = (
            "Your partner has {pot} coins and offers you {offer} of them. Do you accept or reject? Answer:"
        ),
        word_tokens: int = 8,
    ) -> None:
        self.pot = check_int(pot, "pot", minimum=1, maximum=10**6)
        self.proposer_template = check_template(proposer_template, "proposer_template", [], ["pot"])
        self.responder_template = check_template(responder_template, "responder_template", ["offer"], ["pot"])
        self.word_tokens = _word_tokens(word_tokens)

    def _items(self, rng: np.random.Generator, n_rounds: int) -> list[dict[str, Any]]:
        return [{"pot": self.pot, "proposer": ROLES[i % 2]} for i in range(n_rounds)]

    def _play(self, players: dict[str, Player], items: list[dict[str, Any]], seed: int) -> list[Round]:
        proposers = [it["proposer"] for it in items]
        offer_prompts = [self.proposer_template.format(pot=it["pot"]) for it in items]
        offer_texts = self._ask(players, proposers, offer_prompts, seed, 0, self.word_tokens)
        offers = [parse_offer(t, it["pot"]) for t, it in zip(offer_texts, items, strict=True)]
        asked = [i for i, o in enumerate(offers) if o is not None]
        reply_prompts = [self.responder_template.format(pot=items[i]["pot"], offer=offers[i]) for i in asked]
        replies = self._ask(
            players, [other(proposers[i]) for i in asked], reply_prompts, seed, 1, self.word_tokens
        )
        answered = dict(zip(asked, zip(reply_prompts, replies, strict=True), strict=True))
        out = []
        for i, item in enumerate(items):
            turns = [Turn(proposers[i], offer_prompts[i], offer_texts[i], offers[i])]
            if i in answered:
                prompt, reply = answered[i]
                turns.append(Turn(other(proposers[i]), prompt, reply, parse_response(reply)))
            out.append(Round(i, item, tuple(turns)))
        return out

    def _evaluate(self, rounds: list[Round]) -> tuple[list[float], dict[str, list[float]]]:
        scores, parsed, shares = [], [], []
        for i, r in enumerate(rounds):
            proposer = self._role_field(r, i, "proposer")
            pot = check_int(self._field(r, i, "pot"), f"rounds[{i}].item['pot']", minimum=1, maximum=10**6)
            offer_text = self._turn(r, i, proposer).text
            replies = r.by_role(other(proposer))
            reply = replies[0].text if replies else None
            scores.append(acceptance_rate([offer_text], [reply], pot))
            offer = parse_offer(offer_text, pot)
            parsed.append(float(offer is not None))
            shares.append(0.0 if offer is None else offer / pot)
        return scores, {"deal": scores, "offer_parsed": parsed, "offer_share": shares}


class StoryGame(Game):
    """Shared mechanics of the two story games (not registered on its own).

    Rules: each round draws an opening (from ``openings``); the players alternate ``n_turns`` turns,
    player a first in even rounds and player b first in odd rounds. A turn completes ``template`` (field
    ``{story}``: the opening and the turns so far, each with its whitespace collapsed, joined by spaces;
    default: the story itself, a plain continuation) with the player's ``max_new_tokens``.
    """

    def __init__(
        self,
        openings: tuple[str, ...] | list[str] = OPENINGS,
        n_turns: int = 4,
        template: str = "{story}",
    ) -> None:
        self.openings = check_pool(openings, "openings")
        self.n_turns = check_int(n_turns, "n_turns", minimum=2, maximum=64)
        self.template = check_template(template, "template", ["story"])

    def _items(self, rng: np.random.Generator, n_rounds: int) -> list[dict[str, Any]]:
        return [
            {"opening": o, "first": ROLES[i % 2]} for i, o in enumerate(draw(rng, self.openings, n_rounds))
        ]

    def _play(self, players: dict[str, Player], items: list[dict[str, Any]], seed: int) -> list[Round]:
        turns: list[list[Turn]] = [[] for _ in items]
        for step in range(self.n_turns):
            roles = [it["first"] if step % 2 == 0 else other(it["first"]) for it in items]
            stories = [
                " ".join(" ".join([it["opening"], *(t.text for t in done)]).split())
                for it, done in zip(items, turns, strict=True)
            ]
            prompts = [self.template.format(story=story) for story in stories]
            texts = self._ask(players, roles, prompts, seed, step)
            for done, role, prompt, text in zip(turns, roles, prompts, texts, strict=True):
                done.append(Turn(role, prompt, text))
        return [Round(i, item, tuple(t)) for i, (item, t) in enumerate(zip(items, turns, strict=True))]


class StoryConsistencyGame(StoryGame):
    """Joint storytelling scored by how consistent the two players' contributions are.

    Rules as :class:`StoryGame`: an opening, then ``n_turns`` alternating continuations (default 4).
    Scorer (:func:`~icml_agents.games.metrics.consistency`): over every turn that follows a turn of the
    partner, the share of its content-word tokens (stop words removed, repeats counted) that already occur
    in the partner's earlier turns; the opening does not count as either player's. Score: the mean over
    rounds, in [0, 1]; a pair that keeps to each other's characters and objects scores high.
    """

    name = "story_consistency"
    kind = "cooperation"

    def _evaluate(self, rounds: list[Round]) -> tuple[list[float], dict[str, list[float]]]:
        scores = [consistency([(t.role, t.text) for t in r.turns]) for r in rounds]
        return scores, {"consistency": scores}
