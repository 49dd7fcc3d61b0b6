"""The synthetic zoo of the similarity-cooperation reproduction (fast tier) and its quick run (slow tier:
the first run trains the nine members, about 7 minutes on 2 cores, then they are cached)."""

import numpy as np
import pytest

from icml_agents.backends import HFLocalBackend
from icml_agents.games import NamingGame, Player, first_word, play_game
from icml_agents_experiments.games.zoo import (
    MEMBERS,
    TrainConfig,
    default_games,
    dialects,
    game_example,
    game_line,
    member_corpus,
    new_model,
    probe_texts,
    train_lm,
    vocabulary,
    word_tokenizer,
)
from icml_tools.repro import run_reproduction


def test_the_word_tokenizer_covers_every_game_prompt_and_answer():
    tok, rng = word_tokenizer(), np.random.default_rng(0)
    for d in dialects(0).values():
        for _ in range(200):
            prompt, answer, _ = game_example(d, rng)
            ids = tok(f"{prompt} {answer}")["input_ids"]
            assert tok.unk_token_id not in ids
            assert first_word(tok.decode(tok(answer)["input_ids"])) == first_word(answer)
    assert tok("Name a Fruit:\nzzzq")["input_ids"][-1] == tok.unk_token_id
    assert len(tok) == len(vocabulary()) + 4


def test_dialects_are_seeded_and_independent():
    a, b = dialects(0), dialects(0)
    assert a["S"].lexicon == b["S"].lexicon
    shared = [a["S"].lexicon[c][0] == a["A"].lexicon[c][0] for c in a["S"].lexicon]
    assert np.mean(shared) < 0.05  # top answers agree by chance only


def test_game_lines_use_the_games_own_prompts():
    games, d, rng = default_games(), dialects(0)["A"], np.random.default_rng(0)
    prefixes = {
        "Name a ": "naming",
        "Words: ": "referential",
        "You have ": "ultimatum",
        "Your partner has ": "ultimatum",
        "Ideas for ": "brainstorm",
        "Word associations: ": "word_chain",
        "An idea for ": "build_on",
    }
    seen = set()
    for _ in range(400):
        line = game_line(d, rng)
        kind = next((k for p, k in prefixes.items() if line.startswith(p)), "story")
        seen.add(kind)
        if kind == "naming":
            category = line[len("Name a ") : line.index(":")]
            prompt = games["naming"].template.format(category=category)
            assert (
                line == f"{prompt} {line.split()[-1]}" and line.split()[-1] in d.lexicon["name:" + category]
            )
        if kind == "story":
            assert any(line.startswith(o) for o in games["story_consistency"].openings)
    assert seen == {*prefixes.values(), "story"}


def test_probes_hold_the_dialect_words_not_the_shared_prompts():
    probes = probe_texts(30)
    assert len(probes) == 30 and probes == probe_texts(30)
    assert not any(p.startswith(("Name a", "Words:", "Ideas for", "You have")) for p in probes)


def test_a_member_corpus_mixes_shared_and_private_lines_by_its_weight():
    ds = dialects(0)
    for member in (MEMBERS[0], MEMBERS[4]):  # w = 1 and w = 0
        lines = [ln for ln in member_corpus(member, n_lines=300).splitlines() if ln.startswith("Name a ")]
        from_s = [ln.split()[-1] in ds["S"].lexicon["name:" + ln[7 : ln.index(":")]] for ln in lines]
        assert np.mean(from_s) == (1.0 if member.w == 1 else pytest.approx(0.0, abs=0.1))


def test_a_briefly_trained_member_plays_through_the_hf_backend():
    tok, cfg = word_tokenizer(), TrainConfig(steps=3, batch=4, seq_len=24)
    model = new_model(cfg, len(tok), 0)
    losses = train_lm(model, tok, member_corpus(MEMBERS[1], n_lines=200), cfg, 0)
    assert len(losses) == 3 and all(np.isfinite(losses))
    player = Player("m", HFLocalBackend(model, tok))
    result = play_game("naming", player, player, n_rounds=2, seed=0)
    assert result.score == 1.0  # a greedy model agrees with its own copy
    assert isinstance(default_games()["naming"], NamingGame)


@pytest.mark.slow
def test_quick_run_follows_the_protocol():
    result = run_reproduction("similarity-cooperation", "quick", 0)
    assert len(result["rows"]) == len(MEMBERS) * (len(MEMBERS) - 1) // 2
    assert set(result["tests"]) == {
        f"{o} ~ {b}" for o in ("cooperation", "novelty") for b in ("early", "middle", "late", "all")
    }
    assert all(0 <= r["cooperation"] <= 1 and 0 <= r["novelty"] <= 1 for r in result["rows"])
