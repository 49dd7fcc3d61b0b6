"""A fuzz test per public API of icml_agents.games (issue 39), checked with :mod:`icml_tools.fuzz` against the
bad-input contract of GUIDE "Bad input": a result its check accepts, or ValueError/TypeError naming the
argument."""

from __future__ import annotations

import math
import re
from itertools import combinations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from icml_agents import games
from icml_agents.backends import ScriptedBackend
from icml_agents.games import (
    BrainstormGame,
    BuildOnGame,
    Game,
    GameResult,
    NamingGame,
    PermutationResult,
    Player,
    ReferentialGame,
    RegressionResult,
    Round,
    StoryConsistencyGame,
    StoryNoveltyGame,
    Turn,
    UltimatumGame,
    WordChainGame,
    acceptance_rate,
    agreement,
    consistency,
    content_words,
    cooperation_score,
    distinct_n,
    distinct_share,
    embedding_spread,
    first_word,
    novel_share,
    novelty_score,
    pair_permutation_test,
    pair_regression,
    parse_offer,
    parse_response,
    play_all,
    play_game,
    rarity,
    referential_accuracy,
    self_bleu,
    sentence_bleu,
    spearman,
    split_ideas,
    trigram_embedding,
    unigram_counts,
    words,
)
from icml_tools.fuzz import Coverage, fuzz_call

FUZZ = Coverage()
FUZZ.exempt(Game, "the abstract base of the eight games; its play/rounds/evaluate are fuzzed through them")
FUZZ.exempt(GameResult, "a record Game.play builds (fuzzed through the games and the outcome scores)")
FUZZ.exempt(PermutationResult, "the record pair_permutation_test returns (fuzzed through it)")
FUZZ.exempt(RegressionResult, "the record pair_regression returns (fuzzed through it)")


def script(request):
    prompt = request.prompt
    if "offers you" in prompt:
        return " accept"
    if "coins" in prompt:
        return " 5"
    return " apple, river stone; blue fox"


def flat_logprobs(value):
    """A scripted listener: ``value`` per token (ScriptedBackend's tokens: runs of non-space characters)."""
    return lambda prompt, continuation: [value] * len(re.findall(r"\s*\S+|\s+", continuation))


BACKEND = ScriptedBackend(script, logprobs=flat_logprobs(-1.0))
A = Player("a", BACKEND)
B = Player("b", ScriptedBackend(script, logprobs=flat_logprobs(-2.0)), temperature=0.5)
TEXTS = ["the cat sat", "a dog ran home"]
MODELS = ["m1", "m2", "m3", "m4", "m5"]
PAIRS = list(combinations(MODELS, 2))
RNG = np.random.default_rng(0)
OUTCOME = {p: float(v) for p, v in zip(PAIRS, RNG.normal(size=len(PAIRS)), strict=True)}
SIMILARITY = {p: float(v) for p, v in zip(PAIRS, RNG.normal(size=len(PAIRS)), strict=True)}
GAP = {p: float(v) for p, v in zip(PAIRS, RNG.normal(size=len(PAIRS)), strict=True)}
RESULTS = {name: games.play_game(name, A, B, n_rounds=1) for name in ("naming", "brainstorm")}
NOT_TEXTS = st.sampled_from([None, "x", [None], [1], ("a", 2), {"a": 1}])


def scored(result):
    return isinstance(result, GameResult) and 0.0 <= result.score <= 1.0


def play_with(cls, **fixed):
    """A wrapper ``call(**options, n_rounds, seed)`` that builds the game and plays it."""

    def call(n_rounds, seed, **options):
        return cls(**options).play(A, B, n_rounds=n_rounds, seed=seed)

    call.__qualname__ = cls.__name__
    return call


GAME_SETTINGS = settings(max_examples=30, deadline=None)


