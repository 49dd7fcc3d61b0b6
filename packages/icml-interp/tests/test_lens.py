import pytest
import torch
from torch import nn

from icml_interp.lens import logit_lens, mlp_value_lens, token_rank_by_layer
from icml_tools.assets import tiny_llama


@pytest.fixture(scope="module")
def model():
    return tiny_llama(seed=0, layers=3)


def ids(shape, seed=0):
    return torch.randint(0, 256, shape, generator=torch.Generator().manual_seed(seed))


def all_hooks(model) -> set:  # transformers installs hooks of its own (output_hidden_states): compare sets
    return {h for m in model.modules() for h in (*m._forward_hooks.values(), *m._forward_pre_hooks.values())}


def test_last_layer_equals_model_logits(model):
    x = ids((9,))
    lens = logit_lens(model, x)
    assert lens.shape == (4, 9, 256)  # (n_layers + 1, seq, vocab)
    with torch.no_grad():
        logits = model(x[None]).logits[0]
    torch.testing.assert_close(lens[-1], logits)
    assert (lens[-2] - logits).abs().max() > 1e-2  # the last block matters: the check above can fail


def test_every_layer_matches_hugging_face_hidden_states(model):
    x = ids((2, 6), seed=1)
    lens = logit_lens(model, x)  # (4, 2, 6, 256)
    with torch.no_grad():
        hidden = model(
            x, output_hidden_states=True
        ).hidden_states  # embeddings, blocks 1..L-1, then post-norm
        expected = torch.stack([model.lm_head(model.model.norm(h)) for h in hidden[:-1]])
        embeddings = model.lm_head(model.model.norm(model.model.embed_tokens(x)))
    torch.testing.assert_close(lens[:-1], expected)
    torch.testing.assert_close(lens[0], embeddings)


def test_batched_equals_one_sequence_at_a_time(model):
    x = ids((3, 5), seed=2)
    lens = logit_lens(model, x)
    assert lens.shape == (4, 3, 5, 256)
    for b in range(3):
        torch.testing.assert_close(lens[:, b], logit_lens(model, x[b]), rtol=1e-5, atol=1e-5)


def test_hooks_are_removed_even_when_the_forward_pass_fails(model):
    before = all_hooks(model)
    logit_lens(model, ids((4,)))
    assert all_hooks(model) == before and model.model.layers[0]._forward_pre_hooks == {}

    def explode(module, args, output):
        raise RuntimeError("boom")

    handle = model.model.layers[1].register_forward_hook(explode)
    try:
        with pytest.raises(RuntimeError, match="boom"):
            logit_lens(model, ids((4,)))
        assert all_hooks(model) == before | {explode}
    finally:
        handle.remove()
    assert all_hooks(model) == before


class _PlainLayout(nn.Module):
    """A torch module laid out as model.model.layers / model.model.norm / model.lm_head, without a config."""

    def __init__(self, causal_lm):
        super().__init__()
        self.model, self.lm_head = causal_lm.model, causal_lm.lm_head

    def forward(self, input_ids, use_cache=False):
        return self.lm_head(self.model(input_ids=input_ids, use_cache=use_cache).last_hidden_state)


@pytest.mark.parametrize("arch", ["gpt2", "qwen2", "plain"])
def test_a_model_in_training_mode_gives_the_eval_mode_lens(zoo, modes, arch):
    # the pass ran in the model's mode: with dropout 0.1 in training mode the lens was off the eval-mode lens
    # by up to 0.31 (GPT-2) / 0.35 (Qwen2, attention dropout) and the ranks by up to 50 / 13. Now the model
    # runs in eval mode (bit-identical) and every submodule's mode comes back, also when the pass raises.
    x = ids((2, 7), seed=5)
    model = zoo.gpt2() if arch == "gpt2" else zoo.qwen2()
    if arch == "plain":  # a module without a config: the lens's own code path
        model = _PlainLayout(model)

    def lenses(m):
        return logit_lens(m, x), token_rank_by_layer(m, x[0], 5)

    want, got = modes.train_vs_eval(model, lenses)
    assert torch.equal(got[0], want[0]) and got[1] == want[1]


def test_bad_input_raises(model):
    with pytest.raises(TypeError, match="LongTensor"):
        logit_lens(model, ids((4,)).float())
    with pytest.raises(TypeError, match="LongTensor"):
        logit_lens(model, [1, 2, 3])
    with pytest.raises(ValueError, match="shaped"):
        logit_lens(model, ids((1, 2, 3)))
    with pytest.raises(ValueError, match="shaped"):
        logit_lens(model, torch.zeros(0, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\[0, 256\)"):
        logit_lens(model, torch.tensor([1, 256]))
    with pytest.raises(TypeError, match=r"config\.model_type"):
        logit_lens(nn.Linear(3, 3), ids((4,)))


def test_gpt2_lens_ends_at_the_logits(zoo):
    gpt2 = zoo.gpt2()
    x = ids((5,), seed=3)
    with torch.no_grad():
        torch.testing.assert_close(logit_lens(gpt2, x)[-1], gpt2(x[None]).logits[0], rtol=0, atol=1e-5)


def test_token_rank_and_value_lens(model):
    x = ids((6,), seed=4)
    lens = logit_lens(model, x)[:, -1]
    target = int(lens[-1].argmax())
    curve = token_rank_by_layer(model, x, target)
    assert curve["rank"][-1] == 0 and len(curve["rank"]) == 4
    assert curve["rank"] == [int((row > row[target]).sum()) for row in lens]
    tokens, _ = mlp_value_lens(model, 1, top_k=3)
    values = model.model.layers[1].mlp.down_proj.weight.T  # (d_mlp, d_model)
    expected = model.lm_head(model.model.norm(values)).topk(3)
    assert tokens.shape == (128, 3) and torch.equal(tokens, expected.indices)
    with pytest.raises(ValueError, match="layer"):
        mlp_value_lens(model, 5)
    with pytest.raises(ValueError, match="top_k"):
        mlp_value_lens(model, 0, top_k=0)
