"""LLM-pair games (issue 39): the eight games are deterministic given the seed and batch their prompts, each
scorer matches a hand count, identical players coordinate and disjoint players innovate, all eight games run
on a tiny random Hugging Face model, the model-label permutation test holds its level on a planted null and
detects a planted dependence, Spearman and the dyadic regression match references, bad input."""

from __future__ import annotations

import math
import random
import warnings
import zlib
from itertools import combinations

import numpy as np
import pytest

from icml_agents.backends import ScriptedBackend
from icml_agents.games import (
    GAMES,
    BrainstormGame,
    NamingGame,
    Player,
    ReferentialGame,
    Round,
    StoryConsistencyGame,
    StoryNoveltyGame,
    Turn,
    UltimatumGame,
    WordChainGame,
    acceptance_rate,
    agreement,
    consistency,
    cooperation_score,
    distinct_n,
    distinct_share,
    embedding_spread,
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
)
from icml_agents.games.analysis import average_ranks

POOL = ["apple", "river", "stone", "blue", "fox", "key", "dog", "moon", "5", "accept", "reject", "3"]


def seeded_script(request):
    """A sampling 'model': four words drawn with the request's own seed."""
    rng = random.Random(request.seed)
    return " " + " ".join(rng.choice(POOL) for _ in range(4))


def crc_logprobs(prompt, continuation):
    return [-(zlib.crc32((prompt + continuation).encode()) % 100) / 10]


def sampler(name):
    return Player(name, ScriptedBackend(seeded_script, logprobs=crc_logprobs), temperature=0.8)


def vocab_player(name, vocab):
    """Answers every prompt with three words of its own vocabulary, chosen by the prompt."""

    def script(request):
        k = zlib.crc32(request.prompt.encode())
        return " " + ", ".join(vocab[(k + j) % len(vocab)] for j in range(3))

    return Player(name, ScriptedBackend(script, logprobs=lambda p, c: [0.0]))


# the harness --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(GAMES))
def test_every_game_is_deterministic_given_the_seed(name):
    first = play_game(name, sampler("a"), sampler("b"), n_rounds=3, seed=7)
    again = play_game(name, sampler("a"), sampler("b"), n_rounds=3, seed=7)
    assert first.to_json() == again.to_json()
    assert len(first.rounds) == 3 and first.game == name and first.kind == GAMES[name].kind
    lo, hi = GAMES[name].score_range
    assert lo <= first.score <= hi and all(lo <= s <= hi for s in first.round_scores)
    assert first.score == pytest.approx(np.mean(first.round_scores))
    other = play_game(name, sampler("a"), sampler("b"), n_rounds=3, seed=8)
    assert other.to_json() != first.to_json()
    # the score is a pure function of the transcript
    assert GAMES[name]().evaluate(list(first.rounds)) == (first.score, first.round_scores, first.details)


def test_prompts_are_batched_per_player_and_step_and_every_call_is_seeded():
    a, b = sampler("a"), sampler("b")
    NamingGame().play(a, b, n_rounds=5, seed=3)
    for player in (a, b):
        assert player.backend.usage.calls == 1 and player.backend.usage.requests == 5
        assert all(r.seed is not None and r.temperature == 0.8 for r in player.backend.calls)
    # two copies of one model draw independent samples: the two roles get different seeds
    assert {r.seed for r in a.backend.calls}.isdisjoint({r.seed for r in b.backend.calls})
    a, b = sampler("a"), sampler("b")
    StoryConsistencyGame(n_turns=4).play(a, b, n_rounds=4, seed=0)
    assert a.backend.usage.calls == 4 and b.backend.usage.calls == 4  # one call per step, all rounds
    a, b = sampler("a"), sampler("b")
    ReferentialGame().play(a, b, n_rounds=4, seed=0)
    assert a.backend.usage.calls == 2 and len(a.backend.logprob_calls) == 2 * 4  # a listens in 2 rounds


def test_rounds_are_drawn_from_the_seed_and_use_the_pool_before_repeating():
    game = NamingGame(categories=["fruit", "color", "animal"])
    items = game.rounds(seed=4, n_rounds=6)
    assert items == game.rounds(seed=4, n_rounds=6)
    assert sorted(i["category"] for i in items[:3]) == ["animal", "color", "fruit"]
    assert sorted(i["category"] for i in items[3:]) == ["animal", "color", "fruit"]
    ref = ReferentialGame().rounds(seed=0, n_rounds=8)
    assert all(len(set(i["candidates"])) == 4 and 0 <= i["target"] < 4 for i in ref)
    assert [i["speaker"] for i in ref] == ["a", "b"] * 4