# the games ----------------------------------------------------------------------------------------------
@FUZZ.covers(NamingGame)
@GAME_SETTINGS
@given(st.data())
def test_naming_game(data):
    fuzz_call(
        data,
        play_with(NamingGame),
        {
            "categories": ("fruit", "color"),
            "template": "Name a {category}:",
            "word_tokens": 4,
            "n_rounds": 2,
            "seed": 0,
        },
        check=scored,
    )


@FUZZ.covers(ReferentialGame)
@GAME_SETTINGS
@given(st.data())
def test_referential_game(data):
    fuzz_call(
        data,
        play_with(ReferentialGame),
        {
            "words": ("pear", "river", "dog", "moon", "cat"),
            "n_candidates": 4,
            "speaker_template": "Clue for {target}:",
            "listener_template": "Clue: {clue}. Word:",
            "forbid_candidates": True,
            "word_tokens": 4,
            "n_rounds": 2,
            "seed": 0,
        },
        # a valid clue ("apple") and equal listener scores: chance, 1 / n_candidates
        check=lambda r: scored(r) and r.score == 1 / len(r.rounds[0].item["candidates"]),
        related={"n_candidates": ["words"]},
    )


@FUZZ.covers(UltimatumGame)
@GAME_SETTINGS
@given(st.data())
def test_ultimatum_game(data):
    fuzz_call(
        data,
        play_with(UltimatumGame),
        {
            "pot": 10,
            "proposer_template": "Split {pot} coins. Offer:",
            "responder_template": "Partner offers you {offer} of {pot} coins. Answer:",
            "word_tokens": 4,
            "n_rounds": 2,
            "seed": 0,
        },
        check=scored,
    )


@FUZZ.covers(StoryConsistencyGame)
@GAME_SETTINGS
@given(st.data())
def test_story_consistency_game(data):
    fuzz_call(
        data,
        play_with(StoryConsistencyGame),
        {"openings": ("A fox ran.",), "n_turns": 3, "template": "{story}", "n_rounds": 2, "seed": 0},
        check=scored,
    )


@FUZZ.covers(BrainstormGame)
@GAME_SETTINGS
@given(st.data())
def test_brainstorm_game(data):
    fuzz_call(
        data,
        play_with(BrainstormGame),
        {
            "topics": ("uses for a brick",),
            "n_ideas": 3,
            "template": "Ideas for {topic}:",
            "embed": trigram_embedding,
            "n_rounds": 2,
            "seed": 0,
        },
        check=scored,
    )


@FUZZ.covers(StoryNoveltyGame)
@GAME_SETTINGS
@given(st.data())
def test_story_novelty_game(data):
    fuzz_call(
        data,
        play_with(StoryNoveltyGame),
        {
            "openings": ("A fox ran.",),
            "n_turns": 2,
            "template": "{story}",
            "max_n": 4,
            "n_rounds": 2,
            "seed": 0,
        },
        check=scored,
    )


@FUZZ.covers(WordChainGame)
@GAME_SETTINGS
@given(st.data())
def test_word_chain_game(data):
    fuzz_call(
        data,
        play_with(WordChainGame),
        {
            "start_words": ("river", "music"),
            "n_turns": 3,
            "template": "Words: {chain},",
            "reference": {"apple": 3.0, "river": 1.0},
            "word_tokens": 4,
            "n_rounds": 2,
            "seed": 0,
        },
        check=scored,
        strategies={
            "reference": st.sampled_from([None, {}, "x", {"a": -1}, {"a": math.nan}, {1: 2}, [("a", 1)]])
        },
    )


@FUZZ.covers(BuildOnGame)
@GAME_SETTINGS
@given(st.data())
def test_build_on_game(data):
    fuzz_call(
        data,
        play_with(BuildOnGame),
        {
            "projects": ("a garden",),
            "proposer_template": "Idea for {topic}:",
            "builder_template": "{idea} Better:",
            "n_rounds": 2,
            "seed": 0,
        },
        check=scored,
    )


