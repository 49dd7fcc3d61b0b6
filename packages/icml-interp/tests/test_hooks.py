import pytest
import torch

from icml_interp.hooks import ARCHITECTURES, HOOKED_ATTENTION, HookedModel, act_name, register_architecture
from icml_tools.assets import tiny_llama

ARCHS = ["llama", "gpt2", "gpt_neox", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "olmo2"]


@pytest.fixture(scope="module", params=ARCHS)
def model(request, zoo):
    factories = {
        "llama": lambda: tiny_llama(seed=0, layers=3),
        "gpt2": zoo.gpt2,
        "gpt_neox": zoo.neox,
        "qwen2": zoo.qwen2,
        "qwen3": zoo.qwen3,
        "gemma": zoo.gemma,
        "gemma2": zoo.gemma2,
        "gemma3_text": zoo.gemma3,
        "olmo2": zoo.olmo2,
    }
    return factories[request.param]()


def ids(shape, seed=0):
    return torch.randint(0, 256, shape, generator=torch.Generator().manual_seed(seed))


def all_hooks(model) -> set:
    return {h for m in model.modules() for h in (*m._forward_hooks.values(), *m._forward_pre_hooks.values())}


def test_wrapped_logits_equal_unwrapped_exactly(model):
    x = ids((2, 9))
    with torch.no_grad():
        reference = model(x).logits
    hooked = HookedModel(model)
    assert torch.equal(hooked(x), reference)
    logits, cache = hooked.run_with_cache(x)
    assert torch.equal(logits, reference)
    assert len(cache) == len(hooked.resolve(None)) > 5 * hooked.n_layers


def test_last_resid_post_through_the_lens_is_the_logits(model):
    hooked = HookedModel(model)
    x = ids((2, 7), seed=1)
    logits, cache = hooked.run_with_cache(x)
    torch.testing.assert_close(
        hooked.lens(cache["resid_post", hooked.n_layers - 1]), logits, rtol=0, atol=1e-5
    )
    earlier = hooked.lens(cache["resid_post", hooked.n_layers - 2])
    assert (earlier - logits).abs().max() > 1e-3  # the check above can fail


def test_the_residual_stream_decomposes(model):
    hooked = HookedModel(model)
    _, c = hooked.run_with_cache(ids((1, 6), seed=2))
    for layer in range(hooked.n_layers):
        if hooked.parallel:  # GPT-NeoX: attention and MLP both read resid_pre
            torch.testing.assert_close(
                c["resid_post", layer], c["resid_pre", layer] + c["attn_out", layer] + c["mlp_out", layer]
            )
        else:
            torch.testing.assert_close(c["resid_mid", layer], c["resid_pre", layer] + c["attn_out", layer])
            torch.testing.assert_close(c["resid_post", layer], c["resid_mid", layer] + c["mlp_out", layer])
        if layer + 1 < hooked.n_layers:
            assert torch.equal(c["resid_post", layer], c["resid_pre", layer + 1])


def test_keys_times_value_vectors_are_the_mlp_output(model):
    hooked = HookedModel(model)
    _, c = hooked.run_with_cache(ids((1, 5), seed=3))
    for layer in range(hooked.n_layers):
        down = hooked.model.get_submodule(
            f"{hooked.spec.layers}.{layer}.{hooked.spec.mlp}.{hooked.spec.down}"
        )
        bias = down.bias if down.bias is not None else 0
        want = c["post", layer] @ hooked.mlp_values(layer) + bias
        out = hooked.blocks[layer].get_submodule(hooked.spec.mlp_out) if hooked.spec.mlp_out else down
        if out is not down:  # Gemma 2 / 3, OLMo 2: the stream gets the norm of the down projection's output
            want = out(want)
        torch.testing.assert_close(want, c["mlp_out", layer], rtol=1e-4, atol=1e-5)
        assert c["post", layer].shape[-1] == hooked.d_mlp
    assert torch.equal(
        c["post", 0],
        hooked.run_with_cache(ids((1, 5), seed=3), ["blocks.0.mlp.hook_key"])[1]["blocks.0.mlp.hook_key"],
    )


def test_per_head_hooks_have_head_shapes_and_zero_values_give_zero_z(model):
    hooked = HookedModel(model)
    x = ids((2, 5), seed=4)
    _, c = hooked.run_with_cache(x)
    assert c["z", 0].shape == (2, 5, hooked.n_heads, hooked.d_head)
    assert c["q", 0].shape == (2, 5, hooked.n_heads, hooked.d_head)
    assert c["v", 0].shape == (2, 5, hooked.n_kv_heads, hooked.d_head)
    _, zc = hooked.run_with_cache(
        x, ["blocks.0.attn.hook_z"], fwd_hooks=[("blocks.0.attn.hook_v", lambda v, h: torch.zeros_like(v))]
    )
    # z = pattern @ v (+ nothing): zero values give zero head outputs; GPT-2/NeoX add the value bias inside v
    assert zc["blocks.0.attn.hook_z"].abs().max() == 0


def test_attention_patterns_are_causal_distributions_and_eager_is_restored(model):
    hooked = HookedModel(model)
    before = model.config._attn_implementation
    _, c = hooked.run_with_cache(ids((2, 6), seed=5), lambda n: n.endswith("hook_pattern"))
    assert model.config._attn_implementation == before
    pattern = c["pattern", 1]
    assert pattern.shape == (2, hooked.n_heads, 6, 6)
    torch.testing.assert_close(pattern.sum(-1), torch.ones(2, hooked.n_heads, 6))
    assert pattern.triu(1).abs().max() == 0
    assert model.config._attn_implementation == before


def test_an_intervention_changes_the_logits_and_identity_does_not(model):
    hooked = HookedModel(model)
    x = ids((1, 6), seed=6)
    reference = hooked(x)
    outside_attention = [n for n, p in hooked.hook_dict.items() if p.kind != "inner"]  # those switch to eager
    same = hooked.run_with_hooks(
        x, [(lambda n: n in outside_attention and not n.endswith("resid_mid"), lambda a, h: a.clone())]
    )
    assert torch.equal(same, reference)
    zeroed = hooked.run_with_hooks(x, [("blocks.0.hook_mlp_out", lambda a, h: torch.zeros_like(a))])
    assert (zeroed - reference).abs().max() > 1e-4


