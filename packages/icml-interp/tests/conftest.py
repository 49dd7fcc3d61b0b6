"""Tiny random models of each mapped architecture family, and a planted two-hop head circuit."""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace

import pytest
import torch
from torch import nn


def tiny_gpt2(seed: int = 0, layers: int = 2):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=256, n_positions=64, n_embd=64, n_layer=layers, n_head=4, bos_token_id=0, eos_token_id=0
    )
    return GPT2LMHeadModel(config).eval()


def tiny_neox(seed: int = 0, layers: int = 2):
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    torch.manual_seed(seed)
    config = GPTNeoXConfig(
        vocab_size=256,
        hidden_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=64,
        bos_token_id=0,
        eos_token_id=0,
    )
    return GPTNeoXForCausalLM(config).eval()


# the sizes every tiny grouped-query decoder below shares (4 query heads on 2 key/value heads)
TINY_DECODER = dict(
    vocab_size=256, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2
)


def tiny_qwen2(seed: int = 0, layers: int = 2):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        **TINY_DECODER,
        num_hidden_layers=layers,
        max_position_embeddings=64,
    )
    return Qwen2ForCausalLM(config).eval()


def tiny_esm(seed: int = 0, layers: int = 2):
    """A tiny ESM-2-style masked protein LM (33-token alphabet, rotary positions, pre-norm blocks)."""
    from transformers import EsmConfig, EsmForMaskedLM

    torch.manual_seed(seed)
    config = EsmConfig(
        vocab_size=33,
        hidden_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        intermediate_size=128,
        position_embedding_type="rotary",
        token_dropout=False,
        pad_token_id=1,
        mask_token_id=32,
        max_position_embeddings=128,
        emb_layer_norm_before=False,
    )
    return EsmForMaskedLM(config).eval()


def _jitter_norms(model, seed: int):
    """Random norm weights (the configs initialize them to the identity: 1, or 0 for Gemma's 1 + weight), so
    that a norm applied in the wrong place, or with the wrong weight, shows."""
    generator = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.add_(0.3 * torch.randn(param.shape, generator=generator))
    return model.eval()


def tiny_gemma(seed: int = 0, layers: int = 2):
    """A tiny Gemma (Llama's layout, RMSNorm scaling by 1 + weight, embeddings scaled by sqrt(d_model))."""
    from transformers import GemmaConfig, GemmaForCausalLM

    torch.manual_seed(seed)
    config = GemmaConfig(
        **TINY_DECODER,
        num_hidden_layers=layers,
        head_dim=16,
        max_position_embeddings=64,
    )
    return _jitter_norms(GemmaForCausalLM(config), seed)


