"""Decoding a frozen causal LM with latent memories written into its key-value cache at step boundaries
(our reconstruction of DLMR's inference; VisMem's insertion: memory tokens are fed as ``inputs_embeds`` into
the running cache, then decoding resumes).

:class:`MemorySession` works with any Hugging Face causal LM (``cache`` or ``past_key_values``): the user
drives it with :meth:`~MemorySession.start` (the prompt, with a mask of its image tokens),
:meth:`~MemorySession.feed` (tokens, generated or given) and :meth:`~MemorySession.boundary` (a step
boundary: the finished segment is folded into the reasoning memory, the router or a forced action picks the
memories, and they are inserted), or lets :meth:`~MemorySession.decode` run greedy decoding with boundaries
at chosen token ids. Rows of a batch that insert fewer tokens than others get masked padding slots: they
take cache slots but no attention, so a sliding-window model counts them in its window (Hugging Face's
window is over cache slots).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from icml_agents.dlmr.formers import ReasoningMemory, VisualMemory
from icml_agents.dlmr.router import MODES, Router
from icml_agents.latent import LatentLM
from icml_agents.validation import check_choice, check_int, check_tensor


@dataclass
class Boundary:
    """What one boundary inserted: per row the action ``index`` into the router's actions (``None`` when the
    action was forced without a router), its ``logp`` under the router (``None`` when forced), the ``modes``,
    the memory ``tokens`` inserted and the boundary ``state`` the router reads (its ``router_layer``)."""

    index: torch.Tensor | None
    logp: torch.Tensor | None
    modes: list[str]
    tokens: torch.Tensor
    state: torch.Tensor


class MemorySession:
    """One batch of decoding with memories. ``layer`` picks the hidden states the formers read and
    ``router_layer`` those the router reads (indices into the model's ``hidden_states``: 0 is the input
    embeddings, -1 the last layer)."""

    def __init__(
        self,
        model,
        visual: VisualMemory | None = None,
        reasoning: ReasoningMemory | None = None,
        router: Router | None = None,
        *,
        layer: int = -1,
        router_layer: int = -1,
    ):
        self.lm = LatentLM(model)
        for name, m, cls in (
            ("visual", visual, VisualMemory),
            ("reasoning", reasoning, ReasoningMemory),
            ("router", router, Router),
        ):
            if m is not None and not isinstance(m, cls):
                raise TypeError(f"{name} must be a {cls.__name__} or None, got {type(m).__name__}")
        self.visual, self.reasoning, self.router = visual, reasoning, router
        width = self.lm.embedding_weight.shape[1]
        for name, m in (("visual", visual), ("reasoning", reasoning)):
            if m is None:
                continue
            sides = (
                (m.former.d_in, m.former.d_out)
                if isinstance(m, VisualMemory)
                else (m.writer.d_in, m.reader.d_out)
            )
            if sides != (width, width):
                raise ValueError(
                    f"{name} must read and write the model's width {width}, got hidden={sides[0]}, "
                    f"embed_dim={sides[1]}"
                )
            if router is not None and max(router.sizes) > m.max_tokens:
                raise ValueError(f"router sizes {router.sizes} must fit {name}'s max_tokens={m.max_tokens}")
        if router is not None and router.hidden != width:
            raise ValueError(f"router must read the model's width {width}, got hidden={router.hidden}")
        n_layers = getattr(getattr(model, "config", None), "num_hidden_layers", None)
        low = -(n_layers + 1) if n_layers else -4096
        self.layer = check_int(layer, "layer", low, -low - 1)
        self.router_layer = check_int(router_layer, "router_layer", low, -low - 1)
        self.mask: torch.Tensor | None = None
        self.cache: Any = None
        self.next_pos: torch.Tensor = torch.zeros(0, dtype=torch.long)
        self.state: torch.Tensor = torch.zeros(0)
        self.router_state: torch.Tensor = torch.zeros(0)
        self.logits: torch.Tensor = torch.zeros(0)

    # -- running the model -------------------------------------------------------------------------------
    def _run(self, embeds: torch.Tensor, new_mask: torch.Tensor):
        assert self.mask is not None
        positions = self.next_pos[:, None] + new_mask.long().cumsum(dim=1) - 1
        mask = torch.cat([self.mask, new_mask.long()], dim=1)
        kwargs = {
            "inputs_embeds": embeds,
            "attention_mask": mask,
            "position_ids": positions.clamp_min(0),
            "output_hidden_states": True,
        }
        if self.lm.cache_arg is not None:
            kwargs.update({self.lm.cache_arg: self.cache, "use_cache": True})
        else:
            raise TypeError("model must support a key-value cache (a cache or past_key_values argument)")
        out = self.lm.model(**kwargs)
        self.cache = getattr(out, self.lm.cache_arg)
        self.mask = mask
        self.next_pos = self.next_pos + new_mask.long().sum(dim=1)
        self.embeds.append(embeds)
        hidden = out.hidden_states[self.layer]
        # the states are the hidden states at each row's last real position of this call
        last = new_mask.long().cumsum(dim=1).argmax(dim=1)
        rows = torch.arange(embeds.shape[0], device=embeds.device)
        has = new_mask.any(dim=1)
        self.state = torch.where(has[:, None], hidden[rows, last], self.state)
        routed = out.hidden_states[self.router_layer][rows, last]
        self.router_state = torch.where(has[:, None], routed, self.router_state)
        self.logits = torch.where(has[:, None], out.logits[rows, last], self.logits)
        return out.logits, hidden

    def start(self, ids, image_mask=None) -> torch.Tensor:
        """Prefill the prompt ``ids`` ``(B, T)`` (no padding); ``image_mask`` ``(B, T)`` marks the image tokens
        the visual memory reads. Returns the next-token logits ``(B, V)``."""
        ids = check_tensor(ids, "ids", ndim=2)
        if ids.dtype not in (torch.int64, torch.int32) or ids.shape[0] < 1 or ids.shape[1] < 1:
            raise ValueError(
                f"ids must be a non-empty (batch, tokens) integer tensor, got {ids.dtype} {tuple(ids.shape)}"
            )
        batch = ids.shape[0]
        dev = ids.device
        self.cache = None
        self.mask = torch.zeros(batch, 0, dtype=torch.long, device=dev)
        self.next_pos = torch.zeros(batch, dtype=torch.long, device=dev)
        self.embeds: list[torch.Tensor] = []
        self.inserted = torch.zeros(batch, dtype=torch.long, device=dev)
        self.boundaries: list[Boundary] = []
        hidden_size = self.lm.embedding_weight.shape[1]
        self.state = torch.zeros(batch, hidden_size, device=dev)
        self.router_state = torch.zeros(batch, hidden_size, device=dev)
        self.logits = torch.zeros(batch, self.lm.vocab_size, device=dev)
        self.segment: list[torch.Tensor] = []
        self.slots = None if self.reasoning is None else self.reasoning.init_state(batch)
        _, hidden = self._run(self.lm.embed(ids), torch.ones_like(ids, dtype=torch.bool))
        self.image_hidden = self.image_mask = None
        if image_mask is not None:
            image_mask = check_tensor(image_mask, "image_mask", tuple(ids.shape)).bool()
            counts = image_mask.sum(dim=1)
            if int(counts.min()) < 1:
                raise ValueError("image_mask must mark at least one image token in every row")
            width = int(counts.max())
            order = torch.argsort((~image_mask).long(), dim=1, stable=True)[:, :width]
            self.image_hidden = hidden.gather(1, order[:, :, None].expand(-1, -1, hidden.shape[-1]))
            self.image_mask = torch.arange(width, device=dev)[None] < counts[:, None]
        return self.logits

    def _need_start(self) -> None:
        if self.mask is None:
            raise RuntimeError("call start() before feed(), boundary() or decode()")

    def feed(self, ids) -> torch.Tensor:
        """Append tokens ``(B, n)`` (generated or given); returns the next-token logits ``(B, V)``."""
        self._need_start()
        ids = check_tensor(ids, "ids", ndim=2)
        if ids.shape[0] != self.mask.shape[0] or ids.shape[1] < 1:  # type: ignore[union-attr]
            raise ValueError(f"ids must have shape ({self.mask.shape[0]}, n >= 1), got {tuple(ids.shape)}")  # type: ignore[union-attr]
        _, hidden = self._run(self.lm.embed(ids), torch.ones_like(ids, dtype=torch.bool))
        self.segment.append(hidden)
        return self.logits

    # -- memories ----------------------------------------------------------------------------------------
    def _actions(self, action, greedy: bool, generator):
        batch = self.state.shape[0]
        if action is None:
            if self.router is None:
                raise ValueError("action is required without a router")
            index, logp = self.router.sample(self.router_state, greedy=greedy, generator=generator)
            acts = [self.router.actions[int(i)] for i in index]
            return index, logp, acts
        if isinstance(action, str):
            action = (action, 0 if action == "none" else None)
        if not isinstance(action, tuple) or len(action) != 2:
            raise ValueError(f"action must be None, a mode, or a (mode, size) pair, got {action!r}")
        mode, size = action
        check_choice(mode, "action mode", MODES)
        if mode != "none":
            sources: dict[str, list[Any]] = {
                "visual": [self.visual],
                "reasoning": [self.reasoning],
                "both": [self.visual, self.reasoning],
            }
            if any(m is None for m in sources[mode]):
                raise ValueError(f"action mode {mode!r} needs the memory it names, which this session lacks")
            limit = min(m.max_tokens for m in sources[mode])
            size = limit if size is None else check_int(size, "action size", 1, limit)
        index = None
        if self.router is not None and (mode == "none" or size in self.router.sizes):
            index = torch.full(
                (batch,),
                self.router.action_index(mode, size or 0),
                dtype=torch.long,
                device=self.state.device,
            )
        return index, None, [(mode, int(size or 0))] * batch

    def boundary(self, action=None, *, rows=None, greedy: bool = True, generator=None) -> Boundary:
        """A step boundary. The segment fed since the last boundary is folded into the reasoning memory;
        then ``action`` (``"none"``, a mode, or ``(mode, size)``; ``None`` asks the router, greedily unless
        ``greedy=False``) decides which memory tokens to insert into the cache; rows where the boolean
        ``rows`` ``(B,)`` is False insert nothing."""
        self._need_start()
        if self.reasoning is not None and self.segment:
            seg = torch.cat(self.segment, dim=1)
            self.slots = self.reasoning.write(self.slots, seg)
        self.segment = []
        state = self.router_state
        index, logp, acts = self._actions(action, greedy, generator)
        batch, dev = self.state.shape[0], self.state.device
        if rows is not None:
            rows = check_tensor(rows, "rows", (batch,)).bool()
            acts = [a if bool(r) else ("none", 0) for a, r in zip(acts, rows, strict=True)]
            if index is not None:
                index = torch.where(rows.to(index.device), index, torch.zeros_like(index))
        parts, masks = [], []
        for kind, memory in (("visual", self.visual), ("reasoning", self.reasoning)):
            sizes = torch.tensor([s if m in (kind, "both") else 0 for m, s in acts], device=dev)
            top = int(sizes.max())
            if top == 0:
                continue
            if memory is None:  # only the router can get here: a forced action is checked in _actions
                raise ValueError(f"the router chose a {kind} memory, which this session lacks")
            if kind == "visual":
                if self.image_hidden is None:
                    raise ValueError("a visual memory needs the image: pass image_mask to start()")
                tokens = memory(self.image_hidden, self.state, self.image_mask, n_tokens=top)
            else:
                tokens = memory(self.slots, self.state, n_tokens=top)
            parts.append(tokens)
            masks.append(torch.arange(top, device=dev)[None] < sizes[:, None])
        count = torch.zeros(batch, dtype=torch.long, device=dev)
        if parts:
            emb = torch.cat(parts, dim=1)
            keep = torch.cat(masks, dim=1)
            count = keep.long().sum(dim=1)
            order = torch.argsort((~keep).long(), dim=1, stable=True)[
                :, : int(count.max())
            ]  # real tokens first
            emb = emb.gather(1, order[:, :, None].expand(-1, -1, emb.shape[-1]))
            keep = keep.gather(1, order)
            self._run(emb.to(self.lm.embedding_weight.dtype), keep)
        self.inserted = self.inserted + count
        record = Boundary(index, logp, [m for m, _ in acts], count, state)
        self.boundaries.append(record)
        return record

    # -- conveniences --------------------------------------------------------------------------------------
    @property
    def cache_tokens(self) -> torch.Tensor:
        """Real (unmasked) tokens written into the cache per row: the prompt, the fed tokens and the memories."""
        self._need_start()
        return self.mask.sum(dim=1)  # type: ignore[union-attr]

    def replay(self) -> torch.Tensor:
        """The logits of everything fed so far, recomputed in one forward without the cache (a check on the
        cached run: memories as input embeddings at their places)."""
        self._need_start()
        mask = self.mask
        assert mask is not None
        positions = (mask.cumsum(dim=1) - 1).clamp_min(0)
        out = self.lm.model(
            inputs_embeds=torch.cat(self.embeds, dim=1), attention_mask=mask, position_ids=positions
        )
        return out.logits

    def decode(
        self, max_new_tokens: int, boundary_ids=(), eos_token_id: int | None = None, action=None
    ) -> torch.Tensor:
        """Greedy decoding of up to ``max_new_tokens`` tokens ``(B, n)``, with a boundary after every
        generated token in ``boundary_ids`` (all rows at once: a row that emits one triggers the boundary for
        the batch, rows without it get nothing inserted unless ``action`` forces it). Rows that emitted
        ``eos_token_id`` keep emitting it."""
        self._need_start()
        check_int(max_new_tokens, "max_new_tokens", 1, 1 << 20)
        try:
            boundary_ids = list(boundary_ids)
        except TypeError:
            raise TypeError(f"boundary_ids must be an iterable of token ids, got {boundary_ids!r}") from None
        marks = torch.tensor(
            sorted({check_int(b, "boundary_ids", 0, self.lm.vocab_size - 1) for b in boundary_ids}),
            dtype=torch.long,
        )
        if eos_token_id is not None:
            check_int(eos_token_id, "eos_token_id", 0, self.lm.vocab_size - 1)
        out = []
        done = torch.zeros(self.state.shape[0], dtype=torch.bool, device=self.state.device)
        for _ in range(max_new_tokens):
            token = self.logits.argmax(dim=-1)
            if eos_token_id is not None:
                token = torch.where(done, torch.full_like(token, eos_token_id), token)
                done = done | (token == eos_token_id)
            out.append(token)
            self.feed(token[:, None])
            if bool(done.all()):
                break
            hit = torch.isin(token, marks.to(token.device))
            if bool(hit.any()):
                if action is not None:
                    self.boundary(action)
                elif self.router is not None:
                    self.boundary(rows=hit)
        return torch.stack(out, dim=1)