def test_identical_players_coordinate_and_disjoint_players_innovate():
    fruit = ["apple", "pear", "plum", "fig", "lime", "kiwi", "date"]
    beasts = ["zebra", "otter", "lynx", "heron", "yak", "newt", "moose"]
    same = NamingGame().play(vocab_player("x", fruit), vocab_player("y", fruit), n_rounds=6)
    apart = NamingGame().play(vocab_player("x", fruit), vocab_player("z", beasts), n_rounds=6)
    assert same.score == 1.0 and apart.score == 0.0
    same_b = BrainstormGame().play(vocab_player("x", fruit), vocab_player("y", fruit), n_rounds=6)
    apart_b = BrainstormGame().play(vocab_player("x", fruit), vocab_player("z", beasts), n_rounds=6)
    assert apart_b.score > same_b.score
    assert same_b.details["distinct_1"] == 0.5 and apart_b.details["distinct_1"] == 1.0


def test_outcomes_average_the_games_of_each_kind():
    results = play_all(sampler("a"), sampler("b"), n_rounds=2, seed=1)
    assert set(results) == set(GAMES)
    coop = [r.score for r in results.values() if r.kind == "cooperation"]
    nov = [r.score for r in results.values() if r.kind == "novelty"]
    assert len(coop) == len(nov) == 4
    assert cooperation_score(results) == pytest.approx(np.mean(coop))
    assert novelty_score(list(results.values())) == pytest.approx(np.mean(nov))
    with pytest.raises(ValueError, match="results must hold at least one cooperation"):
        cooperation_score([results["brainstorm"]])


# scorers against hand counts ----------------------------------------------------------------------------
def test_distinct_n_counts_ngrams_within_texts():
    texts = ["The cat sat.", "the cat ran"]
    assert distinct_n(texts, 1) == pytest.approx(4 / 6)  # the, cat, sat, ran of 6
    assert distinct_n(texts, 2) == pytest.approx(3 / 4)  # (the cat) twice, (cat sat), (cat ran)
    assert distinct_n(["a", "b"], 2) == 0.0  # no bigram within a text


def test_bleu_and_self_bleu_match_hand_counts():
    # p1 = 5/6 (the x2, cat, on, mat), p2 = (3 + 1) / (5 + 1) (add-one), equal lengths: no brevity penalty
    got = sentence_bleu("the cat sat on the mat", ["the cat is on the mat"], max_n=2)
    assert got == pytest.approx(math.sqrt(5 / 6 * 4 / 6))
    assert sentence_bleu("a", ["a b c d"], max_n=1) == pytest.approx(math.exp(1 - 4))  # brevity penalty
    assert sentence_bleu("x y", ["a b"], max_n=2) == 0.0  # no word in common
    assert sentence_bleu("a b", ["a b c", "a"], max_n=1) == pytest.approx(1.0)  # closest ref: length 1 < 2
    assert self_bleu(["a b", "a c"], max_n=1) == pytest.approx(0.5)
    # across players: "a b" vs both of b's turns (1.0), b's "a b" vs a (1.0), b's "c d" vs a (0.0)
    assert self_bleu(["a b"], ["a b", "c d"], max_n=1) == pytest.approx(2 / 3)
    assert self_bleu(["a b", "..."], ["a b"], max_n=1) == pytest.approx(
        1.0
    )  # a turn without words is skipped


def test_trigram_embedding_and_spread():
    x = trigram_embedding(["ab", "AB ", "cd", ""])
    assert x.shape == (4, 4)  # columns " ab", " cd", "ab ", "cd "
    np.testing.assert_array_equal(x, [[1, 0, 1, 0], [1, 0, 1, 0], [0, 1, 0, 1], [0, 0, 0, 0]])
    assert embedding_spread(x[:2]) == pytest.approx(0.0, abs=1e-12)
    assert embedding_spread(x) == pytest.approx(2 / 3)  # zero row left out; distances 0, 1, 1
    v = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    assert embedding_spread(v) == pytest.approx((1 + 2 * (1 - 1 / math.sqrt(2))) / 3)