def test_hooks_are_removed_after_an_exception_in_a_hook_or_in_the_body(model):
    hooked = HookedModel(model)
    before = all_hooks(model)

    def explode(act, hook):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        hooked.run_with_hooks(
            ids((1, 4)), [(lambda n: True, lambda a, h: None), ("blocks.1.hook_mlp_out", explode)]
        )
    assert all_hooks(model) == before
    calls = []
    implementation = model.config._attn_implementation
    with pytest.raises(KeyError):
        with hooked.hooks([(lambda n: "pattern" in n or "mlp_out" in n, lambda a, h: calls.append(h.name))]):
            assert (
                len(all_hooks(model)) > len(before) and model.config._attn_implementation == HOOKED_ATTENTION
            )
            raise KeyError("body")
    assert all_hooks(model) == before and model.config._attn_implementation == implementation
    hooked(ids((1, 4)))
    assert calls == []  # the attention-internal hooks are gone too


def test_generate_works_with_and_after_hooks():
    model = tiny_llama(seed=1, layers=2)
    hooked = HookedModel(model)
    x = ids((1, 4), seed=7)
    kwargs = dict(max_new_tokens=5, do_sample=False, pad_token_id=0)
    reference = model.generate(x, **kwargs)
    calls = []
    with hooked.hooks([("blocks.0.hook_resid_post", lambda a, h: calls.append(a.shape[1]))]):
        assert torch.equal(hooked.generate(x, **kwargs), reference)
    assert calls[0] == 4 and set(calls[1:]) == {1}  # prefill, then one token per step (KV cache)
    assert torch.equal(model.generate(x, **kwargs), reference)


def test_unknown_hook_names_list_close_matches(zoo):
    hooked = HookedModel(tiny_llama(seed=0, layers=2))
    with pytest.raises(ValueError, match=r"blocks\.0\.hook_resid_post"):
        hooked.run_with_cache(ids((1, 3)), ["blocks.0.hook_resid_psot"])
    with pytest.raises(ValueError, match=r"2 blocks \(0\.\.1\)"):
        hooked.run_with_hooks(ids((1, 3)), [("blocks.7.hook_resid_pre", lambda a, h: None)])
    with pytest.raises(ValueError, match="parallel"):
        HookedModel(zoo.neox()).hook_point("blocks.0.hook_resid_mid")
    with pytest.raises(ValueError, match="unknown short hook name"):
        act_name("resid", 0)


def test_bad_hook_returns_and_inputs_raise():
    hooked = HookedModel(tiny_llama(seed=0, layers=2))
    with pytest.raises(ValueError, match=r"returned shape \(1, 3, 5\), expected \(1, 3, 64\)"):
        hooked.run_with_hooks(ids((1, 3)), [("blocks.0.hook_resid_pre", lambda a, h: a[..., :5])])
    with pytest.raises(TypeError, match="None or a tensor"):
        hooked.run_with_hooks(ids((1, 3)), [("blocks.0.hook_resid_pre", lambda a, h: 3.0)])
    with pytest.raises(TypeError, match="pairs"):
        hooked.run_with_hooks(ids((1, 3)), ["blocks.0.hook_resid_pre"])
    with pytest.raises(TypeError, match="LongTensor"):
        hooked(ids((1, 3)).float())
    with pytest.raises(ValueError, match=r"\[0, 256\)"):
        hooked(torch.tensor([[1, 256]]))
    with pytest.raises(TypeError, match=r"nn\.Module"):
        HookedModel("gpt2")


def test_an_unmapped_architecture_says_how_to_add_it():
    model = tiny_llama(seed=0, layers=2)
    model.config.model_type = "my_llama"
    with pytest.raises(
        ValueError, match=r"'my_llama' has no hook map.*register_architecture\('my_llama', ArchSpec"
    ):
        HookedModel(model)
    register_architecture("my_llama", ARCHITECTURES["llama"])
    try:
        assert HookedModel(model).n_layers == 2
    finally:
        del ARCHITECTURES["my_llama"]


def test_smollm2_wrapped_logits_equal_unwrapped_exactly():
    from icml_tools.assets import smollm2

    model, tok = smollm2()
    x = torch.tensor([tok("The capital of France is")["input_ids"]])
    with torch.no_grad():
        reference = model(x).logits
    hooked = HookedModel(model)
    logits, cache = hooked.run_with_cache(x, lambda n: "resid" in n)
    assert torch.equal(logits, reference)
    torch.testing.assert_close(hooked.lens(cache["resid_post", 29]), reference, rtol=0, atol=1e-4)
    # the attention internals on the real model: untouched, eager's logits bit for bit; the model still says Paris
    inner = [n for n, p in hooked.hook_dict.items() if p.kind == "inner"]
    with torch.no_grad():
        hooked_logits = hooked.run_with_hooks(x, [(inner, lambda a, h: None)])
    assert torch.equal(hooked_logits, _eager_logits(model, x))
    assert tok.decode(hooked_logits[0, -1].argmax()) == " Paris"


# TransformerLens habits (issue 23, item 4: names_filter, unknown keywords, add_hook/reset_hooks, hook_dict,
# to_tokens)


@pytest.mark.parametrize(
    "names_filter",
    [
        "blocks.1.hook_resid_post",
        ["blocks.0.hook_resid_pre", "blocks.1.mlp.hook_post"],
        lambda name: name.endswith("hook_attn_out"),
    ],
    ids=["string", "list", "callable"],
)
def test_run_with_cache_names_filter_caches_exactly_the_filtered_names(model, names_filter):
    hooked = HookedModel(model)
    x = ids((1, 5), seed=9)
    logits, cache = hooked.run_with_cache(x, names_filter=names_filter)
    expected = hooked.resolve(names_filter)
    assert sorted(cache.keys()) == sorted(expected) and len(expected) >= 1
    _, by_names = hooked.run_with_cache(x, expected)
    for name in expected:
        assert torch.equal(cache[name], by_names[name])
    assert torch.equal(logits, hooked(x))
    with pytest.raises(ValueError, match="names_filter"):
        hooked.run_with_cache(x, expected, names_filter=expected)