# the harness ----------------------------------------------------------------------------------------------
@FUZZ.covers(Player)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_player(data):
    def call(name, backend, temperature, max_new_tokens, top_p, prompts, seed):
        player = Player(name, backend, temperature=temperature, max_new_tokens=max_new_tokens, top_p=top_p)
        return [*player.generate(prompts, seed=seed), str(player.logprobs(prompts, prompts))]

    call.__qualname__ = "Player"
    fuzz_call(
        data,
        call,
        {
            "name": "a",
            "backend": BACKEND,
            "temperature": 0.5,
            "max_new_tokens": 8,
            "top_p": 0.9,
            "prompts": ["Name a fruit:"],
            "seed": 3,
        },
        check=lambda out: all(o == " apple, river stone; blue fox" for o in out[:-1]),
    )


@FUZZ.covers(Turn)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_turn(data):
    fuzz_call(
        data,
        Turn,
        {"role": "a", "prompt": "p", "text": "t", "value": None},
        check=lambda t: t.role == "a",
        mutate=["role", "prompt", "text"],
    )


@FUZZ.covers(Round)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_round_and_evaluate(data):
    def call(index, item, turns):
        return NamingGame().evaluate([Round(index, item, turns)])

    call.__qualname__ = "Round"
    fuzz_call(
        data,
        call,
        {
            "index": 0,
            "item": {"category": "fruit"},
            "turns": (Turn("a", "p", "apple"), Turn("b", "p", "Apple!")),
        },
        check=lambda out: out[0] == 1.0,
        strategies={
            "turns": st.sampled_from([(), [Turn("a", "p", "x")], (Turn("a", "p", "x"),), ("t",), None])
        },
    )


@FUZZ.covers(play_game)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_play_game(data):
    fuzz_call(
        data,
        play_game,
        {"name": "naming", "player_a": A, "player_b": B, "n_rounds": 2, "seed": 1},
        check=scored,
        strategies={
            "player_a": st.sampled_from([None, BACKEND, "a"]),
            "player_b": st.sampled_from([None, BACKEND]),
        },
    )


@FUZZ.covers(play_all)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_play_all(data):
    fuzz_call(
        data,
        play_all,
        {"player_a": A, "player_b": B, "games": ["naming", "build_on"], "n_rounds": 1, "seed": 0},
        check=lambda out: set(out) == {"naming", "build_on"},
        strategies={
            "player_a": st.sampled_from([None, BACKEND]),
            "player_b": st.sampled_from([None, "b"]),
            "games": st.sampled_from([[], ["chess"], "naming", [NamingGame(), "naming"], [3]]),
        },
    )


@FUZZ.covers(cooperation_score)
@FUZZ.covers(novelty_score)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_outcome_scores(data):
    fn = data.draw(st.sampled_from([cooperation_score, novelty_score]))
    fuzz_call(
        data,
        fn,
        {"results": RESULTS},
        check=lambda s: s == (RESULTS["naming"] if fn is cooperation_score else RESULTS["brainstorm"]).score,
        strategies={"results": st.sampled_from([None, [], {}, [None], [RESULTS["naming"]] * 0, "x", [1]])},
    )


# the scorers ----------------------------------------------------------------------------------------------
@FUZZ.covers(words)
@FUZZ.covers(first_word)
@FUZZ.covers(split_ideas)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_text_splitters(data):
    fn = data.draw(st.sampled_from([words, first_word, split_ideas]))
    fuzz_call(
        data,
        fn,
        {"text": "Apple pie, plum"},
        check=lambda out: isinstance(out, str) or all(isinstance(w, str) for w in out),
    )


@FUZZ.covers(content_words)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_content_words(data):
    fuzz_call(
        data,
        content_words,
        {"text": "the red fox", "stopwords": frozenset({"the"})},
        check=lambda out: all(w.islower() and w != "the" for w in out),
    )


