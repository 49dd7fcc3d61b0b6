"""Where the experts of a Hugging Face MoE causal LM live, how its router chooses them, and how to remove some.

transformers 5 stores a sparse-MoE block the same way in every family it supports here: ``block.gate`` is the
router (``weight`` of shape ``(E, hidden)``, ``top_k``) and ``block.experts`` holds every expert's weights as
3-D tensors (``gate_up_proj`` ``(E, 2I, hidden)``, ``down_proj`` ``(E, hidden, I)``). What differs between
families is the routing rule and the config field that counts experts; :data:`ARCHITECTURES` maps each
``config.model_type`` to an :class:`MoESpec` (add your own with :func:`register_moe_architecture`):

- ``"softmax"`` (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE): softmax over the router logits, top-k, the top-k
  weights renormalized to sum to 1 when the model does so (Mixtral always; the others by ``norm_topk_prob``);
- ``"sigmoid"`` (DeepSeek-V3 style): sigmoid scores, top-k chosen on scores + ``e_score_correction_bias``,
  weights = scores (renormalized by ``norm_topk_prob``) × ``routed_scaling_factor``; one expert group only
  (group-limited routing is refused: removing experts would change the groups).

Removing experts (:func:`slice_experts`) slices the router's rows and every expert tensor: the router then
softmaxes (or sigmoids) over the survivors and renormalizes its top-k over them, exactly what :func:`route`
computes with the removed experts' logits set to ``-inf`` (NAEE's simulation); tests check the two agree.
A shared expert (Qwen2-MoE, DeepSeek) is never removed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from icml_compress.quantize.model import check_path, load_generation_config, write_directory
from icml_compress.validation import check_float_tensor, check_instance, check_tensor

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = [
    "ARCHITECTURES",
    "MoELayer",
    "MoESpec",
    "find_moe_layers",
    "load_pruned",
    "register_moe_architecture",
    "route",
    "save_pruned",
]


@dataclass(frozen=True)
class MoESpec:
    """How one model family routes: ``count_attr`` (the config field with the number of routed experts),
    ``routing`` (``"softmax"`` or ``"sigmoid"``) and ``always_normalize`` (top-k weights renormalized even
    when the router has no ``norm_topk_prob``: Mixtral)."""

    count_attr: str
    routing: str = "softmax"
    always_normalize: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.count_attr, str) or not self.count_attr.isidentifier():
            raise TypeError(f"count_attr must be the name of a config field (a str), got {self.count_attr!r}")
        if not isinstance(self.always_normalize, bool):
            raise TypeError(f"always_normalize must be a bool, got {self.always_normalize!r}")
        if self.routing not in ("softmax", "sigmoid"):
            raise ValueError(f"routing must be 'softmax' or 'sigmoid', got {self.routing!r}")


ARCHITECTURES: dict[str, MoESpec] = {
    "mixtral": MoESpec("num_local_experts", "softmax", always_normalize=True),
    "qwen2_moe": MoESpec("num_experts"),
    "qwen3_moe": MoESpec("num_experts"),
    "olmoe": MoESpec("num_experts"),
    "deepseek_v3": MoESpec("n_routed_experts", "sigmoid"),
}


def register_moe_architecture(model_type: str, spec: MoESpec) -> None:
    """Teach :func:`find_moe_layers` a family whose blocks have the transformers-5 layout (``gate`` + ``experts``)."""
    check_instance(model_type, "model_type", str)
    check_instance(spec, "spec", MoESpec)
    ARCHITECTURES[model_type] = spec


@dataclass
class MoELayer:
    """One sparse-MoE block: ``index`` (its decoder layer), ``name`` (module path), ``block``, and its spec."""

    index: int
    name: str
    block: nn.Module
    spec: MoESpec

    @property
    def router(self) -> Any:
        return self.block.gate

    @property
    def experts(self) -> Any:
        return self.block.experts

    @property
    def n_experts(self) -> int:
        return int(self.router.weight.shape[0])

    @property
    def top_k(self) -> int:
        return int(self.router.top_k)

    def normalize(self) -> bool:
        return self.spec.always_normalize or bool(getattr(self.router, "norm_topk_prob", False))

    @torch.no_grad()
    def expert_outputs(self, x: torch.Tensor, experts: list[int] | None = None) -> torch.Tensor:
        """``(len(experts), tokens, hidden)``: each expert's (unweighted) output on every token ``x``
        ``(tokens, hidden)``, computed by the model's own experts module (so its activation and layout apply)."""
        ids = range(self.n_experts) if experts is None else experts
        ones = torch.ones(x.shape[0], 1, dtype=x.dtype, device=x.device)
        outs = []
        for e in ids:
            index = torch.full((x.shape[0], 1), int(e), dtype=torch.long, device=x.device)
            outs.append(self.experts(x, index, ones))
        return torch.stack(outs)


