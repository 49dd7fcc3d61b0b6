"""Drawing the figure specs of the reproduction protocol to PNG files (matplotlib, no screen needed)."""

from __future__ import annotations

from pathlib import Path


def draw_figure(spec: dict, path: Path) -> Path:
    """Draw one figure spec (see :mod:`icml_tools.protocol`) to ``path`` and return the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kind = spec.get("kind", "line")
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    try:
        x = spec["x"]
        series = spec["series"]
        if kind == "bar":
            width = 0.8 / len(series)
            positions = range(len(x))
            for i, (label, ys) in enumerate(series.items()):
                ax.bar([p + (i - (len(series) - 1) / 2) * width for p in positions], ys, width, label=label)
            ax.set_xticks(list(positions), [str(v) for v in x])
        else:
            for label, ys in series.items():
                if kind == "scatter":
                    ax.scatter(x, ys, s=12, label=label)
                else:
                    ax.plot(x, ys, marker="o", markersize=3, label=label)
        if spec.get("logx"):
            ax.set_xscale("log")
        if spec.get("logy"):
            ax.set_yscale("log")
        ax.set_title(spec["title"])
        ax.set_xlabel(spec["xlabel"])
        ax.set_ylabel(spec["ylabel"])
        ax.grid(alpha=0.3)
        if len(series) > 1 or kind != "line":
            ax.legend()
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path
