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
    args = trl.GRPOConfig(
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
    )  # beta = 0: no reference model
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=[R.answer_match_reward, R.format_reward],
        args=args,
        train_dataset=ds,
        processing_class=tokenizer,
    )
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "rewards/answer_match_reward/mean" in entry]
    assert trainer.state.global_step == 2 and len(logs) == 2
    for entry in logs:
        assert 0.0 <= entry["rewards/answer_match_reward/mean"] <= 1.0
        assert 0.0 <= entry["rewards/format_reward/mean"] <= 1.0
        assert "frac_reward_zero_std" in entry
