"""The rewards plug into TRL's GRPOTrainer unchanged (installed TRL; no downloads)."""

import inspect
import string

import pytest

from icml_agents.ssl4rl import rewards as R
from icml_agents.ssl4rl.tasks import build_dataset

trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")


def ramp_images(n):
    import numpy as np

    rng = np.random.default_rng(0)
    return [rng.random((8, 8)) for _ in range(n)]


def grpo_args(trl, tmp_path):
    """Two GRPO steps of 4 prompts x 4 generations on the CPU, no reference model (beta = 0), no saving."""
    return trl.GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=2,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
        use_cpu=True,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        bf16=False,
        seed=0,
    )


def train_two_steps(trl, model, reward_funcs, dataset, processing_class, tmp_path) -> list[dict]:
    """Two GRPOTrainer steps; their log entries, each with both rewards' means in [0, 1] (checked)."""
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=grpo_args(trl, tmp_path),  # beta = 0: no reference model
        train_dataset=dataset,
        processing_class=processing_class,
    )
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "rewards/answer_match_reward/mean" in entry]
    assert trainer.state.global_step == 2 and len(logs) == 2
    for entry in logs:
        assert 0.0 <= entry["rewards/answer_match_reward/mean"] <= 1.0
        assert 0.0 <= entry["rewards/format_reward/mean"] <= 1.0
    return logs


def test_rewards_accept_the_keywords_grpo_trainer_passes():
    # GRPOTrainer._calculate_rewards: every dataset column except "prompt" (and "completion[_ids]"), one
    # value per completion, plus prompts, completions, completion_ids, trainer_state, log_extra, log_metric.
    source = inspect.getsource(trl.GRPOTrainer._calculate_rewards)
    assert "completions=completions" in source and "**reward_kwargs" in source
    ds = build_dataset(ramp_images(3), "jigsaw", seed=0, as_text=True)
    inputs = [row for row in ds for _ in range(4)]  # num_generations = 4, completions of a prompt consecutive
    completions = [
        f"<answer>{row['answer']}</answer>" if k % 2 == 0 else "<answer>1,2</answer>"
        for k, row in enumerate(inputs)
    ]
    keys = [k for k in inputs[0] if k not in ("prompt", "completion", "completion_ids")]
    kwargs = {k: [row[k] for row in inputs] for k in keys}
    kwargs.update(trainer_state=None, log_extra=lambda *a, **k: None, log_metric=lambda *a, **k: None)
    prompts = [row["prompt"] for row in inputs]
    ids = [[1, 2, 3]] * len(inputs)
    out = R.jigsaw_reward(prompts=prompts, completions=completions, completion_ids=ids, **kwargs)
    expected = [R.score_jigsaw(c, row["answer"]) for c, row in zip(completions, inputs, strict=True)]
    assert out == expected and out[0] == 1.0
    mixed = R.ssl4rl_reward(prompts=prompts, completions=completions, completion_ids=ids, **kwargs)
    assert mixed == expected
    assert (
        R.format_reward(prompts=prompts, completions=completions, completion_ids=ids, **kwargs) == [1.0] * 12
    )
    conversational = [[{"role": "assistant", "content": c}] for c in completions]
    assert (
        R.jigsaw_reward(prompts=prompts, completions=conversational, completion_ids=ids, **kwargs) == expected
    )


def char_tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<unk>", "<s>", "</s>"]
    chars = list(dict.fromkeys(string.printable))
    vocab = {t: i for i, t in enumerate(specials + chars)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )


@pytest.mark.slow
def test_two_grpo_trainer_steps_with_our_rewards(tmp_path):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    tokenizer = char_tokenizer()
    model = GPT2LMHeadModel(
        GPT2Config(
            vocab_size=len(tokenizer),
            n_positions=1024,
            n_embd=32,
            n_layer=2,
            n_head=2,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    )
    ds = build_dataset(ramp_images(8), "rotation", seed=0, as_text=True)
    logs = train_two_steps(trl, model, [R.answer_match_reward, R.format_reward], ds, tokenizer, tmp_path)
    for entry in logs:
        assert "frac_reward_zero_std" in entry


def test_image_dataset_has_the_conversational_prompts_trl_multimodal_needs():
    # GRPOTrainer refuses an `images` column next to plain-string prompts ("Multimodal training requires
    # conversational prompts"); it checks is_conversational, then inserts one placeholder per image.
    from trl.data_utils import is_conversational, prepare_multimodal_messages

    ds = build_dataset(ramp_images(3), "rotation", seed=0)
    assert set(ds.column_names) == {"prompt", "answer", "task", "images"}
    for row in ds:
        assert is_conversational(row)
        assert row["prompt"] == [{"role": "user", "content": row["prompt"][0]["content"]}]
        assert "<answer>" in row["prompt"][0]["content"] and len(row["images"]) == 2
        (message,) = prepare_multimodal_messages(row["prompt"], images=row["images"])
        assert [part["type"] for part in message["content"]] == ["image", "image", "text"]
    text = build_dataset(ramp_images(3), "rotation", seed=0, as_text=True)  # text-only models: plain strings
    assert all(isinstance(p, str) for p in text["prompt"]) and not is_conversational(text[0])


def tiny_llava(image_size=8, patch_size=4):
    """A random LLaVA (CLIP vision tower, Llama text model, 32k parameters) and its processor, built offline:
    the character tokenizer plus an ``<image>`` token, a minimal chat template and a CLIP image processor."""
    import torch
    import transformers
    from transformers import (
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    tokenizer = char_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": ["<image>"]})
    template = (
        "{% for m in messages %}{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}{% else %}"
        "{% for p in m['content'] %}{% if p['type'] == 'image' %}<image>{% else %}{{ p['text'] }}{% endif %}"
        "{% endfor %}{% endif %}\n{% endfor %}{% if add_generation_prompt %}assistant\n{% endif %}"
    )
    tokenizer.chat_template = template
    image_processor_class = getattr(transformers, "CLIPImageProcessorPil", transformers.CLIPImageProcessor)
    image_processor = image_processor_class(
        size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size}
    )
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=patch_size,
        vision_feature_select_strategy="default",  # drops CLS: (image_size / patch_size)^2 tokens per image
        num_additional_image_tokens=1,
        chat_template=template,
    )
    torch.manual_seed(0)
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=image_size,
            patch_size=patch_size,
        ),
        text_config=LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=2048,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        ),
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
    )
    return LlavaForConditionalGeneration(config), processor


@pytest.mark.slow
def test_two_grpo_trainer_steps_on_a_vision_language_model(tmp_path):
    # the README fragment: build_dataset(...) keeping the images, a VLM with its processor, our rewards
    model, processor = tiny_llava()
    ds = build_dataset(ramp_images(8), "rotation", seed=0)
    seen: dict[str, list] = {"completions": [], "forwards": []}

    def answer_match_reward(completions, **kwargs):
        seen["completions"].extend(completions)
        return R.answer_match_reward(completions, **kwargs)

    def record(module, args, kwargs):  # whole-prompt forwards: generation's prefill and the loss pass
        ids, pixels = kwargs.get("input_ids"), kwargs.get("pixel_values")
        if ids is not None and ids.shape[1] > 1:
            image_tokens = (ids == module.config.image_token_index).sum(1).tolist()
            seen["forwards"].append((None if pixels is None else pixels.shape[0], image_tokens))

    model.register_forward_pre_hook(record, with_kwargs=True)
    train_two_steps(trl, model, [answer_match_reward, R.format_reward], ds, processor, tmp_path)
    # the images reached the model: two per prompt, each expanded to (8 / 4)^2 = 4 placeholder tokens
    assert len(seen["forwards"]) >= 4  # per step: generation's prefill and the loss pass
    assert {count for _, tokens in seen["forwards"] for count in tokens} == {8}
    with_pixels = [(n, tokens) for n, tokens in seen["forwards"] if n is not None]  # the loss pass at least
    assert len(with_pixels) >= 2 and all(n == 2 * len(tokens) for n, tokens in with_pixels)
    # TRL passed conversational completions (one assistant message each); the rewards scored their text
    assert len(seen["completions"]) == 8
    assert all(
        c[-1]["role"] == "assistant" and isinstance(c[-1]["content"], str) for c in seen["completions"]
    )