def test_unknown_keywords_raise_instead_of_reaching_the_model(model):
    hooked = HookedModel(model)
    x = ids((1, 4))
    with pytest.raises(TypeError, match="names_filtr"):
        hooked.run_with_cache(x, names_filtr="blocks.0.hook_resid_pre")
    with pytest.raises(TypeError, match="return_type"):
        hooked(x, return_type="loss")
    mask = torch.ones_like(x)
    assert torch.equal(hooked(x, attention_mask=mask), hooked(x))  # a keyword the forward takes


def test_add_hook_stays_until_reset_hooks(model):
    hooked = HookedModel(model)
    x = ids((1, 6), seed=3)
    reference = hooked(x)
    before, implementation = all_hooks(model), model.config._attn_implementation
    hooked.add_hook("blocks.0.hook_mlp_out", lambda a, h: torch.zeros_like(a))
    hooked.add_hook(lambda n: n.endswith("hook_pattern"), lambda a, h: None)  # switches to eager
    first, second = hooked(x), hooked(x)
    assert torch.equal(first, second) and (first - reference).abs().max() > 1e-4
    assert model.config._attn_implementation == HOOKED_ATTENTION
    hooked.reset_hooks()
    assert all_hooks(model) == before
    assert torch.equal(hooked(x), reference)
    assert model.config._attn_implementation == implementation
    with pytest.raises(ValueError, match="unknown hook name"):
        hooked.add_hook("blocks.0.hook_nope", lambda a, h: None)
    assert all_hooks(model) == before  # nothing half-attached
    with pytest.raises(TypeError, match="fn"):
        hooked.add_hook("blocks.0.hook_mlp_out", "not a function")


def test_add_hook_inside_a_pattern_context_keeps_firing_after_it(model):
    # leaving the context switched the attention implementation back while the added pattern hook was still
    # attached: it silently stopped firing
    hooked = HookedModel(model)
    x = ids((1, 5), seed=4)
    implementation = model.config._attn_implementation
    calls = []
    with hooked.hooks([("blocks.0.attn.hook_pattern", lambda a, h: None)]):
        hooked.add_hook("blocks.1.attn.hook_pattern", lambda a, h: calls.append(h.name))
        hooked(x)
    assert model.config._attn_implementation == HOOKED_ATTENTION
    hooked(x)
    assert calls == ["blocks.1.attn.hook_pattern"] * 2
    with pytest.raises(KeyError):  # a context that raises, the other way round
        with hooked.hooks([("blocks.0.attn.hook_attn_scores", lambda a, h: None)]):
            raise KeyError("body")
    hooked(x)
    assert calls == ["blocks.1.attn.hook_pattern"] * 3
    hooked.reset_hooks()
    assert model.config._attn_implementation == implementation
    hooked(x)
    assert calls == ["blocks.1.attn.hook_pattern"] * 3


def test_hook_dict_lists_every_point_in_forward_order(model):
    hooked = HookedModel(model)
    assert list(hooked.hook_dict) == hooked.hook_names
    assert all(point.name == name for name, point in hooked.hook_dict.items())
    hooked.hook_dict.clear()  # a copy: the model's points are untouched
    assert hooked.hook_names


def test_to_tokens_uses_the_tokenizer():
    from transformers import AutoTokenizer

    from icml_tools.assets import smollm2_dir

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir())
    hooked = HookedModel(tiny_llama(seed=0, vocab=len(tokenizer)), tokenizer=tokenizer)
    tokens = hooked.to_tokens("The capital of France is")
    assert tokens.tolist() == [tokenizer("The capital of France is")["input_ids"]]
    assert hooked(tokens).shape == (1, tokens.shape[1], len(tokenizer))
    with pytest.raises(ValueError, match="different lengths"):
        hooked.to_tokens(["a", "a much longer text than the first"])
    with pytest.raises(ValueError, match="tokenizer"):
        HookedModel(tiny_llama(seed=0)).to_tokens("hi")
    with pytest.raises(ValueError, match="text"):
        hooked.to_tokens("")


def _norm(hooked, layer, which):
    block = hooked.blocks[layer]
    return getattr(block, {"ln1": hooked.spec.ln1, "ln2": hooked.spec.ln2}[which])


