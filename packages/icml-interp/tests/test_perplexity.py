import math

import pytest
import torch

from icml_interp.perplexity import split_perplexity, split_perplexity_over_checkpoints, token_nll
from icml_tools.assets import tiny_llama


@pytest.fixture(scope="module")
def model():
    return tiny_llama(seed=0, layers=2)


def test_split_matches_a_direct_computation(model):
    pairs = [([1, 2, 3], [4, 5]), ([7, 8], [9])]
    result = split_perplexity(model, pairs)
    prompt_nll, answer_nll = [], []
    for prompt, answer in pairs:
        seq = torch.tensor([prompt + answer])
        with torch.no_grad():
            logp = torch.log_softmax(model(seq).logits[0], -1)
        nll = [-float(logp[t - 1, seq[0, t]]) for t in range(1, seq.shape[1])]
        prompt_nll += nll[: len(prompt) - 1]
        answer_nll += nll[len(prompt) - 1 :]
    assert result["prompt_ppl"] == pytest.approx(math.exp(sum(prompt_nll) / len(prompt_nll)), rel=1e-5)
    assert result["answer_ppl"] == pytest.approx(math.exp(sum(answer_nll) / len(answer_nll)), rel=1e-5)
    allnll = prompt_nll + answer_nll
    assert result["full_ppl"] == pytest.approx(math.exp(sum(allnll) / len(allnll)), rel=1e-5)
    assert result["items"][1]["answer_ppl"] == pytest.approx(math.exp(answer_nll[-1]), rel=1e-5)
    assert token_nll(model, torch.tensor([[1, 2, 3, 4, 5]])).shape == (1, 4)


def test_checkpoints_and_strings_with_a_tokenizer(model):
    class Tok:  # a character tokenizer: enough to exercise the string path
        def __call__(self, text, add_special_tokens=True):
            return {"input_ids": ([0] if add_special_tokens else []) + [ord(c) % 256 for c in text]}

    rows = split_perplexity_over_checkpoints(
        {"a": model, "b": tiny_llama(seed=1, layers=2)}, [("ab", "c"), ("xyz", "w")], tokenizer=Tok()
    )
    assert [r["checkpoint"] for r in rows] == ["a", "b"] and rows[0]["answer_ppl"] != rows[1]["answer_ppl"]
    with pytest.raises(TypeError, match="tokenizer"):
        split_perplexity(model, [("ab", "c")])
    with pytest.raises(ValueError, match="at least one"):
        split_perplexity(model, [])
    with pytest.raises(ValueError, match="at least one token"):
        split_perplexity(model, [([1, 2], [])])