def test_agreement_and_idea_splitting():
    a = ["Apple!", " banana", "", "Cherry pie"]
    b = ["apple", "Banana split", "", "plum"]
    assert agreement(a, b) == 0.5  # an empty answer never agrees
    assert split_ideas("1. a wall\n- a doorstop, a  weight; b) paint\n\n") == [
        "a wall",
        "a doorstop",
        "a weight",
        "paint",
    ]


def test_referential_accuracy_by_hand_and_with_scripted_logprobs():
    scores = [[0, -1, -2, -3], [0, 0, -1, -1], [-1, 0, -2, -3], [0, -1, -1, -1]]
    assert referential_accuracy(scores, [0, 1, 0, 0]) == pytest.approx((1 + 0.5 + 0 + 1) / 4)
    assert referential_accuracy(scores, [0, 1, 0, 0], [True, True, True, False]) == pytest.approx(1.5 / 4)
    clue_of = {w: w[::-1] + "x" for w in ReferentialGame().words}  # "apple" -> "elppax"

    def speaker(request):
        target = request.prompt.rsplit("clue for ", 1)[1].rstrip(":")
        return " " + clue_of[target]

    def knowing(prompt, continuation):  # likes the candidate whose clue is in the prompt
        return [0.0 if f"Clue: {clue_of[continuation.strip()]}." in prompt else -5.0]

    def player(name, logprobs):
        return Player(name, ScriptedBackend(speaker, logprobs=logprobs))

    good = ReferentialGame().play(player("a", knowing), player("b", knowing), n_rounds=8)
    assert good.score == 1.0 and good.details["valid_clue"] == 1.0
    deaf = ReferentialGame().play(
        player("a", lambda p, c: [-1.0]), player("b", lambda p, c: [-1.0]), n_rounds=8
    )
    assert deaf.score == pytest.approx(0.25)  # all candidates tie: chance
    copier = Player(
        "c", ScriptedBackend(lambda r: " " + str(r.prompt).rsplit("clue for ", 1)[1], logprobs=knowing)
    )
    cheat = ReferentialGame().play(copier, copier, n_rounds=4)
    assert cheat.score == 0.0 and cheat.details["valid_clue"] == 0.0  # the target word is not a clue


def test_ultimatum_parsing_and_acceptance():
    assert [
        parse_offer(t) for t in [" 4 coins", "I offer five.", "zero", "10", "11", "3.5", "-2", "none"]
    ] == [
        4,
        5,
        0,
        10,
        None,
        None,
        None,
        None,
    ]
    assert parse_offer("someone gets 7", pot=10) == 7  # "one" inside a word is not a number
    assert [
        parse_response(t) for t in ["Accept.", "I reject it", "I won't accept", "not sure", "Yes, deal", "No"]
    ] == [
        "accept",
        "reject",
        "reject",
        None,
        "accept",
        "reject",
    ]
    assert acceptance_rate(["5", "x", "3", "4"], ["accept", None, "reject", "sure"]) == 0.25

    def script(request):
        if "offers you" in request.prompt:
            return " accept" if "offers you 4" in request.prompt else " reject"
        return " none" if request.prompt.startswith("You have 9") else " 4"

    a, b = Player("a", ScriptedBackend(script)), Player("b", ScriptedBackend(script))
    result = UltimatumGame().play(a, b, n_rounds=4)
    assert result.score == 1.0 and result.details["offer_share"] == pytest.approx(0.4)
    backend_a, backend_b = ScriptedBackend(script), ScriptedBackend(script)
    failed = UltimatumGame(pot=9).play(Player("a", backend_a), Player("b", backend_b), n_rounds=4)
    assert failed.score == 0.0 and failed.details["offer_parsed"] == 0.0
    assert all(len(r.turns) == 1 for r in failed.rounds)  # no responder is asked after an unparseable offer
    assert len(backend_a.calls) + len(backend_b.calls) == 4


def test_consistency_novel_share_distinct_share_and_rarity():
    turns = [
        ("a", "The fox found a red key."),
        ("b", "The fox hid the key in a box."),
        ("a", "A box was red."),
    ]
    # b: fox, hid, key, box -> fox, key seen in a's turn (2/4); a: box, red -> box seen in b's turn (1/2)
    assert consistency(turns) == pytest.approx(3 / 6)
    assert consistency([("a", "x y"), ("a", "x y")]) == 0.0  # no turn follows the partner
    assert novel_share("a red ball", "a blue ball and a red kite") == pytest.approx(2 / 4)
    assert distinct_share(["river", "water", "water", "", "River"], ["river"]) == pytest.approx(1 / 5)
    reference = {"cat": 3, "dog": 1}  # N = 4, V = 2: p(w) = (count + 1) / 7
    expected = [math.log(7 / 4) / math.log(7), math.log(7 / 2) / math.log(7), 1.0]
    assert rarity(["cat", "Dog!", "emu", ""], reference) == pytest.approx(np.mean(expected))
    assert unigram_counts(["the cat", "The dog"]) == {"the": 2, "cat": 1, "dog": 1}


def test_word_chain_and_story_novelty_scores_from_transcripts():
    rnd = Round(
        0,
        {"start": "river", "first": "a"},
        (
            Turn("a", "p", " water"),
            Turn("b", "p", " river"),
            Turn("a", "p", " water"),
            Turn("b", "p", " fish"),
        ),
    )
    score, _, details = WordChainGame(n_turns=4).evaluate([rnd])
    # distinct: {water, fish} of 4 turns; rarity under the chain's own counts (water 2, river 1, fish 1)
    rare = [-math.log((c + 1) / 8) / math.log(8) for c in (2, 1, 2, 1)]
    assert details["distinct"] == 0.5 and details["rarity"] == pytest.approx(np.mean(rare))
    assert score == pytest.approx((0.5 + np.mean(rare)) / 2)
    story = Round(
        0,
        {"opening": "o", "first": "a"},
        (Turn("a", "p", "a b"), Turn("b", "p", "a b"), Turn("a", "p", "c d")),
    )
    score, _, details = StoryNoveltyGame(max_n=1).evaluate([story])
    assert details["distinct_2"] == pytest.approx(2 / 3) and details["self_bleu"] == pytest.approx(2 / 3)
    assert score == pytest.approx((2 / 3 + 1 / 3) / 2)


# a tiny random Hugging Face model ----------------------------------------------------------------------
def test_all_eight_games_run_on_a_tiny_hf_model(tiny_backend):
    greedy = Player("greedy", tiny_backend, max_new_tokens=4)
    sampled = Player("sampled", tiny_backend, temperature=1.0, max_new_tokens=4)
    results = play_all(greedy, sampled, n_rounds=2, seed=0)
    again = play_all(greedy, sampled, n_rounds=2, seed=0)
    assert set(results) == set(GAMES)
    for name, result in results.items():
        assert len(result.rounds) == 2
        assert 0.0 <= result.score <= 1.0, name
        assert result.to_json() == again[name].to_json(), name
    listener = results["referential"].rounds[0].turns[1].value
    assert len(listener) == 4 and all(v < 0 for v in listener)  # real log-likelihoods
    assert 0.0 <= cooperation_score(results) <= 1.0 and 0.0 <= novelty_score(results) <= 1.0


# analysis -----------------------------------------------------------------------------------------------
def zoo(rng, m=8, effect=0.0):
    """Pairs of m models; outcome and similarity each with model effects (pairs sharing a model are
    correlated) and independent of each other unless ``effect`` != 0."""
    u, v = rng.normal(size=m), rng.normal(size=m)
    pairs = list(combinations(range(m), 2))
    sim = {(i, j): v[i] + v[j] + 0.5 * rng.normal() for i, j in pairs}
    out = {(i, j): u[i] + u[j] + 0.5 * rng.normal() + effect * sim[(i, j)] for i, j in pairs}
    return out, sim


def test_spearman_with_ties_matches_a_hand_count():
    # ranks of x: 1, 2.5, 2.5, 4; rho = 4.5 / sqrt(4.5 * 5)
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(3 / math.sqrt(10))
    assert spearman(np.array([3.0, 1.0, 2.0]), [30, 10, 20]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)


def test_permutation_null_equals_a_brute_force_relabelling():
    rng = np.random.default_rng(0)
    out, sim = zoo(rng, m=6)
    result = pair_permutation_test(out, sim, n_permutations=50, seed=11)
    perms = np.argsort(np.random.default_rng(11).random((50, 6)), axis=1)
    pairs = list(out)
    s = np.zeros((6, 6))
    for (i, j), val in sim.items():
        s[i, j] = s[j, i] = val
    brute = [spearman([out[p] for p in pairs], [s[pi[i], pi[j]] for i, j in pairs]) for pi in perms]
    np.testing.assert_allclose(result.null, brute, atol=1e-12)
    assert result.statistic == pytest.approx(spearman(list(out.values()), list(sim.values())))
    extreme = (np.abs(result.null) >= abs(result.statistic) - 1e-9).sum()
    assert result.p_value == pytest.approx((1 + extreme) / 51)


def test_permutation_test_holds_its_level_on_a_planted_null_and_detects_a_dependence():
    rng = np.random.default_rng(2026)
    repeats, alpha = 200, 0.05
    rejected = 0
    for k in range(repeats):
        out, sim = zoo(rng)
        rejected += pair_permutation_test(out, sim, n_permutations=99, seed=k).p_value <= alpha
    assert rejected / repeats <= alpha + 2 * math.sqrt(alpha * (1 - alpha) / repeats)
    # the planted null has teeth: shuffling the pairs (ignoring shared models) rejects far too often
    naive = 0
    for _ in range(100):
        out, sim = zoo(rng)
        ry, rs = average_ranks(np.array(list(out.values()))), average_ranks(np.array(list(sim.values())))
        null = [np.corrcoef(ry, rng.permutation(rs))[0, 1] for _ in range(99)]
        observed = np.corrcoef(ry, rs)[0, 1]
        naive += (1 + sum(abs(v) >= abs(observed) - 1e-12 for v in null)) / 100 <= alpha
    assert naive / 100 > 0.15
    detected = 0
    for k in range(50):
        out, sim = zoo(rng, effect=2.0)
        detected += pair_permutation_test(out, sim, n_permutations=99, seed=k).p_value <= alpha
    assert detected / 50 >= 0.9
    out, sim = zoo(rng, effect=2.0)
    assert pair_permutation_test(out, sim, n_permutations=99, alternative="greater").p_value <= alpha
    assert pair_permutation_test(out, sim, n_permutations=99, alternative="less").p_value > 0.5


def test_lists_with_models_of_pair_equal_dicts():
    out, sim = zoo(np.random.default_rng(1), m=5)
    pairs = list(out)[::-1]
    by_list = pair_permutation_test(
        [out[p] for p in pairs], [sim[p] for p in pairs], models_of_pair=pairs, n_permutations=30
    )
    by_dict = pair_permutation_test(out, sim, n_permutations=30)
    assert by_list.statistic == pytest.approx(by_dict.statistic) and by_list.n_models == 5


def _regression_data(seed, m=12, beta_sim=2.0, model_effect=0.1, noise=0.02):
    """Pairs of m models: similarity correlated with the performance gap, a same-family dummy, and an
    outcome with model effects (pairs sharing a model are correlated) and the planted coefficients
    0.5 + beta_sim * sim - 1.5 * gap + 0.7 * same."""
    rng = np.random.default_rng(seed)
    perf, fam, v, u = rng.normal(size=m), rng.integers(0, 3, m), rng.normal(size=m), rng.normal(size=m)
    pairs = list(combinations([f"m{k:02d}" for k in range(m)], 2))
    idx = [(int(a[1:]), int(b[1:])) for a, b in pairs]
    gap = np.array([abs(perf[i] - perf[j]) for i, j in idx])
    same = np.array([float(fam[i] == fam[j]) for i, j in idx])
    sim = np.array([v[i] + v[j] + 0.8 * gap[k] + 0.3 * rng.normal() for k, (i, j) in enumerate(idx)])
    dyadic = np.array([model_effect * (u[i] + u[j]) for i, j in idx]) + noise * rng.normal(size=len(idx))
    y = 0.5 + beta_sim * sim - 1.5 * gap + 0.7 * same + dyadic
    return pairs, idx, y, sim, {"gap": gap, "same_family": same}


def _brute_force_dyadic_cov(x, e, idx, m):
    """The dyadic-robust covariance by its definition: a double loop over the pairs sharing a model."""
    meat = np.zeros((x.shape[1], x.shape[1]))
    for d, (a, b) in enumerate(idx):
        for d2, (c, f) in enumerate(idx):
            if {a, b} & {c, f}:
                meat += np.outer(x[d] * e[d], x[d2] * e[d2])
    bread = np.linalg.inv(x.T @ x)
    n, k = x.shape
    return m / (m - 1) * (n - 1) / (n - k) * bread @ meat @ bread


