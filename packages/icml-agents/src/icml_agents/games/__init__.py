"""LLM-pair games: do representationally similar model pairs cooperate more and produce less novelty?

Potter et al. (ICML 2026, arXiv 2606.07818) let 24 LLMs play 8 two-player games (276 pairs) spanning
cooperation and novelty, and report that pairs with more similar representations (CKA, strongest in early
layers) cooperate better and produce less novelty, after controlling for performance gaps and model size.

What is here, and what is our design: the paper's list of 8 games was not available, so the eight games
below, their prompts and their scorers are ours (documented in each class), chosen so that any text model
plays them, down to a tiny model trained on short synthetic text (completion-style prompts, one-word
answers parsed by first word, a listener that needs only log-probabilities, no embedding model).

- :mod:`~icml_agents.games.harness`: :class:`Player` (a backend and its decoding settings), :class:`Game`,
  transcripts (:class:`Round`, :class:`Turn`) and :class:`GameResult`; prompts are batched per player and
  per step, every call seeded from the game's seed.
- Cooperation (:mod:`~icml_agents.games.cooperation`): :class:`NamingGame`, :class:`ReferentialGame`,
  :class:`UltimatumGame`, :class:`StoryConsistencyGame`. Novelty (:mod:`~icml_agents.games.novelty`):
  :class:`BrainstormGame`, :class:`StoryNoveltyGame`, :class:`WordChainGame`, :class:`BuildOnGame`.
- :mod:`~icml_agents.games.metrics`: the scorers, pure functions of text (distinct-n, self-BLEU, trigram
  embeddings and their spread, agreement, referential accuracy, offer parsing, consistency, rarity).
- :data:`GAMES`, :func:`play_game`, :func:`play_all`; a pair's outcomes :func:`cooperation_score` and
  :func:`novelty_score` (means over the games of each kind, each in [0, 1]).
- :mod:`~icml_agents.games.analysis`: :func:`spearman`, the model-label (QAP) permutation test
  :func:`pair_permutation_test` and :func:`pair_regression` (OLS with dyadic-robust errors).

Representational similarity itself (CKA between the models' hidden states) is measured elsewhere; the
analysis takes it as per-pair numbers.

.. code-block:: python

    from icml_agents.backends import HFLocalBackend
    from icml_agents.games import Player, cooperation_score, novelty_score, play_all

    a = Player("smol", HFLocalBackend.from_pretrained(path_a), max_new_tokens=24)
    b = Player("tiny", HFLocalBackend.from_pretrained(path_b), max_new_tokens=24)
    results = play_all(a, b, n_rounds=8, seed=0)
    print(cooperation_score(results), novelty_score(results))
"""

from icml_agents.games.analysis import (
    PermutationResult,
    RegressionResult,
    pair_permutation_test,
    pair_regression,
    spearman,
)
from icml_agents.games.cooperation import NamingGame, ReferentialGame, StoryConsistencyGame, UltimatumGame
from icml_agents.games.harness import DEFAULT_ROUNDS, ROLES, Game, GameResult, Player, Round, Turn
from icml_agents.games.metrics import (
    STOPWORDS,
    acceptance_rate,
    agreement,
    consistency,
    content_words,
    distinct_n,
    distinct_share,
    embedding_spread,
    first_word,
    novel_share,
    parse_offer,
    parse_response,
    rarity,
    referential_accuracy,
    self_bleu,
    sentence_bleu,
    split_ideas,
    trigram_embedding,
    unigram_counts,
    words,
)
from icml_agents.games.novelty import BrainstormGame, BuildOnGame, StoryNoveltyGame, WordChainGame
from icml_agents.games.registry import GAMES, cooperation_score, novelty_score, play_all, play_game

__all__ = [
    "DEFAULT_ROUNDS",
    "GAMES",
    "ROLES",
    "STOPWORDS",
    "BrainstormGame",
    "BuildOnGame",
    "Game",
    "GameResult",
    "NamingGame",
    "PermutationResult",
    "Player",
    "ReferentialGame",
    "RegressionResult",
    "Round",
    "StoryConsistencyGame",
    "StoryNoveltyGame",
    "Turn",
    "UltimatumGame",
    "WordChainGame",
    "acceptance_rate",
    "agreement",
    "consistency",
    "content_words",
    "cooperation_score",
    "distinct_n",
    "distinct_share",
    "embedding_spread",
    "first_word",
    "novel_share",
    "novelty_score",
    "pair_permutation_test",
    "pair_regression",
    "parse_offer",
    "parse_response",
    "play_all",
    "play_game",
    "rarity",
    "referential_accuracy",
    "self_bleu",
    "sentence_bleu",
    "spearman",
    "split_ideas",
    "trigram_embedding",
    "unigram_counts",
    "words",
]
