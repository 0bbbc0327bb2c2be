"""``abbench bisect``: the commit between a good and a bad ref that moved a row.

Each step is an ordinary stored run: an interleaved campaign of the midpoint commit
and the two current ends (arms ``good``, ``mid``, ``bad``; baseline ``good``) with
the until-ci stopping rule. The midpoint sides with the end it does not differ from;
the range halves until one commit remains. The first step also confirms that the ends
differ on the row (else it stops and says so). A midpoint that differs from both ends
means the row moved at more than one commit: "no single culprit".

The state (commits, range, steps with their run ids) is kept in
``<results>/bisect-<id>.json``: the same command again continues where it stopped.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from abbench.campaign.progress import Progress
from abbench.campaign.runner import Campaign, RunOptions
from abbench.config.loader import load_config
from abbench.config.overrides import with_stats
from abbench.config.schema import ArmConfig, Config
from abbench.errors import ConfigError
from abbench.model.metrics import METRICS, spec
from abbench.model.rows import SERVER_ROW, RowKey
from abbench.report.compare import run_table
from abbench.report.selection import name_row
from abbench.report.tablemodel import row_label
from abbench.server.gitarms import build_arms, commit_range, pin
from abbench.store.run import Run

DEFAULT_UNTIL_CI = "2%"
DEFAULT_MAX_ROUNDS = 12


@dataclass
class BisectOutcome:
    text: str
    culprit: str | None
    steps: list[dict[str, Any]] = field(default_factory=list)
    code: int = 0


def _step_config(cfg: Config, template: ArmConfig, ends: dict[str, str]) -> Config:
    assert template.git is not None
    arms = [template.model_copy(update={
        "name": name, "label": None, "commit": None,
        "git": template.git.model_copy(update={"ref": sha, "sha": None, "patch": None,
                                               "revert": [], "cherry_pick": []})})
            for name, sha in ends.items()]
    return cfg.model_copy(update={"arms": arms, "baseline": "good", "variants": None})


def _verdict(run: Run, key: RowKey, baseline: str, arm: str) -> str:
    """The verdict of ``arm``'s cell in the row ``key`` (resolved once, from --row), as the
    step's report decides it: among the cells of the table it shows, or of its hidden rows
    (what the stop rule watched). Every row of the run in one family would adjust the
    row's p for rows the bisect does not ask about (ten cells for a reference server's
    run: at 2 rounds a 75% drop then read "inconclusive" on a loaded machine)."""
    table = run_table(run, baseline=baseline)
    found = next((r for r in table.rows + table.hidden if r.key == key), None)
    if found is None:
        rows = sorted({r.label for r in table.rows + table.hidden})
        raise ConfigError(f"run {run.id} has no row {row_label(key, spec(key.metric))!r}",
                          hint=f"rows: {', '.join(rows)}")
    cell = found.cells.get(arm)
    if cell is None or cell.comparison is None:
        return "missing"
    return cell.comparison.verdict


def _row(cfg: Config, text: str, metric: str | None) -> RowKey:
    """The row (and metric) ``--row`` names among the rows the arms file makes, before
    anything is built: a row id (``decode 32K``) or a label as the table shows it
    (``decode 32K TTFT``, whose metric is ttft_ms unless --metric says)."""
    rows = [k for w in cfg.workloads for k in w.row_keys()]
    keys = [r.of(m) for r in [*rows, RowKey(SERVER_ROW)]
            for m in ([metric] if metric else list(METRICS))]
    return name_row(text, keys, metric, where="--row", shown=[
        r.of(metric or "decode_tok_s") for r in rows])


def bisect(arms_file: Path, *, good: str, bad: str, row: str, metric: str | None,
           max_steps: int | None, results: Path | None, progress: Progress,
           until_ci: str | None = None) -> BisectOutcome:
    cfg = load_config(arms_file)
    template = next((a for a in cfg.arms if a.git is not None), None)
    if template is None:
        raise ConfigError("bisect needs a git arm (git: {source, ref}) to build commits from",
                          where=str(arms_file), hint="add sources: and an arm with git:")
    key = _row(cfg, row, metric)
    # the stop rule watches the bisected metric, whatever else the table shows
    cfg = with_stats(cfg, until_ci=until_ci or (None if cfg.stats.until_ci else
                                                DEFAULT_UNTIL_CI),
                     max_rounds=None if cfg.stats.max_rounds else DEFAULT_MAX_ROUNDS,
                     until_metrics=None if cfg.stats.until_metrics else [key.metric])
    results = results or Path(cfg.results)
    assert template.git is not None
    row, metric = key.workload, key.metric
    commits = commit_range(cfg, template.git.source, good, bad)
    ident = hashlib.sha256(json.dumps([str(Path(arms_file).resolve()), commits[0], commits[-1],
                                       row, metric]).encode()).hexdigest()[:12]
    state_path = results / f"bisect-{ident}.json"
    if state_path.is_file():
        state = json.loads(state_path.read_text())
        progress.log(f"bisect: continuing {state_path} ({len(state['steps'])} steps done)")
    else:
        state = {"commits": commits, "lo": 0, "hi": len(commits) - 1, "row": row,
                 "metric": metric, "steps": [], "result": None}
    commits = state["commits"]

    def save() -> None:
        results.mkdir(parents=True, exist_ok=True)
        state_path.write_text(json.dumps(state, indent=1))

    while state["result"] is None:
        lo, hi = state["lo"], state["hi"]
        if hi - lo <= 1:
            state["result"] = {"kind": "culprit", "sha": commits[hi]}
            break
        if max_steps is not None and len(state["steps"]) >= max_steps:
            state["result"] = {"kind": "max_steps"}
            break
        mid = (lo + hi) // 2
        ends = {"good": commits[lo], "mid": commits[mid], "bad": commits[hi]}
        progress.log(f"bisect step {len(state['steps']) + 1}: {hi - lo - 1} commits between "
                     f"{commits[lo][:12]} and {commits[hi][:12]}; midpoint {commits[mid][:12]}")
        step_cfg, _ = build_arms(pin(_step_config(cfg, template, ends)), log=progress.log)
        opts = RunOptions(results=results, config_path=str(arms_file))
        outcome = Campaign(step_cfg, opts, progress=progress).execute()
        run = outcome.run
        v_bad = _verdict(run, key, "good", "bad")
        v_mid_good = _verdict(run, key, "good", "mid")
        v_mid_bad = _verdict(run, key, "bad", "mid")
        step = {"lo": lo, "mid": mid, "hi": hi, "sha": commits[mid], "run": run.id,
                "run_path": str(run.path), "bad_vs_good": v_bad, "mid_vs_good": v_mid_good,
                "mid_vs_bad": v_mid_bad, "table": outcome.report_md}
        state["steps"].append(step)
        if v_bad != "changed":
            state["result"] = {"kind": "no_difference", "verdict": v_bad}
        elif v_mid_good != "changed" and v_mid_bad == "changed":
            state["lo"] = mid
        elif v_mid_good == "changed" and v_mid_bad != "changed":
            state["hi"] = mid
        elif v_mid_good == "changed" and v_mid_bad == "changed":
            state["result"] = {"kind": "no_single_culprit", "sha": commits[mid]}
        else:
            state["result"] = {"kind": "undecided"}
        save()
    save()
    return _render(state, row, metric, state_path)


def _render(state: dict[str, Any], row: str, metric: str, path: Path) -> BisectOutcome:
    commits = state["commits"]
    out = [f"# abbench bisect: {row!r}, {metric}, {commits[0][:12]} (good) .. "
           f"{commits[-1][:12]} (bad), {len(commits) - 1} commits\n"]
    for i, s in enumerate(state["steps"], 1):
        side = ("good" if s["mid_vs_good"] != "changed" else
                "bad" if s["mid_vs_bad"] != "changed" else "neither")
        out.append(f"## step {i}: midpoint {s['sha'][:12]} sides with {side} "
                   f"(run {s['run']})\n\n{s['table']}\n")
    res = state["result"] or {}
    kind = res.get("kind")
    code = 0
    culprit = None
    if kind == "culprit":
        culprit = res["sha"]
        out.append(f"Culprit: {culprit} (first bad commit; {len(state['steps'])} steps)")
    elif kind == "no_difference" and res.get("verdict") == "within_noise":
        code = 1
        out.append(f"good and bad do not differ on {row!r} {metric} (within the noise "
                   "band): nothing to bisect")
    elif kind == "no_difference":
        code = 1
        out.append(f"good and bad are not shown to differ on {row!r} {metric} (verdict "
                   f"{res.get('verdict')}): run again with more rounds (--until-ci "
                   "narrower, stats.max_rounds) before bisecting")
    elif kind == "no_single_culprit":
        code = 1
        lo, hi = state["lo"], state["hi"]
        out.append(f"no single culprit: {res['sha'][:12]} differs from both good "
                   f"({commits[lo][:12]}) and bad ({commits[hi][:12]}) on {row!r}: the row "
                   f"moves part of the way in more than one commit")
    elif kind == "max_steps":
        code = 1
        out.append(f"stopped after --max-steps: the culprit is between "
                   f"{commits[state['lo']][:12]} (exclusive) and {commits[state['hi']][:12]}")
    else:
        code = 1
        out.append("undecided: the midpoint's verdict sides with neither end; run again with "
                   "more rounds (--until-ci, stats.max_rounds)")
    out.append(f"\nState: {path}")
    return BisectOutcome("\n".join(out) + "\n", culprit, state["steps"], code)