@FUZZ.covers(distinct_n)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_distinct_n(data):
    fuzz_call(
        data,
        distinct_n,
        {"texts": TEXTS, "n": 2},
        check=lambda v: 0.0 <= v <= 1.0,
        strategies={"texts": NOT_TEXTS},
    )


@FUZZ.covers(sentence_bleu)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_sentence_bleu(data):
    fuzz_call(
        data,
        sentence_bleu,
        {"candidate": "the cat sat", "references": TEXTS, "max_n": 2},
        check=lambda v: 0.0 <= v <= 1.0,
        strategies={"references": NOT_TEXTS},
    )


@FUZZ.covers(self_bleu)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_self_bleu(data):
    fuzz_call(
        data,
        self_bleu,
        {"texts": TEXTS, "others": ["the cat ran"], "max_n": 2},
        check=lambda v: 0.0 <= v <= 1.0,
        strategies={"texts": NOT_TEXTS, "others": NOT_TEXTS},
    )


@FUZZ.covers(trigram_embedding)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_trigram_embedding(data):
    fuzz_call(
        data,
        trigram_embedding,
        {"texts": TEXTS},
        check=lambda x: x.ndim == 2 and (x >= 0).all(),
        strategies={"texts": NOT_TEXTS},
    )


@FUZZ.covers(embedding_spread)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_embedding_spread(data):
    fuzz_call(
        data,
        embedding_spread,
        {"vectors": np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])},
        check=lambda v: 0.0 <= v <= 2.0,
    )


@FUZZ.covers(agreement)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_agreement(data):
    fuzz_call(
        data,
        agreement,
        {"answers_a": ["Apple", "pear"], "answers_b": ["apple!", "plum"]},
        check=lambda v: 0.0 <= v <= 1.0,
        related={"answers_a": ["answers_b"]},
    )


@FUZZ.covers(referential_accuracy)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_referential_accuracy(data):
    fuzz_call(
        data,
        referential_accuracy,
        {"candidate_scores": [[0.0, -1.0], [-1.0, -math.inf]], "targets": [0, 1], "valid": [True, True]},
        check=lambda v: 0.0 <= v <= 1.0,
        related={"candidate_scores": ["targets", "valid"], "targets": ["candidate_scores"]},
        strategies={"valid": st.sampled_from([[True], [1, 0], "x", [True, None]])},
    )


@FUZZ.covers(parse_offer)
@FUZZ.covers(parse_response)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_parsers(data):
    if data.draw(st.booleans()):
        fuzz_call(
            data, parse_offer, {"text": "I offer 4", "pot": 10}, check=lambda v: v in (None, *range(11))
        )
    else:
        fuzz_call(data, parse_response, {"text": "I accept"}, check=lambda v: v in (None, "accept", "reject"))


@FUZZ.covers(acceptance_rate)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_acceptance_rate(data):
    fuzz_call(
        data,
        acceptance_rate,
        {"offers": ["4", "x"], "responses": ["accept", None], "pot": 10},
        check=lambda v: 0.0 <= v <= 1.0,
        related={"offers": ["responses"]},
    )


@FUZZ.covers(consistency)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_consistency(data):
    fuzz_call(
        data,
        consistency,
        {"turns": [("a", "red fox"), ("b", "the fox slept")]},
        check=lambda v: v == 0.5,
        strategies={"turns": st.sampled_from([None, "x", [("a",)], [("a", 1)], [(1, "x")], ["ab"]])},
    )


@FUZZ.covers(novel_share)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_novel_share(data):
    fuzz_call(
        data,
        novel_share,
        {"proposal": "a red ball", "response": "a blue ball"},
        check=lambda v: 0.0 <= v <= 1.0,
    )


@FUZZ.covers(distinct_share)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_distinct_share(data):
    fuzz_call(
        data,
        distinct_share,
        {"chain": ["river", "water", "fish"], "exclude": ["river"]},
        check=lambda v: 0.0 <= v <= 1.0,
        strategies={"chain": NOT_TEXTS, "exclude": NOT_TEXTS},
    )


