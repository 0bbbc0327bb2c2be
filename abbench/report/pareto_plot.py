"""The Pareto plot of a run's capacity searches: output tok/s per user against total
output tok/s, every probed level of every arm (all rounds), each arm's Pareto front
drawn through them, the levels that met the bounds filled and the others hollow.
matplotlib is imported only when a plot is drawn."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from abbench.model.records import CapacityLevel, Record
from abbench.model.rounds import comparable_records
from abbench.model.runmeta import MetaLike, RunMeta, as_meta
from abbench.report.sweep import pyplot, save

Point = tuple[float, float, bool, str]  # total tok/s, per-user tok/s, met the bounds, level


def capacity_points(records: list[Record], meta: RunMeta
                    ) -> dict[str, dict[str, list[Point]]]:
    """workload -> arm -> its probed levels (rounds the comparison keeps)."""
    kept = {(r.arm, r.round) for r in comparable_records(records, meta)
            if getattr(r, "type", None) == "sample"}
    out: dict[str, dict[str, list[Point]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if not isinstance(r, CapacityLevel) or (r.arm, r.round) not in kept:
            continue
        total, user = r.metrics.get("load_output_tok_s"), r.metrics.get("per_user_tok_s")
        if total is None or user is None:
            continue
        level = f"c={r.concurrency}" if r.concurrency is not None else f"{r.rate:g}/s"
        out[r.workload][r.arm].append((float(total), float(user), r.meets, level))
    return {w: dict(v) for w, v in out.items()}


def pareto_front(points: list[Point]) -> list[Point]:
    """The points no other point beats on both axes, by total tok/s."""
    front = [p for p in points if not any(q[0] >= p[0] and q[1] >= p[1] and q[:2] != p[:2]
                                          for q in points)]
    return sorted(front)


def write_capacity(records: list[Record], meta: MetaLike, path: Path) -> bool:
    """Draw ``path`` when the run has capacity searches; False when it has none."""
    meta = as_meta(meta)
    data = capacity_points(records, meta)
    if not data:
        return False
    plt, labels = pyplot(), meta.labels
    fig, axes = plt.subplots(1, len(data), figsize=(6.5 * len(data), 4.8), squeeze=False)
    for ax, (workload, per_arm) in zip(axes[0], data.items(), strict=True):
        for i, (arm, pts) in enumerate(per_arm.items()):
            color = f"C{i}"
            for met in (True, False):
                sel = [p for p in pts if p[2] == met]
                ax.scatter([p[0] for p in sel], [p[1] for p in sel], s=28,
                           facecolors=color if met else "none", edgecolors=color)
            front = pareto_front(pts)
            ax.plot([p[0] for p in front], [p[1] for p in front], color=color,
                    label=labels.get(arm, arm))
            for p in front:
                ax.annotate(p[3], (p[0], p[1]), textcoords="offset points", xytext=(4, 4),
                            fontsize=7, color=color)
        ax.set_xlabel("total output (tok/s)")
        ax.set_ylabel("output per user (tok/s, 1000 / ITL p50)")
        ax.set_title(f"{workload}: filled = met the bounds")
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    return save(plt, fig, path, f"abbench run {meta.id}: every level each capacity "
                "search probed, and each arm's Pareto front")