def _layer_index(name: str) -> int:
    numbers = re.findall(r"\.(\d+)\.", f".{name}.")
    return int(numbers[-1]) if numbers else -1


def find_moe_layers(model: nn.Module) -> list[MoELayer]:
    """Every sparse-MoE block of ``model`` (a transformers MoE causal LM of a family in :data:`ARCHITECTURES`),
    in forward order. Raises ValueError when the family is unknown or the model has no MoE block."""
    check_instance(model, "model", nn.Module, "torch.nn.Module (a transformers MoE causal LM)")
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in ARCHITECTURES:
        raise ValueError(
            f"model must be a Hugging Face MoE causal LM of a known family {sorted(ARCHITECTURES)}, got "
            f"model_type={model_type!r} (register_moe_architecture adds a family with the same block layout)"
        )
    spec = ARCHITECTURES[model_type]
    layers = []
    for name, module in model.named_modules():
        gate, experts = getattr(module, "gate", None), getattr(module, "experts", None)
        if (
            isinstance(gate, nn.Module)
            and isinstance(experts, nn.Module)
            and hasattr(experts, "gate_up_proj")
        ):
            if spec.routing == "sigmoid" and int(getattr(gate, "num_group", 1)) != 1:
                raise ValueError(
                    f"model uses group-limited routing (n_group={gate.num_group}) in {name}: removing experts "
                    "would change the groups; only n_group=1 is supported"
                )
            layers.append(MoELayer(_layer_index(name), name, module, spec))
    if not layers:
        raise ValueError(
            f"model ({type(model).__name__}) has no sparse-MoE block (a module with gate and experts)"
        )
    return layers


