"""Streaming activations from any torch module through hooks, as tokens, with a shuffling buffer.

A *target* says where activations are read (and, for :func:`splice`, written):

- a ``(HookedModel, hook_name)`` pair: a TransformerLens-style hook point; the model runs as ``hooked(input)``;
- a ``(model, submodule)`` or ``(model, "dotted.module.path")`` pair: a plain torch forward hook on the
  submodule; the model runs as ``model(input)`` (``model(**input)`` for a dict);
- a bare ``nn.Module``: hooked and run itself (or run ``forward(input)`` if given, e.g. the parent model).

Layouts (how an activation tensor becomes tokens ``(n, d)``):

=========  =============================  ==========================================================
layout     activation                     tokens
=========  =============================  ==========================================================
``nd``     ``(n, d)``                     as is
``btd``    ``(B, T, D)`` hidden states    ``(B*T, D)`` (padding dropped with an ``attention_mask``)
``bchw``   ``(B, C, H, W)`` feature maps  ``(B*H*W, C)``: each pixel is a token of its C channels
``bhwc``   ``(B, H, W, C)``               ``(B*H*W, C)``
``auto``   by number of dimensions        2 -> nd, 3 -> btd, 4 -> bchw
=========  =============================  ==========================================================
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
from torch import nn

from icml_interp.validation import check_bool, check_choice, check_inputs, check_int, check_type, eval_mode

LAYOUTS = ("auto", "nd", "btd", "bchw", "bhwc")


class _Captured(Exception):
    """Raised inside a hook to stop the forward pass once the activation is captured."""


def resolve_layout(x: torch.Tensor, layout: str, name: str = "x") -> str:
    """The concrete layout of ``x`` (``auto`` resolved by ``x.ndim``; ``name`` is the argument named in errors)."""
    check_choice(layout, "layout", LAYOUTS)
    expected = {"nd": 2, "btd": 3, "bchw": 4, "bhwc": 4}
    if layout == "auto":
        by_ndim = {2: "nd", 3: "btd", 4: "bchw"}
        if x.ndim not in by_ndim:
            raise ValueError(
                f"layout='auto' handles activations with 2, 3 or 4 dimensions, got {name} of shape "
                f"{tuple(x.shape)}; pass layout= one of {LAYOUTS[1:]}"
            )
        return by_ndim[x.ndim]
    if x.ndim != expected[layout]:
        raise ValueError(
            f"layout {layout!r} expects a {expected[layout]}-d activation, got {name} of shape {tuple(x.shape)}"
        )
    return layout


def to_tokens(x: torch.Tensor, layout: str = "auto") -> torch.Tensor:
    """Activations as tokens ``(n, d)``: ``(B, C, H, W) -> (B*H*W, C)``, ``(B, T, D) -> (B*T, D)``. A pure
    re-layout: the values (NaN and inf included) and the dtype are passed through unchanged."""
    check_type(x, "x", torch.Tensor, "a torch.Tensor")
    layout = resolve_layout(x, layout)
    if layout == "bchw":
        return x.permute(0, 2, 3, 1).reshape(-1, x.shape[1])
    return x.reshape(-1, x.shape[-1])


def from_tokens(tokens: torch.Tensor, like: torch.Tensor, layout: str = "auto") -> torch.Tensor:
    """The inverse of :func:`to_tokens`: tokens ``(n, d)`` back to the shape of ``like`` (values unchanged)."""
    check_type(tokens, "tokens", torch.Tensor, "a torch.Tensor")
    check_type(like, "like", torch.Tensor, "a torch.Tensor")
    layout = resolve_layout(like, layout, "like")
    width = like.shape[1] if layout == "bchw" else like.shape[-1]
    n = like.numel() // width if width else 0
    if tokens.ndim != 2 or tuple(tokens.shape) != (n, width):
        raise ValueError(
            f"tokens must be ({n}, {width}) to take the shape of like {tuple(like.shape)} ({layout}), "
            f"got {tuple(tokens.shape)}"
        )
    if layout == "bchw":
        b, c, h, w = like.shape
        return tokens.reshape(b, h, w, c).permute(0, 3, 1, 2)
    return tokens.reshape(like.shape)


class HookTarget:
    """Where to hook and how to run the model (see the module docstring)."""

    def __init__(self, module, forward: Callable | None, hook: str, what: str = "module"):
        from icml_interp.hooks import HookedModel

        check_choice(hook, "hook", ("output", "input"))
        if forward is not None and not callable(forward):
            raise TypeError(f"forward must be callable(input) or None, got {type(forward).__name__}")
        self.hook = hook
        self.hooked: HookedModel | None = None  # set for a (HookedModel, hook_name) target
        self.name: str | None = None
        self.model: Callable[..., Any]  # what runs the input
        self.module: nn.Module  # the hooked module of a plain-module target
        if isinstance(module, tuple):
            if len(module) != 2:
                raise ValueError(
                    f"{what} must be a module or a (model, submodule or name) pair, got {module!r}"
                )
            parent, sub = module
            if isinstance(parent, HookedModel):
                if not isinstance(sub, str):
                    raise TypeError(f"with a HookedModel, {what}[1] must be a hook name, got {sub!r}")
                try:
                    parent.hook_point(sub)  # raises with close matches for unknown names
                except ValueError as err:
                    raise ValueError(f"{what}[1]: {err}") from None
                if hook != "output":
                    raise ValueError(
                        "hook='input' applies to plain modules; use the hook point's name instead"
                    )
                self.hooked, self.name, self.model = parent, sub, parent
            elif isinstance(parent, nn.Module):
                self.model = parent
                if isinstance(sub, str):
                    try:
                        sub = parent.get_submodule(sub)
                    except AttributeError as exc:
                        raise ValueError(
                            f"{what}[1]={module[1]!r} is not a submodule of the model: {exc}"
                        ) from None
                if not isinstance(sub, nn.Module):
                    raise TypeError(
                        f"{what}[1] must be an nn.Module or a dotted name, got {type(sub).__name__}"
                    )
                self.module = sub
            else:
                raise TypeError(
                    f"{what}[0] must be a HookedModel or an nn.Module, got {type(parent).__name__}"
                )
        elif isinstance(module, HookedModel):
            raise TypeError(f"{what}: pass a HookedModel as a (hooked_model, hook_name) pair")
        elif isinstance(module, nn.Module):
            self.module, self.model = module, module
        else:
            raise TypeError(
                f"{what} must be an nn.Module, a (model, submodule or dotted name) pair or a "
                f"(HookedModel, hook_name) pair, got {type(module).__name__}"
            )
        self.forward = forward

    def models(self) -> list[nn.Module]:
        """The modules a pass runs, as far as they can be known: the target's model (a HookedModel's model), and
        the module behind ``forward`` (the module itself or the owner of a bound method; a HookedModel's model,
        also where ``forward`` is the HookedModel).
        What another ``forward`` runs is unknown here."""
        from icml_interp.hooks import HookedModel

        model = self.hooked.model if self.hooked is not None else self.model
        found = [model] if isinstance(model, nn.Module) else []
        forward = self.forward
        owner = (
            forward if isinstance(forward, (nn.Module, HookedModel)) else getattr(forward, "__self__", None)
        )
        if isinstance(owner, HookedModel):
            owner = owner.model
        if isinstance(owner, nn.Module) and all(owner is not m for m in found):
            found.append(owner)
        return found

    def run(self, inp):
        if self.forward is not None:
            return self.forward(inp)
        if isinstance(inp, dict):
            return self.model(**inp)
        return self.model(inp)

    @contextmanager
    def patch(self, fn: Callable[[torch.Tensor], torch.Tensor | None]):
        """Attach ``fn(activation) -> None | new activation`` at the target for the duration of the context."""
        if self.hooked is not None:
            with self.hooked.hooks([(self.name, lambda t, _hook: fn(t))]):
                yield
            return
        if self.hook == "output":

            def out_hook(_module, _args, output):
                tensor = output[0] if isinstance(output, tuple) else output
                new = fn(tensor)
                if new is None:
                    return None
                return (new, *output[1:]) if isinstance(output, tuple) else new

            handle = self.module.register_forward_hook(out_hook)
        else:

            def in_hook(_module, args):
                new = fn(args[0])
                return None if new is None else (new, *args[1:])

            handle = self.module.register_forward_pre_hook(in_hook)
        try:
            yield
        finally:
            handle.remove()


class ActivationSource:
    """Activations of ``module`` on ``inputs``, as shuffled token batches for SAE training.

    ``inputs``: a tensor (split along dim 0 into model batches of ``input_batch_size``), a list of model inputs
    (tensors or dicts of keyword arguments), or any iterable of them (a one-shot iterator is read once:
    training stops when it is exhausted). ``forward(input)`` runs the model (default: see the module
    docstring). The forward pass stops right after the target module (``stop_early``), so later layers cost
    nothing. ``drop_first_tokens`` drops the first tokens of each sequence (``btd`` layout; e.g. the BOS
    token, whose residual norm is an outlier in most LMs): the first real tokens of its ``attention_mask``
    where a dict input has one (left or right padding alike), else the first positions. The shuffling buffer
    holds ``buffer_tokens`` tokens and hands out the older half, shuffled, each time it is full.

    The model runs in eval mode (as SAELens' ``ActivationsStore`` reads a TransformerLens model, which has no
    dropout, or a Hugging Face model as ``from_pretrained`` leaves it), with every submodule's mode restored
    after each pass, also when it raises: a model left in training mode (built from a config, or after
    ``.train()``) would otherwise hand out activations with dropout, a fresh mask each read. The modules put
    in eval mode are the target's model and, where ``forward`` is a module or one of its bound methods, that
    module (a ``HookedModel`` or its method: its model); what another ``forward`` runs keeps its mode.
    ``keep_mode=True`` runs the model in the mode it is in (e.g. to collect activations under dropout on
    purpose).
    """

    def __init__(
        self,
        module,
        inputs,
        *,
        layout: str = "auto",
        buffer_tokens: int = 65536,
        shuffle: bool = True,
        seed: int = 0,
        forward: Callable | None = None,
        hook: str = "output",
        input_batch_size: int = 8,
        drop_first_tokens: int = 0,
        stop_early: bool = True,
        keep_mode: bool = False,
    ):
        self._target = None if module is None else HookTarget(module, forward, hook)
        check_inputs(inputs)
        check_choice(layout, "layout", LAYOUTS)
        check_int(buffer_tokens, "buffer_tokens", minimum=1)
        check_int(input_batch_size, "input_batch_size", minimum=1)
        check_int(drop_first_tokens, "drop_first_tokens", minimum=0)
        check_int(seed, "seed")
        check_bool(shuffle, "shuffle")
        check_bool(stop_early, "stop_early")
        check_bool(keep_mode, "keep_mode")
        self.keep_mode = bool(keep_mode)
        self.inputs, self.layout, self.buffer_tokens = inputs, layout, buffer_tokens
        self.shuffle, self.seed, self.input_batch_size = bool(shuffle), seed, input_batch_size
        self.drop_first_tokens, self.stop_early = drop_first_tokens, bool(stop_early)
        self._d_in: int | None = None
        self._one_shot = not isinstance(inputs, (torch.Tensor, Sequence))
        self._used = False

    @property
    def hook_name(self) -> str | None:
        """The hook point's name for a ``(HookedModel, hook_name)`` target (TransformerLens/SAELens names, such
        as ``blocks.3.hook_resid_post``), else None."""
        return None if self._target is None else self._target.name

    @property
    def model_name(self) -> str | None:
        """The Hugging Face name or folder of a ``(HookedModel, hook_name)`` target's model, if it has one."""
        if self._target is None or self._target.hooked is None:
            return None
        config = getattr(self._target.hooked.model, "config", None)
        return getattr(config, "_name_or_path", None) or None

    @classmethod
    def from_activations(
        cls,
        activations: torch.Tensor,
        *,
        layout: str = "auto",
        buffer_tokens: int = 65536,
        shuffle: bool = True,
        seed: int = 0,
        chunk_tokens: int = 8192,
    ) -> ActivationSource:
        """A source over precomputed activations (any layout; ``(n, d)`` tokens stay as they are)."""
        check_type(activations, "activations", torch.Tensor, "a torch.Tensor")
        tokens = to_tokens(activations, layout)
        if tokens.shape[0] == 0:
            raise ValueError(f"activations is empty (shape {tuple(activations.shape)}): nothing to train on")
        src = cls(
            None,
            tokens,
            layout="nd",
            buffer_tokens=buffer_tokens,
            shuffle=shuffle,
            seed=seed,
            input_batch_size=chunk_tokens,
        )
        return src

    # ------------------------------------------------------------------ reading
    @property
    def reiterable(self) -> bool:
        """Whether the source can be read more than once (tensor or sequence inputs)."""
        return not self._one_shot

    def _model_inputs(self) -> Iterator:
        if isinstance(self.inputs, torch.Tensor):
            yield from self.inputs.split(min(self.input_batch_size, max(self.inputs.shape[0], 1)))
        else:
            if self._one_shot:
                if self._used:
                    raise RuntimeError(
                        "this source's inputs are a one-shot iterator that has been read already"
                    )
                self._used = True
            yield from self.inputs

    def _capture(self, inp) -> torch.Tensor:
        assert self._target is not None  # only sources over a model capture
        target = self._target
        store: dict[str, torch.Tensor] = {}

        def grab(tensor):
            store["x"] = tensor.detach()
            if self.stop_early:
                raise _Captured

        with torch.no_grad(), target.patch(grab), ExitStack() as modes:
            if not self.keep_mode:
                for model in target.models():
                    modes.enter_context(eval_mode(model))
            try:
                target.run(inp)
            except _Captured:
                pass
            except (RuntimeError, TypeError, ValueError, IndexError) as err:
                if "x" in store:
                    pass  # the activation was captured; the rest of the model is not needed
                else:
                    raise ValueError(
                        f"the model failed on one of inputs ({type(err).__name__}: {err}); check that inputs "
                        "are what the model takes (dtype, shape, device)"
                    ) from err
        if "x" not in store:
            raise RuntimeError(
                "the forward pass never reached the hooked module (is module inside the model that forward runs?)"
            )
        return store["x"]

    def _tokens_of(self, act: torch.Tensor, inp) -> torch.Tensor:
        layout = resolve_layout(act, self.layout)
        if layout == "btd":
            keep = torch.ones(act.shape[:2], dtype=torch.bool, device=act.device)
            mask = inp.get("attention_mask") if isinstance(inp, dict) else None
            if isinstance(mask, torch.Tensor) and tuple(mask.shape) == tuple(act.shape[:2]):
                real = mask.to(act.device).bool()
                # the first real tokens of each row, wherever the padding is: with left padding (Hugging
                # Face's side for generation) the first positions are padding and the BOS comes later
                keep &= real & (real.long().cumsum(1) > self.drop_first_tokens)
            else:
                keep[:, : self.drop_first_tokens] = False
            return act[keep]
        return to_tokens(act, layout)

    def chunks(self) -> Iterator[torch.Tensor]:
        """Token tensors ``(n_i, d)`` in input order, one per model input (one pass, float32 on the CPU)."""
        seen = 0
        for inp in self._model_inputs():
            if self._target is None:  # precomputed tokens
                tokens = inp
            else:
                tokens = self._tokens_of(self._capture(inp), inp)
            tokens = tokens.to("cpu", torch.float32)
            if tokens.ndim != 2:
                raise ValueError(
                    "activations must become (n, d) tokens (with module=None, inputs must be precomputed "
                    f"(n, d) tokens), got shape {tuple(tokens.shape)}"
                )
            if self._d_in is None:
                self._d_in = tokens.shape[1]
            elif tokens.shape[1] != self._d_in:
                raise ValueError(
                    f"activation width changed from {self._d_in} to {tokens.shape[1]} between inputs"
                )
            if tokens.shape[0]:
                if not bool(torch.isfinite(tokens).all()):
                    warnings.warn(
                        "the source's activations contain NaN or inf (from non-finite inputs, or an overflow "
                        "in the model)",
                        RuntimeWarning,
                        stacklevel=2,
                    )
                seen += tokens.shape[0]
                yield tokens
        if seen == 0:
            raise ValueError("the source yielded no activations (empty inputs, or every token was dropped)")

    @property
    def d_in(self) -> int:
        """The activation width (runs the model on the first input if not known yet)."""
        if self._d_in is None:
            if self._one_shot:
                raise RuntimeError("d_in of a one-shot source is known only after reading starts")
            next(iter(self.chunks()))
        assert self._d_in is not None  # chunks() sets it with the first tokens
        return self._d_in

    def take(self, n_tokens: int | None = None) -> torch.Tensor:
        """The first ``n_tokens`` tokens (all if None), in input order, unshuffled: ``(n, d)``."""
        if n_tokens is not None:
            check_int(n_tokens, "n_tokens", minimum=1)
        out, total = [], 0
        for tokens in self.chunks():
            out.append(tokens)
            total += tokens.shape[0]
            if n_tokens is not None and total >= n_tokens:
                break
        return torch.cat(out)[:n_tokens]

    def batches(
        self, batch_size: int, *, cycle: bool = False, drop_last: bool = True
    ) -> Iterator[torch.Tensor]:
        """Token batches ``(batch_size, d)`` through the shuffling buffer; with ``cycle`` a re-iterable source is
        read again from the start when it runs out (a one-shot source simply ends)."""
        check_int(batch_size, "batch_size", minimum=1)
        gen = torch.Generator().manual_seed(self.seed)
        passes = itertools.count() if (cycle and self.reiterable) else range(1)
        capacity = max(self.buffer_tokens, 2 * batch_size)
        buffer: list[torch.Tensor] = []
        held = 0
        for _ in passes:
            for tokens in self.chunks():
                buffer.append(tokens)
                held += tokens.shape[0]
                if held >= capacity:
                    pool = torch.cat(buffer)
                    if self.shuffle:
                        pool = pool[torch.randperm(pool.shape[0], generator=gen)]
                    n_out = (pool.shape[0] // 2) // batch_size * batch_size
                    yield from pool[:n_out].split(min(batch_size, max(n_out, 1)))
                    buffer, held = [pool[n_out:]], pool.shape[0] - n_out
        if held:
            pool = torch.cat(buffer)
            if self.shuffle:
                pool = pool[torch.randperm(pool.shape[0], generator=gen)]
            for batch in pool.split(min(batch_size, max(pool.shape[0], 1))):
                if batch.shape[0] == batch_size or not drop_last:
                    yield batch


@contextmanager
def splice(
    sae,
    target,
    *,
    layout: str = "auto",
    forward: Callable | None = None,
    keep_error: bool = False,
    edit: Callable[[torch.Tensor], torch.Tensor] | None = None,
    hook: str = "output",
):
    """Within the context, the activation at ``target`` is replaced by its SAE reconstruction.

    ``target`` is as for :class:`ActivationSource`. Yields a callable ``run(input)`` that runs the model.
    ``edit(f) -> f'`` optionally changes the latents first; ``keep_error=True`` adds the SAE's error term
    back, so the activation becomes ``h + (f' - f) W_dec`` (exactly ``h`` without an ``edit``).
    """
    from icml_interp.sae.model import SAE

    check_type(sae, "sae", SAE, "an icml_interp.sae.SAE")
    check_choice(layout, "layout", LAYOUTS)
    check_bool(keep_error, "keep_error")
    if edit is not None and not callable(edit):
        raise TypeError(f"edit must be None or callable(f) -> f', got {type(edit).__name__}")
    tgt = HookTarget(target, forward, hook, "target")

    def replace(h):
        tokens = to_tokens(h, layout)
        f = sae.encode(tokens)
        f_new = edit(f) if edit is not None else f
        if keep_error:
            new = tokens + (f_new - f) @ sae.W_dec
        else:
            new = sae.decode(f_new)
        return from_tokens(new.to(h.dtype), h, layout)

    with tgt.patch(replace):
        yield tgt.run