@FUZZ.covers(unigram_counts)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_unigram_counts(data):
    fuzz_call(
        data, unigram_counts, {"texts": TEXTS}, check=lambda c: c["the"] == 1, strategies={"texts": NOT_TEXTS}
    )


@FUZZ.covers(rarity)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_rarity(data):
    fuzz_call(
        data,
        rarity,
        {"chain": ["cat", "emu"], "reference": {"cat": 3, "dog": 1}},
        check=lambda v: 0.0 <= v <= 1.0,
        strategies={
            "chain": NOT_TEXTS,
            "reference": st.sampled_from(
                [
                    None,
                    [("cat", 1)],
                    {"cat": -1},
                    {"cat": math.inf},
                    {"cat": "3"},
                    {3: 1},
                    {"a": 1e308, "b": 1e308},
                ]
            ),
        },
    )


# the analysis ---------------------------------------------------------------------------------------------
@FUZZ.covers(spearman)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_spearman(data):
    fuzz_call(
        data,
        spearman,
        {"x": np.array([1.0, 2.0, 2.0, 3.0]), "y": np.array([1.0, 3.0, 2.0, 4.0])},
        check=lambda v: -1.0 <= v <= 1.0,
        related={"x": ["y"]},
    )


PAIR_DICTS = st.sampled_from(
    [
        None,
        {},
        [1.0, 2.0],
        {("m2", "m1"): 1.0},
        {("m1", "m2"): 1.0},
        {**OUTCOME, ("m1", "m9"): 0.0},
        {p: math.nan for p in PAIRS},
        {p: "1" for p in PAIRS},
        {p: 1.0 for p in PAIRS},
        {(1, 2): 1.0},
        {"m1": 1.0},
    ]
)


@FUZZ.covers(pair_permutation_test)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_pair_permutation_test(data):
    fuzz_call(
        data,
        pair_permutation_test,
        {
            "pair_values": OUTCOME,
            "pair_similarity": SIMILARITY,
            "models_of_pair": None,
            "n_permutations": 50,
            "alternative": "greater",
            "seed": 0,
        },
        check=lambda r: 0.0 < r.p_value <= 1.0 and len(r.null) == r.n_permutations and r.n_models == 5,
        strategies={
            "pair_values": PAIR_DICTS,
            "pair_similarity": PAIR_DICTS,
            "models_of_pair": st.sampled_from(
                [[], PAIRS[:3], [("m2", "m1")], PAIRS + PAIRS[:1], "m1", [None]]
            ),
        },
        related={"pair_values": ["pair_similarity"], "models_of_pair": ["pair_values", "pair_similarity"]},
    )


@FUZZ.covers(pair_regression)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_pair_regression(data):
    fuzz_call(
        data,
        pair_regression,
        {
            "outcome": OUTCOME,
            "similarity": SIMILARITY,
            "controls": {"gap": GAP},
            "models_of_pair": None,
            "n_permutations": 50,
            "alternative": "two-sided",
            "seed": 0,
        },
        check=lambda r: r.names[:2] == ("intercept", "similarity") and 0.0 < r.p_permutation <= 1.0,
        strategies={
            "outcome": PAIR_DICTS,
            "similarity": PAIR_DICTS,
            "controls": st.sampled_from(
                [
                    None,
                    {},
                    {"gap": SIMILARITY},
                    {"intercept": GAP},
                    {"": GAP},
                    {"gap": {}},
                    {"gap": [1.0]},
                    {"gap": GAP, "g2": GAP},
                    {"gap": {p: 0.0 for p in PAIRS}},
                    [GAP],
                ]
            ),
            "models_of_pair": st.sampled_from([[], PAIRS[:3], PAIRS[::-1], "m1", [None]]),
        },
        related={
            "outcome": ["similarity", "controls"],
            "similarity": ["outcome", "controls"],
            "models_of_pair": ["outcome", "similarity", "controls"],
        },
    )


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(games)