@torch.no_grad()
def route(
    layer: MoELayer, x: torch.Tensor, alive: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The router's decision on tokens ``x`` ``(tokens, hidden)``: ``(probs, top_k_index, top_k_weights)``.

    ``probs`` ``(tokens, E)`` are the softmax probabilities (sigmoid scores for ``"sigmoid"`` routing) over the
    experts still ``alive`` (a bool mask ``(E,)``; default all): a removed expert's logit is ``-inf``, so this is
    the routing of the model after :func:`slice_experts` removed the others. ``top_k_weights`` are the weights
    the block applies to its chosen experts' outputs.
    """
    check_instance(layer, "layer", MoELayer)
    router = layer.router
    k, hidden = layer.top_k, int(router.weight.shape[1])
    check_float_tensor(x, "x")
    if x.shape[-1] != hidden:
        raise ValueError(
            f"x must hold tokens of the model's width {hidden} in its last dimension, got {tuple(x.shape)}"
        )
    flat = x.reshape(-1, hidden)
    # Mixtral, Qwen-MoE and OLMoE gates compute their logits in the model's dtype, DeepSeek-V3's in float32
    if layer.spec.routing == "softmax":
        logits = nn.functional.linear(flat.to(router.weight.dtype), router.weight).float()
    else:
        logits = nn.functional.linear(flat.float(), router.weight.float())
    if alive is not None:
        check_tensor(alive, "alive", (torch.bool,))
        if alive.shape != (layer.n_experts,):
            raise ValueError(
                f"alive must be a bool mask of shape ({layer.n_experts},), got {tuple(alive.shape)}"
            )
        if int(alive.sum()) < k:
            raise ValueError(f"alive must keep at least top_k={k} experts, got {int(alive.sum())}")
        logits = logits.masked_fill(~alive.to(logits.device), float("-inf"))
    if layer.spec.routing == "softmax":
        probs = logits.softmax(dim=-1)
        weights, index = probs.topk(k, dim=-1)
        if layer.normalize():
            weights = weights / weights.sum(dim=-1, keepdim=True)
    else:
        probs = logits.sigmoid()
        choice = probs + router.e_score_correction_bias.float()
        if alive is not None:
            choice = choice.masked_fill(~alive.to(choice.device), float("-inf"))
        index = choice.topk(k, dim=-1, sorted=False)[1]
        weights = probs.gather(1, index)
        if layer.normalize():
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        weights = weights * float(router.routed_scaling_factor)
    return probs, index, weights.to(x.dtype)


def check_keep(layer: MoELayer, keep, name: str = "keep") -> list[int]:
    """``keep`` checked to be distinct expert indices of ``layer``, at least its top-k; returned sorted
    (``name``: how error messages call it)."""
    n = layer.n_experts
    if not isinstance(keep, (list, tuple)) or not all(
        isinstance(e, int) and not isinstance(e, bool) for e in keep
    ):
        raise TypeError(f"{name} must be a list of expert indices (ints), got {keep!r:.80}")
    ids = sorted(keep)
    if len(set(ids)) != len(ids) or not ids or ids[0] < 0 or ids[-1] >= n:
        raise ValueError(f"{name} must list distinct expert indices in 0..{n - 1}, got {keep!r:.80}")
    if len(ids) < layer.top_k:
        raise ValueError(
            f"{name} must hold at least top_k={layer.top_k} experts in {layer.name}, got {len(ids)}"
        )
    return ids


@torch.no_grad()
def slice_experts(layer: MoELayer, keep: list[int], name: str = "keep") -> None:
    """Keep only experts ``keep`` (original indices, kept in increasing order) of ``layer``, in place: the
    router's rows (and correction bias) and every tensor of the experts module whose first dimension counts
    experts. The router's ``top_k`` is unchanged; ``keep`` is checked by :func:`check_keep` (``name``)."""
    n = layer.n_experts
    ids = check_keep(layer, keep, name)
    index = torch.tensor(ids, dtype=torch.long)
    for module in (layer.router, layer.experts):
        for attr, tensor in [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]:
            if tensor.dim() >= 1 and tensor.shape[0] == n:
                sliced = tensor.detach().index_select(0, index.to(tensor.device)).clone()
                if isinstance(tensor, nn.Parameter):
                    setattr(module, attr, nn.Parameter(sliced, requires_grad=tensor.requires_grad))
                else:
                    setattr(module, attr, sliced)
        if hasattr(module, "num_experts"):
            module.num_experts = len(ids)


def sync_config(model: nn.Module) -> dict[int, int]:
    """Record the experts each MoE layer now has in ``model.config``: the family's expert count when every
    layer has the same number (so ``from_pretrained`` rebuilds the model), else ``ragep_experts_per_layer``.
    Returns ``{layer index: experts}``."""
    layers = find_moe_layers(model)
    config: Any = model.config
    counts = {layer.index: layer.n_experts for layer in layers}
    uniform = len(set(counts.values())) == 1
    if uniform:
        setattr(config, layers[0].spec.count_attr, layers[0].n_experts)
    config.ragep_experts_per_layer = None if uniform else {str(i): c for i, c in counts.items()}
    return counts


def save_pruned(model: nn.Module, path: str | os.PathLike) -> Path:
    """Save a model pruned by :func:`icml_compress.ragep.prune_experts` with ``save_pretrained``.

    With the same number of experts in every MoE layer the checkpoint is an ordinary one (the config's expert
    count is updated): ``AutoModelForCausalLM.from_pretrained`` loads it, and so does :func:`load_pruned`.
    With per-layer counts (RaGEP's budgets) transformers' config cannot describe the model: the counts are
    recorded in ``config.ragep_experts_per_layer`` and the checkpoint must be loaded with :func:`load_pruned`.

    Atomic, as :func:`icml_compress.save_quantized`: the checkpoint is written to a temporary directory beside
    ``path`` and moved into place at the end, so a failure leaves ``path`` as it was. An existing ``path``
    must be an empty directory or an earlier save (a directory holding ``config.json``); anything else (a
    file, say) raises ValueError. Files saved beside an earlier save (the tokenizer saved with
    ``tokenizer.save_pretrained(path)``, a model card) are kept, as ``save_pretrained`` keeps them; its
    weights are not.
    """
    path = check_path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"path {path} exists and is not a directory; not overwriting")
    counts = sync_config(model)
    uniform = len(set(counts.values())) == 1
    hf: Any = model

    def write(tmp: Path) -> None:
        # a per-layer layout is saved in transformers' in-memory (fused) format: no per-expert conversion on load
        hf.save_pretrained(tmp, save_original_format=uniform)

    return write_directory(path, write, "config.json", "save_pruned")


# the from_pretrained keyword arguments the per-layer route applies itself (the uniform route passes any)
_LOAD_OPTIONS = (
    "dtype",
    "torch_dtype",
    "device_map",
    "max_memory",
    "low_cpu_mem_usage",
    "attn_implementation",
    "experts_implementation",
)


def load_pruned(path: str | os.PathLike, **kwargs) -> PreTrainedModel:
    """Load a checkpoint written by :func:`save_pruned`, in eval mode.

    With the same number of experts in every layer this is ``AutoModelForCausalLM.from_pretrained(path,
    **kwargs)``: every keyword argument of ``from_pretrained`` applies. Per-layer expert counts are rebuilt
    (``from_config``, the layers sliced to their recorded sizes) before the weights are read (strictly: every
    tensor must be present and of the recorded shape), and the saved ``generation_config.json`` is read as
    ``from_pretrained`` reads it (``generate`` keeps the saved model's defaults). That route applies these
    ``from_pretrained`` arguments as ``from_pretrained`` does, so both routes give the same model (tested bit
    for bit):

    - ``dtype`` (or its old name ``torch_dtype``; ``dtype`` wins): a floating ``torch.dtype``, its name, or
      ``"auto"`` (the default: the config's ``dtype``, else the checkpoint's);
    - ``device_map``: one device (``"cpu"``, ``"cuda:1"``, a ``torch.device``, an accelerator index, or a
      dict whose values all name that device, e.g. ``{"": "cuda:0"}``): the model is read on the CPU and
      moved there. A strategy (``"auto"``, ``"balanced"``, ``"balanced_low_0"``, ``"sequential"``, with
      ``max_memory``) is resolved by transformers' accelerate integration on the model as built, as
      ``from_pretrained`` resolves it (on a machine without accelerators: the CPU); a map over several devices
      is dispatched with accelerate's hooks, as ``from_pretrained`` dispatches it. ``"disk"`` and ``"meta"``
      entries (disk offload needs ``offload_folder``, which this route does not take) raise ValueError;
    - ``attn_implementation``, ``experts_implementation``: as ``from_pretrained``;
    - ``low_cpu_mem_usage``: accepted and ignored, as transformers 5 ignores it.

    Any other keyword argument raises TypeError naming it.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise TypeError(f"path must be a non-empty str or os.PathLike, got {path!r}")
    path = Path(path)
    if not (path / "config.json").is_file():
        raise ValueError(f"path must be a directory written by save_pruned, {path} has no config.json")
    config = AutoConfig.from_pretrained(path)
    counts = getattr(config, "ragep_experts_per_layer", None)
    if not counts:
        return AutoModelForCausalLM.from_pretrained(path, **kwargs).eval()
    unknown = sorted(set(kwargs) - set(_LOAD_OPTIONS))
    if unknown:
        raise TypeError(
            f"load_pruned got keyword arguments {unknown} that a checkpoint with per-layer expert counts "
            f"({path}) cannot take; it takes the from_pretrained arguments {list(_LOAD_OPTIONS)}"
        )
    device_map = kwargs.get("device_map")
    if device_map is not None and not (isinstance(device_map, str) and device_map in _STRATEGIES):
        _devices(device_map)  # a bad map is refused before anything is read
    state = _read_state(path)
    dtype = kwargs.get("dtype")
    dtype = _load_dtype(kwargs.get("torch_dtype") if dtype is None else dtype, config, state)
    options = {k: kwargs[k] for k in ("attn_implementation", "experts_implementation") if k in kwargs}
    model = AutoModelForCausalLM.from_config(config, dtype=dtype, **options)
    for layer in find_moe_layers(model):
        slice_experts(layer, list(range(int(counts[str(layer.index)]))), name="path's recorded layout")
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = {name for name in missing if _is_tied(model, name)}
    if set(missing) - tied or unexpected:
        raise ValueError(
            f"checkpoint at {path} does not match its recorded layout: missing {sorted(set(missing) - tied)[:5]}, "
            f"unexpected {sorted(unexpected)[:5]}"
        )
    model.tie_weights()
    load_generation_config(model, path, ValueError)  # from_config does not read it: from_pretrained does
    if device_map is not None:
        _place(model, device_map, kwargs.get("max_memory"))
    return model.eval()


def _load_dtype(dtype: Any, config: Any, state: dict[str, torch.Tensor]) -> torch.dtype:
    """The dtype ``from_pretrained`` builds a model in for its ``dtype`` argument (``None`` is ``"auto"``:
    the config's ``dtype``, else that of the checkpoint's first floating tensor)."""
    if dtype is None or dtype == "auto":
        dtype = getattr(config, "dtype", None)
        if dtype is None:
            dtype = next(
                (t.dtype for t in state.values() if t.is_floating_point()), torch.get_default_dtype()
            )
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype, dtype)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating torch.dtype, its name or 'auto', got {dtype!r}")
    return dtype


# the device_map strategies from_pretrained resolves with accelerate
_STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")


def _devices(device_map: Any) -> set[torch.device]:
    """The devices a ``from_pretrained`` ``device_map`` (not a strategy) names, as transformers reads it
    (``"cuda"`` is this process's ``LOCAL_RANK``, an int an accelerator index); an entry that is no device
    (``"disk"``, ``"meta"``, a negative index, an unknown strategy) raises ValueError naming ``device_map``."""
    entries = device_map.values() if isinstance(device_map, dict) else [device_map]
    devices: set[torch.device] = set()
    for entry in entries:
        if isinstance(entry, str) and entry == "cuda":
            entry = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
        device = None
        if not isinstance(entry, bool) and not (isinstance(entry, int) and entry < 0):
            try:
                device = torch.device(entry)
            except (RuntimeError, TypeError):  # "disk", an unknown strategy, ...
                device = None
        if device is None or device.type == "meta":
            raise ValueError(
                f"device_map for a checkpoint with per-layer expert counts must be a strategy {list(_STRATEGIES)}, "
                "a device ('cpu', 'cuda:0', a torch.device, an accelerator index) or a dict of module names to "
                f"devices, got {device_map!r:.120}: entry {entry!r} is not a device ('disk' offload needs "
                "offload_folder, which load_pruned does not take on this route)"
            )
        devices.add(device)
    if not devices:
        raise ValueError(f"device_map must name at least one device, got {device_map!r:.120}")
    return devices


def _place(model: Any, device_map: Any, max_memory: Any) -> None:
    """Put the model (built and loaded on the CPU) where ``from_pretrained(..., device_map=device_map,
    max_memory=max_memory)`` puts it: a strategy is resolved on the model by transformers' accelerate
    integration (the functions ``from_pretrained`` calls), one device is a ``.to``, several are dispatched with
    accelerate's hooks (``hf_device_map`` set)."""
    if isinstance(device_map, str) and device_map in _STRATEGIES:
        from transformers.integrations.accelerate import (
            get_balanced_memory,
            get_max_memory,
            infer_auto_device_map,
        )

        no_split = model._no_split_modules
        if device_map == "sequential":
            memory = get_max_memory(max_memory)
        else:
            memory = get_balanced_memory(
                model,
                max_memory=max_memory,
                no_split_module_classes=no_split,
                low_zero=device_map == "balanced_low_0",
            )
        device_map = infer_auto_device_map(
            model,
            max_memory=memory,
            no_split_module_classes=no_split,
            no_placement_params=getattr(model, "_no_placement_params", None),
        )
    devices = _devices(device_map)
    if len(devices) == 1:
        model.to(devices.pop())
        return
    from transformers.integrations.accelerate import accelerate_dispatch

    accelerate_dispatch(model, None, dict(device_map), None, None, False)


def _read_state(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ValueError(f"path must hold the .safetensors weights save_pruned writes, {path} has none")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(str(file)))
    return state


def _is_tied(model: Any, name: str) -> bool:
    out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return bool(
        name.endswith("lm_head.weight")
        and out is not None
        and out.weight is model.get_input_embeddings().weight
    )
