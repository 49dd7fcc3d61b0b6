"""Channel compensation: per-channel scales in closed form under the Hessian metric (Proteus).

With the packed indices fixed, the applied weight is ``W_hat = diag(sv) B diag(su)`` (``B`` the rotated,
decoded codes mapped back). Scaling input channels by ``c`` and output channels by ``g`` minimizes the
proxy ``tr((W - diag(g) W_hat diag(c)) H (...)^T)``:

- inputs first: ``c`` solves ``((W_hat^T W_hat) o H) c = sum_i W_hat_i o (W_i H)`` (``o`` elementwise),
  a small ridge pulls ``c`` towards 1 when the system is badly conditioned;
- then outputs, row by row: ``g_i = <W_i, W'_i>_H / <W'_i, W'_i>_H`` with ``W' = W_hat diag(c)``.

Both are folded into ``su``/``sv``, so the decoder and the stored bits do not change. Each step is the
exact minimizer given the other scales, so the proxy never increases. Our design (the paper text was
not available): the abstract names "channel compensation" that tunes only affine statistics.
"""

from __future__ import annotations

import torch

from icml_compress.quantize.linear import ProteusLinear

RIDGE = 1e-6


@torch.no_grad()
def compensate(module: ProteusLinear, W: torch.Tensor, H: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Fold closed-form input and output channel scales into ``module.su``/``sv``; returns ``(c, g)``."""
    Wd, Hd = W.double(), H.double()
    What = module.dequantized_weight().double()  # (m, n)
    A = (What.T @ What) * Hd  # (n, n)
    r = (What * (Wd @ Hd)).sum(0)  # (n,)
    lam = RIDGE * A.diagonal().mean()
    c = torch.linalg.solve(A + lam * torch.eye(A.shape[0], dtype=A.dtype, device=A.device), r + lam)
    Wc = What * c[None, :]
    WcH = Wc @ Hd
    den = (Wc * WcH).sum(1)  # (m,) >= 0; 0 for a row quantized to zeros, whose numerator is 0 too
    # relative to H's scale: a floor of 1e-30 made g ~0 for H below ~1e-30 (sv collapsed at H * 1e-40)
    g = (Wd * WcH).sum(1) / torch.where(den > 0, den, torch.ones_like(den))
    module.su.mul_(c.to(module.su.dtype))
    module.sv.mul_(g.to(module.sv.dtype))
    return c, g