def tiny_gemma2(seed: int = 0, layers: int = 2):
    """A tiny Gemma 2: norms around both sublayers, a 4-token sliding window on layer 0 (full attention on
    layer 1), attention and final logits softcapped at small caps that bite on these weights."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    torch.manual_seed(seed)
    config = Gemma2Config(
        **TINY_DECODER,
        num_hidden_layers=layers,
        head_dim=16,
        query_pre_attn_scalar=16,
        max_position_embeddings=64,
        sliding_window=4,
        attn_logit_softcapping=5.0,
        final_logit_softcapping=5.0,
        initializer_range=0.2,
    )
    return _jitter_norms(Gemma2ForCausalLM(config), seed)


def tiny_gemma3(seed: int = 0, layers: int = 2):
    """A tiny text-only Gemma 3 (Gemma3ForCausalLM): Gemma 2's norms plus per-head query / key norms, a
    4-token sliding window on layer 0 (full attention on layer 1)."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(seed)
    config = Gemma3TextConfig(
        **TINY_DECODER,
        num_hidden_layers=layers,
        head_dim=16,
        query_pre_attn_scalar=16,
        max_position_embeddings=64,
        sliding_window=4,
        layer_types=["sliding_attention", "full_attention"] * (layers // 2)
        + ["sliding_attention"] * (layers % 2),
        initializer_range=0.2,
    )
    return _jitter_norms(Gemma3ForCausalLM(config), seed)


def tiny_qwen3(seed: int = 0, layers: int = 2):
    """A tiny Qwen 3: Llama's layout plus per-head query / key norms (on (batch, seq, heads, d_head))."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(**TINY_DECODER, num_hidden_layers=layers, head_dim=16, max_position_embeddings=64)
    return _jitter_norms(Qwen3ForCausalLM(config), seed)


# the vision towers of the tiny vision-language models (SigLIP in Gemma 3, CLIP in LLaVA): 32x32 images, 8x8
# patches
TINY_VISION = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=1,
    num_attention_heads=2,
    image_size=32,
    patch_size=8,
)


@pytest.fixture(scope="session")
def tiny_vision():
    """:data:`TINY_VISION` for test modules (importlib mode: they cannot import this conftest)."""
    return dict(TINY_VISION)


def tiny_gemma3_vlm(seed: int = 0, layers: int = 2, final_logit_softcapping: float | None = None):
    """A tiny Gemma 3 vision-language model (Gemma3ForConditionalGeneration, model_type "gemma3") whose language
    model is :func:`tiny_gemma3`'s, weights included, and a 1-layer SigLIP tower: 32x32 images, 4 image tokens
    (id 255) between begin / end of image tokens 253 / 254. ``final_logit_softcapping`` goes into its text
    config (the wrapper does not apply it; Gemma3ForCausalLM does)."""
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    text = tiny_gemma3(seed, layers)
    text_config = text.config.to_dict()
    text_config["final_logit_softcapping"] = final_logit_softcapping
    config = Gemma3Config(
        text_config=text_config,
        vision_config=dict(TINY_VISION),
        mm_tokens_per_image=4,
        image_token_index=255,
        boi_token_index=253,
        eoi_token_index=254,
    )
    torch.manual_seed(seed)
    model = Gemma3ForConditionalGeneration(config)
    model.model.language_model.load_state_dict(text.model.state_dict())
    model.lm_head.load_state_dict(text.lm_head.state_dict())
    # the projector starts at zero: random, so that the image reaches the language model
    with torch.no_grad():
        model.model.multi_modal_projector.mm_input_projection_weight.normal_(0.0, 0.5)
    return model.eval(), text


def tiny_llava(text, seed: int = 0):
    """A tiny LLaVA (LlavaForConditionalGeneration, model_type "llava") whose language model is the causal LM
    ``text``'s (a tiny Gemma, Gemma 2, ...), weights included, with a 1-layer CLIP tower: 32x32 images, 16 image
    tokens (id 255). LLaVA's head applies no final logit softcap, whatever its text config says."""
    from transformers import CLIPVisionConfig, LlavaConfig, LlavaForConditionalGeneration

    vision = CLIPVisionConfig(**TINY_VISION, projection_dim=32)
    config = LlavaConfig(
        vision_config=vision,
        text_config=text.config.to_dict(),
        image_token_id=255,
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
    )
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(config)
    model.model.language_model.load_state_dict(text.model.state_dict())
    model.lm_head.load_state_dict(text.lm_head.state_dict())
    return model.eval()


def tiny_olmo2(seed: int = 0, layers: int = 2):
    """A tiny OLMo 2: norms of the attention and MLP outputs (none before them), query and key norms over the
    whole projections."""
    from transformers import Olmo2Config, Olmo2ForCausalLM

    torch.manual_seed(seed)
    config = Olmo2Config(
        **TINY_DECODER,
        num_hidden_layers=layers,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=0,
        eos_token_id=0,
    )
    return _jitter_norms(Olmo2ForCausalLM(config), seed)


SENDER, RECEIVER = (0, 1), (1, 2)


def two_hop_circuit(seed: int = 0):
    """A 3-layer Llama whose head 0.1 (the sender) writes only into residual dims 48..55, which nothing reads
    except the values of head 1.2 (the receiver); the receiver writes only into dims 56..63, which the
    unembedding reads strongly. The sender's effect on the logits therefore flows through the receiver alone
    (up to the tiny change it makes to the RMSNorm scale)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=64,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    u, w, d_head = slice(48, 56), slice(56, 64), 16
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 48:] = 0
        for block in model.model.layers:
            attn, mlp = block.self_attn, block.mlp
            attn.o_proj.weight[48:] = 0  # no head writes into dims 48.. except the two below
            for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
                proj.weight[:, u] = 0  # no head reads the sender's subspace ...
            mlp.gate_proj.weight[:, 48:] = 0
            mlp.up_proj.weight[:, 48:] = 0
            mlp.down_proj.weight[48:] = 0
        s_cols = slice(SENDER[1] * d_head, (SENDER[1] + 1) * d_head)
        r_cols = slice(RECEIVER[1] * d_head, (RECEIVER[1] + 1) * d_head)
        sender, receiver = model.model.layers[SENDER[0]].self_attn, model.model.layers[RECEIVER[0]].self_attn
        sender.o_proj.weight[:, s_cols] = 0
        sender.o_proj.weight[u, s_cols] = torch.randn(8, d_head) * 0.5
        receiver.v_proj.weight[r_cols, u] = torch.randn(d_head, 8) * 0.5  # ... except the receiver's values
        receiver.o_proj.weight[:, r_cols] = 0
        receiver.o_proj.weight[w, r_cols] = torch.randn(8, d_head) * 0.5
        model.lm_head.weight[:, :48] *= 0.1
        model.lm_head.weight[:, u] = 0
        model.lm_head.weight[:, w] = torch.randn(64, 8) * 0.5
    return model


@pytest.fixture(scope="session")
def zoo():
    """The factories above (test modules cannot import each other under --import-mode=importlib)."""
    return SimpleNamespace(
        gpt2=tiny_gpt2,
        neox=tiny_neox,
        qwen2=tiny_qwen2,
        esm=tiny_esm,
        gemma=tiny_gemma,
        gemma2=tiny_gemma2,
        gemma3=tiny_gemma3,
        gemma3_vlm=tiny_gemma3_vlm,
        llava=tiny_llava,
        qwen3=tiny_qwen3,
        olmo2=tiny_olmo2,
        two_hop=two_hop_circuit,
        sender=SENDER,
        receiver=RECEIVER,
    )


# ------------------------------------------------------------------------------- models left in training mode
def fine_tuning(model: nn.Module) -> nn.Module:
    """``model`` (a causal LM, or a module holding one, with an ``lm_head``) as a fine-tuning loop leaves it:
    in training mode with dropout on (GPT-2's default 0.1; the attention dropout of a Llama-family model, 0 by
    default, set to 0.1), transformers' reentrant gradient checkpointing on, and its LM head left in eval mode
    (a mixed mode the analyses must give back as it was).
    Functions that compare passes must run it in eval mode: with dropout each pass draws its own mask, and
    reentrant checkpointing leaves the activations cached inside a block out of the backward pass."""
    for module in model.modules():
        if hasattr(module, "attention_dropout") and isinstance(module.attention_dropout, float):
            module.attention_dropout = 0.1
    reentrant = {"use_reentrant": True}
    hf = next(m for m in model.modules() if hasattr(m, "gradient_checkpointing_enable"))  # or the inner one
    if hasattr(hf, "activation_checkpointing_enable"):  # gradient_checkpointing_enable's newer name
        hf.activation_checkpointing_enable(activation_checkpointing_kwargs=reentrant)
    else:
        hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs=reentrant)
    model.train()
    model.lm_head.eval()
    return model


def training_flags(model: nn.Module) -> dict[str, bool]:
    return {name: module.training for name, module in model.named_modules()}


@contextmanager
def failing(module: nn.Module):
    """Within the context, every forward pass through ``module`` raises ``RuntimeError("boom")``."""

    def explode(mod, args, output):
        raise RuntimeError("boom")

    handle = module.register_forward_hook(explode)
    try:
        yield
    finally:
        handle.remove()


def train_vs_eval(model: nn.Module, run):
    """``(run(model) in eval mode, run(model) on the same model left as fine_tuning leaves it)``, after checking
    that the second call and a call that raises inside (a forward hook on the last block raises) give back
    every submodule's mode."""
    model = fine_tuning(model)
    model.eval()
    want = run(model)
    fine_tuning(model)
    before = training_flags(model)
    assert model.training and not all(before.values())  # a mixed mode
    got = run(model)
    assert training_flags(model) == before
    blocks = next(m for m in model.modules() if isinstance(m, nn.ModuleList))
    with failing(blocks[-1]), pytest.raises(RuntimeError, match="boom"):
        run(model)
    assert training_flags(model) == before
    return want, got


@pytest.fixture(scope="session")
def modes():
    """The helpers above: a model left in training mode, its per-submodule flags, and the comparison."""
    return SimpleNamespace(
        fine_tuning=fine_tuning, flags=training_flags, failing=failing, train_vs_eval=train_vs_eval
    )
