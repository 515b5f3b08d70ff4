"""The quality-cost frontier as a PNG (matplotlib, imported only when a plot is asked for)."""

from __future__ import annotations

from pathlib import Path

from sits.understanding.quality_router.metrics import Point


def plot_frontiers(frontiers: dict[str, list[Point]], singles: list[Point], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display on servers
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    styles = {"router": "-o", "oracle": "--", "random": ":", "prompt_length": "-."}
    for name, pts in frontiers.items():
        if name == "best_single":
            continue
        ax.plot([p.cost for p in pts], [p.quality for p in pts], styles.get(name, "-"), label=name, markersize=3)
    ax.scatter([p.cost for p in singles], [p.quality for p in singles], c="grey", s=14, label="single models")
    for p in singles:
        ax.annotate(p.label.split("/")[-1][:18], (p.cost, p.quality), fontsize=6, alpha=0.7)
    ax.set_xscale("log")
    ax.set_xlabel("mean cost per prompt (USD, log)")
    ax.set_ylabel("mean quality")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