@pytest.mark.parametrize("which", ["ln1", "ln2"])
def test_norm_hooks_have_transformer_lens_semantics(model, which):
    hooked = HookedModel(model)
    x = ids((2, 5), seed=4)
    if getattr(hooked.spec, which) is None:  # OLMo 2: no norm before attention or the MLP, so no hooks there
        assert not [n for n in hooked.hook_names if f".{which}." in n]
        return
    norm = _norm(hooked, 1, which)
    source = "blocks.1.hook_resid_pre" if which == "ln1" or hooked.parallel else "blocks.1.hook_resid_mid"
    names = [source, f"blocks.1.{which}.hook_scale", f"blocks.1.{which}.hook_normalized"]
    _, cache = hooked.run_with_cache(x, names)
    inp, scale, normalized = (cache[n] for n in names)
    assert torch.equal(normalized, norm(inp))  # the norm's own output
    if isinstance(norm, torch.nn.LayerNorm):  # GPT-2, GPT-NeoX
        want = ((inp - inp.mean(-1, keepdim=True)).pow(2).mean(-1, keepdim=True) + norm.eps).sqrt()
    else:  # RMSNorm (Llama, Qwen2, OLMo 2: variance_epsilon; Gemma's, scaling by 1 + weight: eps)
        eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))
        want = (inp.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    assert scale.shape == (2, 5, 1)
    torch.testing.assert_close(scale, want, rtol=1e-6, atol=1e-7)
    # a doubled scale halves the normalized stream (up to the bias)
    bias = norm.bias if getattr(norm, "bias", None) is not None else 0.0
    _, doubled = hooked.run_with_cache(x, [names[2]], fwd_hooks=[(names[1], lambda s, h: s * 2)])
    torch.testing.assert_close(doubled[names[2]], (normalized - bias) / 2 + bias, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("arch", ["gpt2", "neox"])
def test_layer_norm_hook_scale_is_finite_in_float16_with_large_residuals(zoo, arch):
    # one residual dimension 300 above the rest: (x - mean)^2 passes float16's 65504; the scale was inf in
    # float16 (the model's own output stays finite) and is now the float32 model's to float16 precision
    lm = getattr(zoo, arch)()
    with torch.no_grad():
        lm.get_input_embeddings().weight[:, 3] += 300.0
    names = ["blocks.0.ln1.hook_scale", "blocks.1.ln2.hook_scale", "ln_final.hook_scale"]
    x = ids((1, 6), seed=2)
    _, want = HookedModel(lm).run_with_cache(x, names)
    _, got = HookedModel(lm.half()).run_with_cache(x, names)
    for name in names:
        assert got[name].dtype == torch.float16
        torch.testing.assert_close(got[name].float(), want[name], rtol=2e-2, atol=0)  # measured < 1e-3


def test_the_lens_takes_float32_vectors_on_a_half_model():
    # steering vectors and SAE decoder rows are float32; the lens raised a dtype mismatch on a bfloat16 model
    lm = tiny_llama(seed=0, layers=2)
    vectors = torch.randn(3, lm.config.hidden_size, generator=torch.Generator().manual_seed(0))
    want = HookedModel(lm).lens(vectors).detach()
    got = HookedModel(lm.to(torch.bfloat16)).lens(vectors).detach()
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want, rtol=0, atol=0.1 * float(want.abs().max()))
    assert HookedModel(lm).lens(vectors.double()).dtype == torch.bfloat16


def test_final_norm_scale_and_gated_pre_linear(model):
    hooked = HookedModel(model)
    x = ids((1, 6), seed=8)
    assert "ln_final.hook_scale" in hooked.hook_names
    if hooked.spec.mlp_up is None:  # GPT-2 and GPT-NeoX MLPs are not gated: TransformerLens has no pre_linear
        assert "blocks.0.mlp.hook_pre_linear" not in hooked.hook_names
        return
    # the MLP's input: ln2's output, or the residual itself where no norm precedes the MLP (OLMo 2)
    mlp_in = "blocks.0.ln2.hook_normalized" if hooked.spec.ln2 else "blocks.0.hook_resid_mid"
    names = [mlp_in, "blocks.0.mlp.hook_pre_linear"]
    _, cache = hooked.run_with_cache(x, names)
    up = hooked.blocks[0].mlp.up_proj
    torch.testing.assert_close(cache[names[1]], up(cache[names[0]]), rtol=0, atol=0)
    _, zeroed = hooked.run_with_cache(
        x, ["blocks.0.hook_mlp_out"], fwd_hooks=[(names[1], lambda a, h: torch.zeros_like(a))]
    )
    assert torch.count_nonzero(zeroed["blocks.0.hook_mlp_out"]) == 0  # gate * 0 through a bias-free down


# TransformerLens' attention internals (issue 23, item 4): hook_rot_q/k, hook_attn_scores, a writable hook_pattern


def _eager_logits(model, x):
    before = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            return model(input_ids=x, use_cache=False).logits
    finally:
        model.set_attn_implementation(before)


def test_attention_internals_untouched_give_eager_logits_bit_for_bit(model):
    hooked = HookedModel(model)
    x = ids((2, 6), seed=12)
    inner = [n for n, p in hooked.hook_dict.items() if p.kind == "inner"]
    assert {n.split(".")[-1] for n in inner} >= {"hook_attn_scores", "hook_pattern"}
    assert hooked.rotary == any(n.endswith("hook_rot_q") for n in inner)  # GPT-2 has no rotary embeddings
    with torch.no_grad():
        logits = hooked.run_with_hooks(x, [(inner, lambda a, h: a.clone())])
    assert torch.equal(logits, _eager_logits(model, x))


def test_scores_softmax_to_the_pattern_and_rotation_keeps_norms(model):
    hooked = HookedModel(model)
    x = ids((1, 5), seed=13)
    names = lambda n: n.startswith("blocks.1.attn.hook_")  # noqa: E731
    _, c = hooked.run_with_cache(x, names)
    scores, pattern = c["blocks.1.attn.hook_attn_scores"], c["blocks.1.attn.hook_pattern"]
    assert scores.shape == pattern.shape == (1, hooked.n_heads, 5, 5)
    torch.testing.assert_close(torch.softmax(scores, -1), pattern)
    if hooked.rotary:
        q, rot_q = c["blocks.1.attn.hook_q"], c["blocks.1.attn.hook_rot_q"]
        k, rot_k = c["blocks.1.attn.hook_k"], c["blocks.1.attn.hook_rot_k"]
        assert rot_q.shape == q.shape and rot_k.shape == k.shape  # (batch, seq, heads or kv heads, d_head)
        torch.testing.assert_close(rot_q.norm(dim=-1), q.norm(dim=-1))  # a rotation (partial in GPT-NeoX)
        torch.testing.assert_close(rot_q[:, 0], q[:, 0])  # position 0: rotation by angle 0
        torch.testing.assert_close(rot_k[:, 0], k[:, 0])


def test_pattern_and_scores_are_writable(model):
    hooked = HookedModel(model)
    x = ids((1, 5), seed=14)

    def first_token_only(pattern, hook):
        out = torch.zeros_like(pattern)
        out[..., 0] = 1.0
        return out

    _, c = hooked.run_with_cache(
        x,
        ["blocks.0.attn.hook_v", "blocks.0.attn.hook_z"],
        fwd_hooks=[("blocks.0.attn.hook_pattern", first_token_only)],
    )
    v, z = c["blocks.0.attn.hook_v"], c["blocks.0.attn.hook_z"]  # z: every position reads value 0
    groups = hooked.n_heads // hooked.n_kv_heads
    want = v[:, :1].repeat_interleave(groups, dim=2).expand_as(z)
    torch.testing.assert_close(z, want)
    _, flat = hooked.run_with_cache(
        x, ["blocks.0.attn.hook_pattern"], fwd_hooks=[("blocks.0.attn.hook_attn_scores", lambda s, h: s * 0)]
    )
    torch.testing.assert_close(flat["blocks.0.attn.hook_pattern"], torch.full((1, hooked.n_heads, 5, 5), 0.2))


def test_esm_masked_lm_is_mapped(zoo):
    """ESM-2 (EsmForMaskedLM): residual inside its modules, bidirectional rotary attention, a whole output
    head. Logits are the model's own; the stream decomposes; patterns equal output_attentions."""
    model = zoo.esm()
    hooked = HookedModel(model)
    x = torch.randint(4, 24, (2, 10), generator=torch.Generator().manual_seed(0))
    x[:, 0], x[:, -1], x[0, 4] = 0, 2, 32  # <cls> ... <eos>, one <mask>
    reference = model(input_ids=x).logits
    logits, cache = hooked.run_with_cache(x)
    assert torch.equal(hooked(x), reference) and torch.equal(logits, reference)
    for layer in range(hooked.n_layers):
        mid = cache["resid_pre", layer] + cache["attn_out", layer]
        assert torch.allclose(cache["resid_mid", layer], mid, atol=1e-6)
        assert torch.allclose(cache["resid_post", layer], mid + cache["mlp_out", layer], atol=1e-6)
        dense = model.esm.encoder.layer[layer].attention.output.dense
        assert torch.allclose(dense(cache["z", layer].flatten(2)), cache["attn_out", layer], atol=1e-6)
    assert torch.allclose(hooked.lens(cache["resid_post", hooked.n_layers - 1]), reference, atol=1e-5)
    assert hooked.rotary and hooked.d_mlp == 128
    names = [act_name("pattern", layer) for layer in range(hooked.n_layers)]
    _, patterns = hooked.run_with_cache(x, names)
    model.set_attn_implementation("eager")
    attentions = model(input_ids=x, output_attentions=True).attentions
    for layer, name in enumerate(names):
        assert torch.allclose(patterns[name], attentions[layer], atol=1e-6)
        assert float(patterns[name][0, :, 2, 5:].sum()) > 0  # bidirectional: keys after the query


# Gemma, Gemma 2, Gemma 3 (text) and OLMo 2: the embedding scale, softcaps, sliding windows, norms of the sublayer
# outputs, query / key norms


def _new_arch(zoo, arch):
    factories = {"gemma": zoo.gemma, "gemma2": zoo.gemma2, "gemma3_text": zoo.gemma3, "olmo2": zoo.olmo2}
    return {**factories, "qwen3": zoo.qwen3}[arch]()


@pytest.mark.parametrize("arch", ["gemma", "gemma2", "gemma3_text", "olmo2"])
def test_hooked_attention_is_eager_bit_for_bit_past_the_sliding_window(zoo, arch):
    model = _new_arch(zoo, arch)
    hooked = HookedModel(model)
    x = ids((2, 12), seed=20)  # 12 tokens: past Gemma 2 / 3's 4-token window on layer 0
    inner = [n for n, p in hooked.hook_dict.items() if p.kind == "inner"]
    names = [act_name("pattern", 0), act_name("pattern", 1)]
    with torch.no_grad():
        logits, cache = hooked.run_with_cache(x, names, fwd_hooks=[(inner, lambda a, h: a.clone())])
        default = model(
            input_ids=x, use_cache=False
        ).logits  # the model's own implementation (Gemma 2: eager)
        assert torch.equal(hooked(x), default)
    assert torch.equal(logits, _eager_logits(model, x))
    torch.testing.assert_close(logits, default, rtol=0, atol=1e-5)
    assert model.config._attn_implementation != HOOKED_ATTENTION
    far = torch.arange(12)[:, None] - torch.arange(12)[None, :] >= 4  # keys 4 or more tokens back
    if getattr(model.config, "sliding_window", None) is not None:  # layer 0 slides, layer 1 sees everything
        assert model.config.sliding_window == 4 and model.config.layer_types[:2] == [
            "sliding_attention",
            "full_attention",
        ]
        assert cache[names[0]][..., far].abs().max() == 0
    else:
        assert cache[names[0]][..., far].min() > 0
    assert cache[names[1]][..., far].min() > 0


def test_gemma2_softcaps_attention_scores_and_the_lens_softcaps_logits(zoo):
    model = zoo.gemma2()
    hooked = HookedModel(model)
    cap, final_cap = model.config.attn_logit_softcapping, model.config.final_logit_softcapping
    x = ids((2, 12), seed=21)
    names = [act_name("attn_scores", 1), act_name("resid_post", 1)]
    logits, cache = hooked.run_with_cache(x, names)
    live = cache[names[0]][cache[names[0]] > -2 * cap]  # the unmasked scores
    assert live.abs().max() <= cap and live.abs().max() > cap / 2  # capped, and the cap bites
    attns = [block.self_attn for block in hooked.blocks]
    for attn in attns:  # the model without the attention softcap computes other logits: the bit-for-bit
        attn.attn_logit_softcapping = None  # equality with eager attention above needs the softcap
    try:
        uncapped = _eager_logits(model, x)
    finally:
        for attn in attns:
            attn.attn_logit_softcapping = cap
    assert (uncapped - logits).abs().max() > 1e-2
    # the lens applies the final softcap as the model does: the last resid_post gives the logits
    resid = cache[names[1]]
    assert torch.equal(hooked.lens(resid), logits)
    raw = hooked.unembed(hooked.final_norm(resid))
    assert (raw - logits).abs().max() > 0.5 and logits.abs().max() < final_cap
    torch.testing.assert_close(final_cap * torch.tanh(raw / final_cap), logits)
    from icml_interp.lens import logit_lens

    assert torch.equal(logit_lens(model, x)[-1], logits)


@pytest.mark.parametrize("arch", ["gemma", "gemma2", "gemma3_text"])
def test_gemma_hook_embed_is_the_scaled_embedding_that_block_0_receives(zoo, arch):
    model = _new_arch(zoo, arch)
    hooked = HookedModel(model)
    x = ids((2, 6), seed=22)
    _, c = hooked.run_with_cache(x, ["hook_embed", "blocks.0.hook_resid_pre"])
    assert torch.equal(c["hook_embed"], c["blocks.0.hook_resid_pre"])
    weight = model.model.embed_tokens.weight
    assert torch.equal(c["hook_embed"], weight[x] * torch.tensor(hooked.d_model**0.5, dtype=weight.dtype))


@pytest.mark.parametrize("arch", ["gemma2", "gemma3_text", "olmo2"])
def test_attn_out_and_mlp_out_are_the_normed_outputs_the_stream_gets(zoo, arch):
    model = _new_arch(zoo, arch)
    hooked = HookedModel(model)
    x = ids((2, 7), seed=23)
    _, c = hooked.run_with_cache(x)
    for layer, block in enumerate(hooked.blocks):
        projected = block.self_attn.o_proj(c["z", layer].flatten(2))
        assert torch.equal(c["attn_out", layer], block.post_attention_layernorm(projected))
        assert (projected - c["attn_out", layer]).abs().max() > 0.1  # the norm matters
        mlp_in = c["resid_mid", layer]
        if arch != "olmo2":  # Gemma: a norm before the MLP too (ln2); OLMo 2 has none
            mlp_in = block.pre_feedforward_layernorm(mlp_in)
            assert torch.equal(c["ln2_normalized", layer], mlp_in)
        assert torch.equal(c["mlp_out", layer], block.post_feedforward_layernorm(block.mlp(mlp_in)))
        assert torch.equal(c["resid_mid", layer], c["resid_pre", layer] + c["attn_out", layer])
        assert torch.equal(c["resid_post", layer], c["resid_mid", layer] + c["mlp_out", layer])
        v_in = c["resid_pre", layer] if arch == "olmo2" else c["ln1_normalized", layer]
        assert torch.equal(c["v", layer], block.self_attn.v_proj(v_in).unflatten(-1, (-1, hooked.d_head)))
    # writing attn_out writes what is added to the stream
    _, w = hooked.run_with_cache(
        x,
        ["blocks.1.hook_resid_mid"],
        fwd_hooks=[("blocks.1.hook_attn_out", lambda a, h: torch.zeros_like(a))],
    )
    assert torch.equal(w["blocks.1.hook_resid_mid"], c["resid_pre", 1])


@pytest.mark.parametrize("arch", ["gemma3_text", "olmo2", "qwen3"])
def test_hook_q_and_k_are_the_normed_queries_and_keys_that_rotary_rotates(zoo, arch):
    model = _new_arch(zoo, arch)
    hooked = HookedModel(model)
    x = ids((2, 6), seed=24)
    shorts = ("resid_pre", "q", "k", "rot_q", "rot_k")
    _, c = hooked.run_with_cache(x, [act_name(s, 1) for s in shorts])
    block = hooked.blocks[1]
    attn = block.self_attn
    inp = c["resid_pre", 1] if hooked.spec.ln1 is None else block.input_layernorm(c["resid_pre", 1])
    for which, proj, norm in (("q", attn.q_proj, attn.q_norm), ("k", attn.k_proj, attn.k_norm)):
        raw = proj(inp).unflatten(-1, (-1, hooked.d_head))
        if arch == "olmo2":  # one norm over the whole projection, then the split into heads
            want = norm(proj(inp)).unflatten(-1, (-1, hooked.d_head))
        else:  # Gemma 3, Qwen 3: each head's norm
            want = norm(raw)
        torch.testing.assert_close(c[which, 1], want, rtol=1e-6, atol=1e-6)
        assert (raw - c[which, 1]).abs().max() > 0.1  # hook_q / hook_k sit after the norm
        # written there, the values reach the rotary embedding unnormed again: twice q, twice rot_q
        _, doubled = hooked.run_with_cache(
            x, [act_name(f"rot_{which}", 1)], fwd_hooks=[(act_name(which, 1), lambda a, h: 2 * a)]
        )
        torch.testing.assert_close(doubled[f"rot_{which}", 1], 2 * c[f"rot_{which}", 1])


def test_gemma_final_norm_scale_uses_one_plus_weight(zoo):
    hooked = HookedModel(zoo.gemma2())
    x = ids((1, 5), seed=25)
    names = ["blocks.1.hook_resid_post", "ln_final.hook_scale", "ln_final.hook_normalized"]
    _, c = hooked.run_with_cache(x, names)
    resid = c[names[0]]
    torch.testing.assert_close(c[names[1]], (resid.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt())
    weight = hooked.final_norm.weight
    assert weight.abs().min() > 0  # the factory's random norm weights: 1 + w differs from w
    torch.testing.assert_close(c[names[2]], resid / c[names[1]] * (1 + weight))
    _, doubled = hooked.run_with_cache(x, [names[2]], fwd_hooks=[(names[1], lambda s, h: s * 2)])
    torch.testing.assert_close(doubled[names[2]], c[names[2]] / 2)


def test_arch_spec_checks_the_norm_fields():
    from dataclasses import replace

    llama = ARCHITECTURES["llama"]
    with pytest.raises(TypeError, match="qk_norm"):
        replace(llama, qk_norm=("q_norm",))
    with pytest.raises(ValueError, match="qk_norm_layout"):
        replace(llama, qk_norm=("q_norm", "k_norm"), qk_norm_layout="bsh")
    with pytest.raises(ValueError, match="norm_weight_offset"):
        replace(llama, norm_weight_offset=float("nan"))
    with pytest.raises(TypeError, match="norm_weight_offset"):
        replace(llama, norm_weight_offset="1")
    assert ARCHITECTURES["gemma2"].norm_weight_offset == 1.0 and ARCHITECTURES["olmo2"].ln1 is None


# Gemma 3 vision-language models (Gemma3ForConditionalGeneration, model_type "gemma3"): what AutoModelForCausalLM
# loads for Gemma 3 4B and larger; the hooks sit on its language model


def test_gemma3_vision_language_model_hooks_its_language_model(zoo, one_torch_thread):
    vlm, text = zoo.gemma3_vlm(final_logit_softcapping=5.0)  # in the text config; the wrapper does not cap
    hooked = HookedModel(vlm)  # before: ValueError, architecture 'gemma3' has no hook map
    assert (hooked.n_layers, hooked.n_heads, hooked.n_kv_heads, hooked.d_head) == (2, 4, 2, 16)
    assert hooked.spec.qk_norm == ("q_norm", "k_norm") and hooked.spec.norm_weight_offset == 1.0
    # text only: every hook holds what the same weights in Gemma3ForCausalLM (tested above) compute there
    x = ids((2, 9), seed=40) % 250
    names = HookedModel(text).hook_names
    assert hooked.hook_names == names
    with torch.no_grad():
        logits, c = hooked.run_with_cache(x, names)  # hook_pattern among them: the hooked eager attention
        _, want = HookedModel(text).run_with_cache(x, names)
        assert torch.equal(logits, _eager_outputs(vlm, x).logits)
        own = vlm(input_ids=x, use_cache=False).logits
        assert torch.equal(hooked(x), own)
        assert torch.equal(own, text(x).logits)  # the same language model; neither applies a final softcap
    for name in names:
        # measured max |difference| 0.0 on every hook (the same modules, the same order of operations)
        torch.testing.assert_close(c[name], want[name], rtol=0, atol=1e-6, msg=name)
    # with an image: the model's own logits, eager attention's pattern (the image's four tokens attend to each
    # other both ways), and the logit lens of the last resid_post gives the logits (no softcap: the model has
    # none, although its text config names one)
    image = torch.tensor([[2, 253, 255, 255, 255, 255, 254, 5, 6, 7]] * 2)
    inputs = {
        "pixel_values": torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(41)),
        "token_type_ids": (image == 255).long(),
    }
    patterns = [act_name("pattern", layer) for layer in range(2)]
    with torch.no_grad():
        logits, c = hooked.run_with_cache(image, [*patterns, act_name("resid_post", 1)], **inputs)
        eager = _eager_outputs(vlm, image, **inputs)
        assert torch.equal(logits, eager.logits)
        assert torch.equal(hooked(image, **inputs), vlm(input_ids=image, use_cache=False, **inputs).logits)
    for layer, name in enumerate(patterns):
        torch.testing.assert_close(c[name], eager.attentions[layer], rtol=0, atol=1e-6)
        assert c[name][:, :, 2, 5].min() > 0  # the first image token sees the last one
    assert torch.equal(hooked.lens(c["resid_post", 1]), logits)
    # writes: zeroing image-token positions of resid_pre changes the logits after them
    zero = hooked.run_with_hooks(
        image, [(act_name("resid_pre", 1), lambda a, h: a.index_fill(1, torch.arange(2, 6), 0.0))], **inputs
    )
    assert (zero[:, 7:] - logits[:, 7:]).abs().max() > 1e-3


# LLaVA (model_type "llava") with a Gemma-family language model: the hooks follow the language model's family


@pytest.mark.parametrize("arch", ["gemma", "gemma2", "gemma3_text"])
def test_llava_with_a_gemma_language_model_hooks_it_as_gemma(zoo, arch, one_torch_thread):
    text = _new_arch(zoo, arch)
    vlm = zoo.llava(text)
    text.config.final_logit_softcapping = None  # Gemma 2's causal LM caps its logits, LLaVA's head does not
    hooked, reference = (
        HookedModel(vlm),
        HookedModel(text),
    )  # the standalone causal LM, mapped as tested above
    assert hooked.spec.norm_weight_offset == 1.0  # before: 0.0, Llama's norms whatever the language model
    names = reference.hook_names
    assert hooked.hook_names == names
    x = ids((2, 9), seed=43) % 250
    with torch.no_grad():
        logits, c = hooked.run_with_cache(x, names)
        want_logits, want = reference.run_with_cache(x, names)
        assert torch.equal(hooked(x), vlm(input_ids=x, use_cache=False).logits)
    torch.testing.assert_close(logits, want_logits, rtol=0, atol=1e-6)
    for name in names:
        # measured max |difference| 0.0 on every hook; before, Gemma 2 / 3 differed by 0.9 to 16.8 at ln2,
        # hook_attn_out, hook_resid_mid, hook_mlp_out (Gemma 3: hook_q / hook_k too), Llama's paths there
        torch.testing.assert_close(c[name], want[name], rtol=0, atol=1e-6, msg=name)

    # writes: a written norm scale rebuilds the norm's output with Gemma's 1 + weight (before: weight alone;
    # Gemma's logits moved 0.058 to 3.0 away from the causal LM's, Gemma 2 / 3's 2.4 to 21), a written attn_out
    # is what the stream gets.
    # Each position's own factor: a scale written alike at every position would be normed away behind Gemma 2 / 3's
    # norm of the attention output
    def write(a, hook):
        return a * torch.linspace(0.5, 2.0, a.shape[1])[:, None]

    for name in [
        "blocks.1.ln1.hook_scale",
        "blocks.0.ln2.hook_scale",
        "ln_final.hook_scale",
        "blocks.0.hook_attn_out",
    ]:
        with torch.no_grad():
            got = hooked.run_with_hooks(x, [(name, write)])
            ref = reference.run_with_hooks(x, [(name, write)])
        assert (ref - want_logits).abs().max() > 1e-3, name  # the write matters: measured 0.033 to 10.3
        torch.testing.assert_close(got, ref, rtol=0, atol=1e-6, msg=name)  # measured max |difference| 0.0


def test_hooked_attention_gives_back_each_sub_models_own_implementation(zoo, one_torch_thread):
    """LLaVA with a Gemma 2 language model: Gemma 2 has no SDPA, so its language model runs eager beside the
    vision tower's sdpa; after hook_pattern each gets its own back (before: ValueError, the wrapper's sdpa set on
    Gemma 2, and the language model left on the hooked attention)."""
    text = zoo.gemma2()
    vlm = zoo.llava(text)
    own = {name: m.config._attn_implementation for name, m in vlm.named_modules() if hasattr(m, "config")}
    assert own["model.language_model"] == "eager" and own["model.vision_tower"] == "sdpa"
    hooked = HookedModel(vlm)
    x = ids((2, 9), seed=44) % 250
    names = [act_name("pattern", layer) for layer in range(2)]
    with torch.no_grad():
        _, c = hooked.run_with_cache(x, names)
        attentions = text(input_ids=x, use_cache=False, output_attentions=True).attentions  # eager's
    assert {
        name: m.config._attn_implementation for name, m in vlm.named_modules() if hasattr(m, "config")
    } == own
    for layer, name in enumerate(names):
        torch.testing.assert_close(
            c[name], attentions[layer], rtol=0, atol=1e-6
        )  # measured max |difference| 0.0


def _eager_outputs(model, x, **kwargs):
    before = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        return model(input_ids=x, use_cache=False, output_attentions=True, **kwargs)
    finally:
        model.set_attn_implementation(before)


def test_gpt2_hook_pos_embed_is_per_prompt(zoo, one_torch_thread):
    """TransformerLens' hook_pos_embed is (batch, seq, d_model); GPT-2's own lookup is (1, seq, d_model)."""
    model = zoo.gpt2()
    hooked = HookedModel(model)
    x = ids((3, 7), seed=42)
    names = ["hook_embed", "hook_pos_embed", "blocks.0.hook_resid_pre"]
    wpe = model.transformer.wpe.weight.detach()
    with torch.no_grad():
        logits, c = hooked.run_with_cache(x, names)
        assert torch.equal(logits, model(x).logits)
        assert c["hook_pos_embed"].shape == (3, 7, 64)  # before: (1, 7, 64)
        assert torch.equal(c["hook_pos_embed"], wpe[:7].expand(3, 7, 64))
        assert torch.equal(c["hook_embed"] + c["hook_pos_embed"], c["blocks.0.hook_resid_pre"])
        _, one = hooked.run_with_cache(x[:1], names)
        assert one["hook_pos_embed"].shape == (1, 7, 64)

        # one prompt's positions moved on by one, written in place (returning None) or returned
        def in_place(pos, hook):
            pos[2] = wpe[1:8]

        def returned(pos, hook):
            return torch.cat([pos[:2], wpe[None, 1:8]])

        shifted = torch.tensor([list(range(7))] * 2 + [list(range(1, 8))])
        want = model(input_ids=x, position_ids=shifted).logits
        for fn in (in_place, returned):
            # measured max |difference| 0.0 (the same sums as the model's own lookup of those positions)
            torch.testing.assert_close(
                hooked.run_with_hooks(x, [("hook_pos_embed", fn)]), want, rtol=0, atol=1e-6
            )
        assert (want[2] - logits[2]).abs().max() > 1e-2 and torch.equal(want[:2], logits[:2])


def test_qwen3_hook_q_and_k_are_what_its_rotary_embedding_receives(zoo, one_torch_thread):
    """Qwen 3 norms each head's queries and keys (q_norm / k_norm on (batch, seq, heads, d_head)) before the
    rotary embedding: hook_q / hook_k are those norms' outputs, as for Gemma 3 and OLMo 2. Before, Qwen 3 used
    Llama's map: hook_q / hook_k were the raw projections (max |difference| from q_norm's output 4.0, k_norm's
    3.1), hook_rot_q was not the rotation of hook_q (off by 4.0), and a write went through the norm again (twice
    hook_q moved the logits by 2.7e-6, against 0.13 for twice the normed queries)."""
    from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb

    model = zoo.qwen3()
    hooked = HookedModel(model)
    assert hooked.spec.qk_norm == ("q_norm", "k_norm") and hooked.spec.qk_norm_layout == "bshd"
    x = ids((2, 6), seed=43)
    attn = hooked.blocks[1].self_attn
    own = {}

    def keep(name):
        return lambda module, args, output: own.__setitem__(name, output)

    handles = [attn.q_norm.register_forward_hook(keep("q")), attn.k_norm.register_forward_hook(keep("k"))]
    try:
        with torch.no_grad():
            reference = model(input_ids=x, use_cache=False).logits
    finally:
        for handle in handles:
            handle.remove()
    with torch.no_grad():
        # reads: the model's own q_norm / k_norm outputs, bit for bit (no attention internal cached: the model's
        # own attention implementation, the same pass)
        logits, c = hooked.run_with_cache(x, [act_name("q", 1), act_name("k", 1)])
        assert torch.equal(logits, reference)
        assert torch.equal(c["q", 1], own["q"]) and torch.equal(c["k", 1], own["k"])
        # hook_rot_q / hook_rot_k are Qwen 3's rotary embedding applied to hook_q / hook_k (measured 0.0)
        names = [act_name(s, 1) for s in ("q", "k", "rot_q", "rot_k")]
        _, r = hooked.run_with_cache(x, names)
        cos, sin = model.model.rotary_emb(r["q", 1], torch.arange(6)[None].expand(2, 6))
        rot_q, rot_k = apply_rotary_pos_emb(r["q", 1].transpose(1, 2), r["k", 1].transpose(1, 2), cos, sin)
        assert torch.equal(r["rot_q", 1], rot_q.transpose(1, 2))
        assert torch.equal(r["rot_k", 1], rot_k.transpose(1, 2))
        # writes: the value written is what the rotary embedding receives. The read value written back leaves
        # the logits as they were, bit for bit; a perturbed or doubled write gives the logits of the model whose
        # q_norm / k_norm output is perturbed or doubled (measured max |difference| 0.0; the writes move the
        # logits by 0.065 to 0.14; before, by the old map, got and want differed by 0.13 to 0.20)
        for which, norm in (("q", attn.q_norm), ("k", attn.k_norm)):
            shape = c[which, 1].shape
            assert torch.equal(
                hooked.run_with_hooks(x, [(act_name(which, 1), lambda a, h: a.clone())]), reference
            )
            delta = 0.5 * torch.randn(shape, generator=torch.Generator().manual_seed(7))
            for change in (lambda a, delta=delta: a + delta, lambda a: 2 * a):
                got = hooked.run_with_hooks(x, [(act_name(which, 1), lambda a, h, change=change: change(a))])
                handle = norm.register_forward_hook(lambda m, a, o, change=change: change(o))
                try:
                    want = model(input_ids=x, use_cache=False).logits
                finally:
                    handle.remove()
                assert (want - reference).abs().max() > 1e-2
                torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    # LLaVA with a Qwen 3 language model maps it as Qwen 3 (its query / key norms included)
    vlm = zoo.llava(model)
    assert HookedModel(vlm).spec.qk_norm == ("q_norm", "k_norm")
    with torch.no_grad():
        _, v = HookedModel(vlm).run_with_cache(x, [act_name("q", 1)])
    assert torch.equal(v["q", 1], c["q", 1])