def test_pair_regression_recovers_planted_coefficients_and_its_dyadic_errors_match_brute_force():
    pairs, idx, y, sim, controls = _regression_data(6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # this draw's covariance estimate is PSD: no repair
        res = pair_regression(y, sim, controls, models_of_pair=pairs, n_permutations=199)
    assert res.names == ("intercept", "similarity", "gap", "same_family")
    np.testing.assert_allclose(res.coef, [0.5, 2.0, -1.5, 0.7], atol=0.1)
    assert res.p_permutation == pytest.approx(1 / 200) and res.r2 > 0.99
    x = np.column_stack([np.ones(len(y)), sim, controls["gap"], controls["same_family"]])
    beta = np.linalg.lstsq(x, y, rcond=None)[0]
    e = y - x @ beta
    np.testing.assert_allclose(res.coef, beta, rtol=1e-8)
    np.testing.assert_allclose(res.se, np.sqrt(np.diag(_brute_force_dyadic_cov(x, e, idx, 12))), rtol=1e-6)
    n, k = x.shape
    classical = np.sqrt(e @ e / (n - k) * np.diag(np.linalg.inv(x.T @ x)))
    np.testing.assert_allclose(res.se_classical, classical, rtol=1e-8)
    assert "similarity" in res.summary()


def test_pair_regression_with_three_models_has_no_dyadic_errors():
    """With 3 models each pair shares a model with both others, so the dyadic meat is (X'e)(X'e)^T = 0 by
    the normal equations: the se was rounding noise (1.7e-08 and 3.5e-08 here, seed 1, silently) or 0 with
    a warning that the fit was exact, and p_dyadic was 0 for an outcome drawn independently of similarity
    (statsmodels' classical p at seed 1: intercept 0.59, slope 0.56). Now NaN with a warning; the rest is unchanged."""
    pairs = list(combinations(["a", "b", "c"], 2))
    for seed in range(4):
        rng = np.random.default_rng(seed)
        s, y = rng.normal(size=3), rng.normal(size=3)
        with pytest.warns(RuntimeWarning, match="3 models"):
            res = pair_regression(y.tolist(), s.tolist(), models_of_pair=pairs, n_permutations=9)
        assert np.isnan(res.se).all() and np.isnan(res.t).all() and np.isnan(res.p_dyadic).all()
        x = np.column_stack([np.ones(3), s])
        beta = np.linalg.lstsq(x, y, rcond=None)[0]
        e = y - x @ beta
        np.testing.assert_allclose(res.coef, beta, rtol=1e-8)
        np.testing.assert_allclose(
            res.se_classical, np.sqrt(e @ e * np.diag(np.linalg.inv(x.T @ x))), rtol=1e-8
        )
        assert 0.0 < res.p_permutation <= 1.0 and "nan" in res.summary()


def test_a_covariance_that_is_not_psd_is_repaired_with_a_warning():
    # the estimate is often indefinite with 12 models (here: seed 0); the repair zeroes the negative
    # eigenvalues with the columns scaled to max |x| = 1 (so it does not depend on the units)
    pairs, idx, y, sim, controls = _regression_data(0)
    with pytest.warns(RuntimeWarning, match="not positive semi-definite"):
        res = pair_regression(y, sim, controls, models_of_pair=pairs, n_permutations=9)
    x = np.column_stack([np.ones(len(y)), sim, controls["gap"], controls["same_family"]])
    e = y - x @ np.linalg.lstsq(x, y, rcond=None)[0]
    cov = _brute_force_dyadic_cov(x, e, idx, 12)
    assert np.linalg.eigvalsh(cov).min() < 0
    scale = np.abs(x).max(axis=0) / np.abs(y).max()
    eigval, eigvec = np.linalg.eigh(cov * np.outer(scale, scale))
    repaired = (eigvec * np.clip(eigval, 0, None)) @ eigvec.T / np.outer(scale, scale)
    np.testing.assert_allclose(res.se, np.sqrt(np.diag(repaired)), rtol=1e-6)
    with pytest.warns(RuntimeWarning, match="not positive semi-definite"):
        res_units = pair_regression(1000 * y, sim, controls, models_of_pair=pairs, n_permutations=9)
    np.testing.assert_allclose(res_units.se, 1000 * res.se, rtol=1e-9)


def test_an_offset_of_a_column_moves_only_the_intercept_of_pair_regression():
    # the normal equations of the uncentred columns moved the slopes by up to 7e-4 (relative) and their
    # standard errors by 7% at an offset of 1e6, with a spurious repair of the covariance; the reference
    # is the fit of the same (rounded) values less the offset
    pairs, _, y, sim, controls = _regression_data(6)
    offset = 1e6
    for column, position in (("similarity", 1), ("gap", 2)):
        columns = {"similarity": sim, **controls}
        shifted = {**columns, column: columns[column] + offset}
        unshifted = {**columns, column: shifted[column] - offset}
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # this draw's covariance estimate is PSD: no repair
            res, ref = (
                pair_regression(y, c.pop("similarity"), c, pairs, n_permutations=99)
                for c in (shifted, unshifted)
            )
        for field in ("coef", "se", "se_classical", "t"):
            np.testing.assert_allclose(
                getattr(res, field)[1:], getattr(ref, field)[1:], rtol=1e-12, err_msg=field
            )
        assert res.coef[0] == pytest.approx(ref.coef[0] - offset * ref.coef[position], rel=1e-13)
        assert res.p_permutation == ref.p_permutation and res.r2 == pytest.approx(ref.r2, rel=1e-14)


@pytest.mark.filterwarnings("ignore:the dyadic-robust covariance is not positive semi-definite")
def test_pair_regression_permutation_p_holds_its_level_with_a_correlated_control():
    repeats, alpha = 100, 0.05
    rejected = 0
    for rep in range(repeats):
        pairs, _, y, sim, controls = _regression_data(
            100 + rep, m=8, beta_sim=0.0, model_effect=0.5, noise=0.5
        )
        rejected += (
            pair_regression(y, sim, controls, pairs, n_permutations=99, seed=rep).p_permutation <= alpha
        )
    assert rejected / repeats <= alpha + 2 * math.sqrt(alpha * (1 - alpha) / repeats)


# bad input ----------------------------------------------------------------------------------------------
def test_bad_input_is_refused_naming_the_argument():
    a, b = sampler("a"), sampler("b")
    with pytest.raises(ValueError, match=r"'chess'.*brainstorm, build_on, naming, referential"):
        play_game("chess", a, b)
    with pytest.raises(ValueError, match="n_rounds"):
        play_game("naming", a, b, n_rounds=0)
    with pytest.raises(ValueError, match="games"):
        play_all(a, b, games=["naming", "chess"])
    with pytest.raises(TypeError, match="player_b"):
        NamingGame().play(a, "b")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="answers_b"):
        agreement(["x", "y"], ["x"])
    with pytest.raises(ValueError, match="y must hold"):
        spearman([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="x is constant"):
        spearman([1, 1, 1], [1, 2, 3])
    out, sim = zoo(np.random.default_rng(0), m=5)
    with pytest.raises(ValueError, match="pair_similarity must hold the same pairs"):
        pair_permutation_test(out, {**dict(list(sim.items())[1:]), (0, 9): 1.0})
    with pytest.raises(TypeError, match="pair_values is a list"):
        pair_permutation_test(list(out.values()), sim)
    with pytest.raises(ValueError, match="pair_similarity must hold one value per pair"):
        pair_permutation_test(list(out.values()), [1.0, 2.0], models_of_pair=list(out))
    with pytest.raises(ValueError, match="model_i < model_j"):
        pair_permutation_test({(1, 0): 1.0, **out}, sim)
    with pytest.raises(ValueError, match="every pair"):
        pair_permutation_test(dict(list(out.items())[1:]), dict(list(sim.items())[1:]))
    pairs, _, y, s, controls = _regression_data(0, m=5)
    with pytest.raises(ValueError, match=r"controls\['gap'\]"):
        pair_regression(y, s, {"gap": controls["gap"][:-1]}, pairs)
    with pytest.raises(ValueError, match="controls"):
        pair_regression(y, s, {"g1": controls["gap"], "g2": 2 * controls["gap"]}, pairs)
    with pytest.raises(ValueError, match="template"):
        NamingGame(template="Name a thing:")
    with pytest.raises(ValueError, match="n_candidates"):
        ReferentialGame(n_candidates=1)
