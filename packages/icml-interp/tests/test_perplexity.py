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


PAIRS = [([1, 2, 3], [4, 5]), ([7, 8, 9, 10], [11, 12, 13])]
EVALUATIONS = {
    "token_nll": lambda m: token_nll(
        m, torch.randint(0, 256, (4, 10), generator=torch.Generator().manual_seed(7))
    ),
    "split_perplexity": lambda m: split_perplexity(m, PAIRS),
    "split_perplexity_over_checkpoints": lambda m: split_perplexity_over_checkpoints([m], PAIRS),
}


@pytest.mark.parametrize("arch", ["gpt2", "qwen2"])
@pytest.mark.parametrize("what", list(EVALUATIONS))
def test_a_model_in_training_mode_gives_the_eval_mode_perplexity(zoo, modes, arch, what):
    # the pass ran in the model's mode: with dropout 0.1 in training mode (GPT-2's default; Qwen2's attention
    # dropout) the token NLLs were off the eval-mode ones by up to 0.12 (GPT-2) / 0.098 (Qwen2) and the
    # perplexities (up to 280) by 7.4 / 9.1. Now the model runs in eval mode (bit-identical) and every
    # submodule's mode comes back, also when the pass raises.
    want, got = modes.train_vs_eval(getattr(zoo, arch)(), EVALUATIONS[what])
    torch.testing.assert_close(got, want, rtol=0, atol=0)
