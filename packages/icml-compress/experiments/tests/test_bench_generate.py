"""The ``proteus-generate`` benchmark: its architecture constant and the formats it builds."""

import pytest
import torch

from icml_compress.quantize.linear import ProteusLinear, RTNLinear
from icml_compress_experiments.quantize.bench import SMOLLM2_135M, build_formats, check_proteus


def test_architecture_matches_the_smollm2_asset():
    from icml_tools.assets import smollm2

    config = smollm2()[0].config
    for key, value in SMOLLM2_135M.items():
        if isinstance(value, float):
            assert getattr(config, key) == pytest.approx(value, rel=1e-6), key
        else:
            assert getattr(config, key) == value, key


def _tiny_llama():
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=96,
        tie_word_embeddings=True,
        pad_token_id=2,
    )
    return transformers.LlamaForCausalLM(config).eval()


def test_formats_replace_every_block_linear_and_generate():
    base = _tiny_llama()
    models = build_formats(base, torch.device("cpu"), torch.float32, seed=0)
    assert list(models) == ["float", "rtn-2bit-g64", "proteus"]
    n_linear = 7 * 2  # q, k, v, o, gate, up, down per block; lm_head stays float
    assert sum(isinstance(m, RTNLinear) for m in models["rtn-2bit-g64"].modules()) == n_linear
    assert sum(isinstance(m, ProteusLinear) for m in models["proteus"].modules()) == n_linear
    assert isinstance(models["proteus"].lm_head, torch.nn.Linear)
    assert check_proteus(models["proteus"], torch.device("cpu")) < 1e-3
    ids = torch.tensor([[5, 6, 7]])
    for model in models.values():
        out = model.generate(ids, max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=2)
        assert out.shape == (1, 7)
    # the float copy is untouched by building the others
    assert all(
        torch.equal(p, q) for p, q in zip(base.parameters(), models["float"].parameters(), strict=True)
    )
