"""Trade-off curve plot (matplotlib, imported lazily: ``pip install icml-theory[plot]``)."""

from __future__ import annotations

import numpy as np

from icml_theory.privacy.compare import compare_methods

LABELS = {
    "exact": "exact trade-off",
    "optimal": "optimal rule (intersection of RDP regions)",
    "cks": "Balle et al./CKS via (eps, delta)",
    "mironov": "Mironov via (eps, delta)",
}


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "plotting needs matplotlib: pip install 'icml-theory[plot]' (or pip install matplotlib)"
        ) from exc
    return plt


def plot_tradeoff_curves(profile, path=None, *, alphas=None, exact=None, title="Trade-off curves"):
    """Plot beta(alpha) by every method for ``profile`` (and the exact curve when ``exact`` is given).

    Args:
        profile: an RDP profile.
        path: where to write the PNG (``None``: do not save).
        alphas: type I errors (default 200 log-spaced in [1e-6, 1]).
        exact: ``("gaussian", mu)`` or ``("randomized_response", eps0)``, as in :func:`compare_methods`.

    Returns:
        the matplotlib ``Figure``.
    """
    plt = _pyplot()
    alphas = np.geomspace(1e-6, 1.0, 200) if alphas is None else np.asarray(alphas, dtype=np.float64)
    curves = compare_methods(profile, [], alphas, exact=exact)["beta"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, logx in zip(axes, (False, True), strict=True):
        for name in ("exact", "optimal", "cks", "mironov"):
            if name in curves:
                ax.plot(alphas, curves[name], label=LABELS[name], lw=2 if name == "optimal" else 1.2)
        ax.plot(alphas, 1 - alphas, color="0.7", ls=":", lw=1, label="perfect privacy (1 - alpha)")
        ax.set_xlabel("alpha (type I error)")
        ax.set_ylabel("beta (type II error)")
        ax.set_xscale("log" if logx else "linear")
        ax.set_ylim(0, 1.02)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig
