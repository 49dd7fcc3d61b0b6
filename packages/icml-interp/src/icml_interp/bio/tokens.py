"""ESM-2 tokenization: the exact vocabulary of the facebook/esm2 checkpoints, so their embeddings line up."""

from __future__ import annotations

import re

import numpy as np
import torch

from icml_interp.validation import check_bool, check_int

ESM_VOCAB = (
    "<cls>", "<pad>", "<eos>", "<unk>",
    "L", "A", "G", "V", "S", "E", "R", "T", "I", "D", "P", "K", "Q", "N", "F", "Y", "M", "H", "W", "C",
    "X", "B", "U", "Z", "O", ".", "-", "<null_1>", "<mask>",
)  # fmt: skip
CLS_ID, PAD_ID, EOS_ID, UNK_ID, MASK_ID = 0, 1, 2, 3, 32
_ID = {t: i for i, t in enumerate(ESM_VOCAB)}
_LETTERS = frozenset(t for t in ESM_VOCAB if len(t) == 1)
_ALLOWED = _LETTERS | {c.lower() for c in _LETTERS}
_SPECIAL = re.compile("(" + "|".join(re.escape(t) for t in ESM_VOCAB if t.startswith("<")) + ")")
_MAX_PAD = 2**20  # ESM-2 checkpoints take 1026 positions; far longer padding is a mistake, not a protein
_LOOKUP = np.full(256, -1, dtype=np.int64)  # ASCII code -> token id of a one-letter token
for _t in _LETTERS:
    _LOOKUP[ord(_t)] = _ID[_t]


def _tokenize(sequence: str, index: int) -> list[int]:
    ids: list[int] = []
    for k, part in enumerate(_SPECIAL.split(sequence)):
        if k % 2:  # a special token written out, e.g. "<mask>"
            ids.append(_ID[part])
            continue
        unknown = sorted(set(part) - _ALLOWED)  # before upper(): "ß".upper() is "SS"
        if unknown:
            raise ValueError(
                f"sequences[{index}] holds characters outside the ESM-2 vocabulary: {''.join(unknown)!r} "
                f"(expected one-letter amino-acid codes {''.join(sorted(_LETTERS))} or tokens like <mask>)"
            )
        ids.extend(_LOOKUP[np.frombuffer(part.upper().encode("ascii"), dtype=np.uint8)].tolist())
    return ids


def encode(
    sequences: str | list[str], *, add_special_tokens: bool = True, pad_to: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Protein strings as ESM-2 token ids, like ``EsmTokenizer(seqs, padding=True)``.

    Parameters
    ----------
    sequences : str or list of str
        One-letter codes of :data:`ESM_VOCAB` (``L A G V S E R T I D P K Q N F Y M H W C X B U Z O . -``);
        lowercase is uppercased. Special tokens may be written out, e.g. ``"MK<mask>TA"``. Whitespace and
        other characters raise ``ValueError`` naming ``sequences``, the index and the characters.
    add_special_tokens : bool
        Wrap each sequence in ``<cls> ... <eos>``.
    pad_to : int or None
        Right-pad with ``<pad>`` to this length (at least the longest encoded sequence, at most 2**20);
        None: the longest.

    Returns
    -------
    input_ids, attention_mask : torch.Tensor
        ``(batch, seq)`` int64 each (batch 1 for a single str); the mask is 1 on tokens, 0 on padding.
    """
    batch = [sequences] if isinstance(sequences, str) else sequences
    if not isinstance(batch, (list, tuple)) or not batch:
        raise TypeError(f"sequences must be a str or a non-empty list of str, got {sequences!r:.80}")
    check_bool(add_special_tokens, "add_special_tokens")
    rows = []
    for i, s in enumerate(batch):
        if not isinstance(s, str):
            raise TypeError(f"sequences[{i}] must be a str, got {type(s).__name__}")
        if not s:
            raise ValueError(f"sequences[{i}] is an empty str")
        ids = _tokenize(s, i)
        rows.append([CLS_ID, *ids, EOS_ID] if add_special_tokens else ids)
    longest = max(map(len, rows))
    width = longest if pad_to is None else check_int(pad_to, "pad_to", minimum=longest, maximum=_MAX_PAD)
    input_ids = torch.full((len(rows), width), PAD_ID, dtype=torch.long)  # (batch, seq)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        input_ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        mask[i, : len(r)] = 1
    return input_ids, mask


def decode(ids, *, keep_special: bool = False) -> str | list[str]:
    """ESM-2 token ids back to strings.

    Parameters
    ----------
    ids : torch.Tensor, np.ndarray or list of int
        ``(seq,)`` or ``(batch, seq)`` integer ids in ``[0, 33)``.
    keep_special : bool
        Keep ``<cls>``, ``<eos>`` and ``<pad>``; by default they are dropped. Other special tokens
        (``<mask>``, ``<unk>``, ``<null_1>``) are always written out, so ``decode(encode(s)[0])[0] ==
        s.upper()``.

    Returns
    -------
    str or list of str
        A str for 1-d ids, a list of str for 2-d.
    """
    check_bool(keep_special, "keep_special")
    if isinstance(ids, torch.Tensor):
        ids = ids.detach().cpu().numpy()
    try:
        arr = np.asarray(ids)
    except ValueError as err:  # ragged nested lists
        raise ValueError(f"ids must be a (seq,) or (batch, seq) array of token ids: {err}") from err
    if arr.dtype.kind not in "iu" or arr.ndim not in (1, 2) or arr.size == 0:
        raise TypeError(
            f"ids must be a non-empty (seq,) or (batch, seq) integer array, got {arr.dtype} {arr.shape}"
        )
    if arr.min() < 0 or arr.max() >= len(ESM_VOCAB):
        raise ValueError(f"ids must lie in [0, {len(ESM_VOCAB)}), got values in [{arr.min()}, {arr.max()}]")
    skip = () if keep_special else (CLS_ID, PAD_ID, EOS_ID)
    texts = ["".join(ESM_VOCAB[t] for t in row.tolist() if t not in skip) for row in np.atleast_2d(arr)]
    return texts[0] if arr.ndim == 1 else texts
