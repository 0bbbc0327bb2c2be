"""What the report says about the hosts of a gathered campaign: the header line
(hosts and rounds per host), hosts that disagree with the others, and each host's
own change per table row."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from abbench.report.text import md_escape
from abbench.stats.blocks import BlockComparison
from abbench.stats.paired import Comparison

#: (row label, arm label, the cell's comparison)
CellRef = tuple[str, str, Comparison | None]


def hosts_line(meta: dict[str, Any]) -> str:
    """``Hosts: `0-gpu7` 5 rounds (gpu7, 1x NVIDIA H200 (driver 550.54)), ...``, or ''."""
    hosts = meta.get("hosts")
    if not hosts:
        return ""
    per = (meta.get("campaign") or {}).get("rounds_per_shard") or {}
    parts = []
    for h in hosts:
        n = int(h.get("rounds") or 0)
        rounds = f"{n} round{'s' if n != 1 else ''}"
        planned = (per.get(str(h.get("shard"))) or {}).get("planned")
        if planned is not None and planned != n:
            rounds += f" of shard {h.get('shard')}'s {planned}"
        fp = h.get("fingerprint") or {}
        cuda = f", CUDA {fp['cuda']}" if fp.get("cuda") else ""
        parts.append(f"`{md_escape(str(h['name']))}` {rounds} "
                     f"({md_escape(str(h.get('hostname')))}, "
                     f"{md_escape(str(h.get('machine') or '?'))}{cuda})")
    camp = meta.get("campaign") or {}
    return (f"Hosts as blocks, {len(hosts)} shard run(s) over {camp.get('shards', '?')} "
            f"shard(s); rounds paired within a host: " + "; ".join(parts) + ".")


def mixed_note(meta: dict[str, Any]) -> list[str]:
    mixed = (meta.get("campaign") or {}).get("mixed_hosts") or []
    if not mixed:
        return []
    return ["Warning: the hosts differ (" + "; ".join(md_escape(m) for m in mixed) + "); "
            "they were pooled because mixed hosts were allowed: the interval is over hosts "
            "that need not share one ratio."]


def flag_notes(cells: Sequence[CellRef]) -> list[str]:
    """One line per host that some cell flags, with the cells and its change there."""
    by_host: dict[str, list[str]] = {}
    for row, arm, c in cells:
        if not isinstance(c, BlockComparison):
            continue
        others = {h.host: h for h in c.hosts}
        for h in c.hosts:
            if not h.flagged:
                continue
            rest = [o for o in others.values() if o.host != h.host]
            n_rest = sum(o.n for o in rest)
            rest_mean = sum(o.mean * o.n for o in rest) / n_rest if n_rest else math.nan
            by_host.setdefault(h.host, []).append(
                f"{md_escape(row)}, {md_escape(arm)}: {h.change * 100:+.1f}% there against "
                f"{math.expm1(rest_mean) * 100:+.1f}% on the other hosts "
                + (f"({abs(h.z):.1f} se)" if h.z is not None and math.isfinite(h.z)
                   else "(every round exact on each host)"))
    return [f"Host `{md_escape(host)}` disagrees with the others: " + "; ".join(items)
            + ". The interval of those cells counts the hosts' spread (random effects); "
            "check that host (clocks, other load, its GPU), or leave it out and compare again."
            for host, items in by_host.items()]


def per_host_lines(cells: Sequence[CellRef]) -> list[str]:
    """A details block: each host's change (over its own rounds) per table cell."""
    blocks = [(row, arm, c) for row, arm, c in cells if isinstance(c, BlockComparison)]
    if not blocks:
        return []
    hosts: list[str] = []
    for _, _, c in blocks:
        assert isinstance(c, BlockComparison)
        hosts += [h.host for h in c.hosts if h.host not in hosts]
    lines: list[str] = ["<details><summary>Per host</summary>", "",
             "| row | arm | interval | " + " | ".join(f"`{md_escape(h)}`" for h in hosts) + " |",
             "|---|---|---|" + "---|" * len(hosts)]
    for row, arm, c in blocks:
        assert isinstance(c, BlockComparison)
        got = {h.host: h for h in c.hosts}
        how = "random effects" if c.method == "random" else "pooled"
        texts = []
        for name in hosts:
            h = got.get(name)
            texts.append("–" if h is None else f"{h.change * 100:+.1f}% ({h.n})"
                         + (" ⚑" if h.flagged else ""))
        lines.append(f"| {md_escape(row)} | {md_escape(arm)} | {how} | " + " | ".join(texts)
                     + " |")
    lines += ["", "Each host's change over its own rounds (rounds in brackets); ⚑ flagged: "
              "farther from the other hosts than 3 standard errors of a normal (a t "
              "quantile with the within-host degrees of freedom). pooled: the hosts agree and "
              "the interval is the paired t over all rounds; random effects: they differ, "
              "and the interval is over hosts.", "", "</details>"]
    return lines
