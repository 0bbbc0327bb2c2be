"""``abbench history --html DIR``: a static site (no server; publishable as it is on
GitHub Pages). ``index.html``: the newest run's check, its table with the legend,
then per row (sorted by context) one interactive plot per series: hover shows run,
commit, value and interval; a click opens that run's report page (``runs/<id>.html``,
in the site); steps called changed are marked, regressions in red. ``compare.html``:
any two runs of one series side by side (not interleaved: unpaired, with the warning).

Plotly: its figures are plain JSON, its own bundle (``plotly.min.js``, shipped inside
the Python package) is written beside the pages, so the site needs no network.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from abbench.errors import StoreError
from abbench.history.check import WORDS, CheckResult, format_check
from abbench.history.otava import publish
from abbench.history.plot import groups
from abbench.history.series import Series
from abbench.model.metrics import spec
from abbench.report.compare import run_table
from abbench.report.markdown import header_text, note_text, render_cell
from abbench.report.table import Table
from abbench.report.verdicts import legend_lines
from abbench.store.index import RunInfo
from abbench.store.run import Run

STYLE = ("body{font-family:sans-serif;max-width:1200px;margin:auto;padding:0 1em}"
         "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;"
         "padding:3px 8px;text-align:left}.bad{color:#b00}.plot{height:380px}"
         "pre{white-space:pre-wrap}.legend{font-size:90%;color:#333}")


def _page(title: str, body: str, *, plotly: bool = False, up: str = "") -> str:
    js = f"<script src='{up}plotly.min.js'></script>" if plotly else ""
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title><style>{STYLE}</style>{js}</head><body>{body}</body></html>\n")


def table_html(table: Table) -> str:
    """A run's table as HTML, with its legend."""
    head = "".join(f"<th>{html.escape(table.labels[a])}</th>" for a in table.arms)
    rows = "".join(
        f"<tr><th>{html.escape(r.label)}</th>"
        + "".join(f"<td>{html.escape(render_cell(r, a))}</td>" for a in table.arms)
        + "</tr>" for r in table.rows)
    legend = "".join(f"<p class='legend'>{html.escape(x)}</p>" for x in legend_lines(table))
    notes = "".join(f"<li>{html.escape(note_text(n))}</li>" for n in table.notes)
    return (f"<p>{html.escape(header_text(table).replace('`', ''))}</p>\n"
            f"<table><tr><th></th>{head}</tr>{rows}</table>\n{legend}"
            + (f"<ul>{notes}</ul>" if notes else ""))


def _figure(s: Series, threshold: float) -> dict[str, Any]:
    """One series' Plotly figure: the runs (hover: run, commit, value, interval;
    customdata[0]: the run's page) and the changed steps as markers."""
    sp = spec(s.metric)
    xs = list(range(len(s.points)))
    ticks = [(p.commit or p.run_id)[:10] for p in s.points]
    custom = [[f"runs/{p.run_id}.html", p.run_id, p.commit or "-", sp.fmt(p.lo),
               sp.fmt(p.hi), sp.fmt(p.value)] for p in s.points]
    runs = {"type": "scatter", "mode": "lines+markers", "name": "runs", "x": xs,
            "y": s.values, "customdata": custom,
            "error_y": {"type": "data", "symmetric": False,
                        "array": [p.hi - p.value for p in s.points],
                        "arrayminus": [p.value - p.lo for p in s.points]},
            "hovertemplate": "run %{customdata[1]}<br>commit %{customdata[2]}<br>"
                             "%{customdata[5]} [%{customdata[3]}, %{customdata[4]}]"
                             "<extra></extra>"}
    data = [runs]
    marks = [c for c in s.change_points if c.verdict == "changed"]
    if marks:
        bad = [c.worse and abs(c.change) > threshold for c in marks]
        data.append({"type": "scatter", "mode": "markers", "name": "change points",
                     "x": [c.start for c in marks], "y": [s.values[c.start] for c in marks],
                     "customdata": [custom[c.start] for c in marks],
                     "text": [f"{c.change * 100:+.1f}% [{c.lo * 100:+.1f}, {c.hi * 100:+.1f}] "
                              f"{WORDS[c.verdict]}" for c in marks],
                     "marker": {"symbol": ["triangle-down" if c.worse else "triangle-up"
                                           for c in marks], "size": 16,
                                "color": ["#c00" if b else "#777" for b in bad]},
                     "hovertemplate": "step at run %{customdata[1]} (commit "
                                      "%{customdata[2]})<br>%{text}<extra></extra>"})
    better = "higher" if sp.direction == "higher" else "lower"
    decode = f" ({s.key.decode_tokens} tokens decoded)" if s.key.decode_tokens else ""
    layout = {"title": {"text": html.escape(s.title + decode), "font": {"size": 14}},
              "xaxis": {"tickvals": xs, "ticktext": ticks, "tickangle": -45,
                        "title": {"text": "commit (run order)"}},
              "yaxis": {"title": {"text": f"{sp.label} ({sp.unit}), {better} is better"
                                  if sp.unit else f"{sp.label}, {better} is better"}},
              "showlegend": False, "margin": {"t": 40, "b": 80}, "hovermode": "closest"}
    return {"data": data, "layout": layout}


_PLOT_JS = """
for (const [id, fig] of Object.entries(FIGURES)) {
  const el = document.getElementById(id);
  Plotly.newPlot(el, fig.data, fig.layout, {responsive: true});
  el.on('plotly_click', ev => { window.location.href = ev.points[0].customdata[0]; });
}
"""


def _run_page(run: Run, problems: list[str]) -> str:
    try:
        body = table_html(run_table(run, problems=problems))
    except StoreError as e:
        body = f"<pre class='bad'>{html.escape(str(e))}</pre>"
    return _page(f"abbench run {run.id}", f"<p><a href='../index.html'>history</a> · "
                 f"<a href='../compare.html'>compare</a></p><h1>Run {html.escape(run.id)}"
                 f"</h1>{body}")


def _fresh(page: Path, run: Path) -> bool:
    """A run's page written after its run.json and samples last changed: kept (a site
    of many runs is written again in the time of its new runs)."""
    try:
        made = page.stat().st_mtime_ns
    except OSError:
        return False
    newest = 0
    for name in ("run.json", "samples.jsonl"):
        try:
            newest = max(newest, (run / name).stat().st_mtime_ns)
        except OSError:
            return False
    return made > newest


def _compare_data(series: list[Series]) -> list[dict[str, Any]]:
    return [{"title": s.title, "direction": s.direction, "band": s.band,
             "runs": [{"id": p.run_id, "commit": p.commit or "-", "rounds": list(p.rounds)}
                      for p in s.points]} for s in series]


def write_site(series: list[Series], out_dir: Path, *, runs: Iterable[RunInfo],
               check: CheckResult, threshold: float, results: Path | None = None) -> Path:
    """The site in ``out_dir`` (index.html, compare.html, runs/, plotly.min.js)."""
    from plotly.offline import get_plotlyjs

    out_dir.mkdir(parents=True, exist_ok=True)
    publish(out_dir / "plotly.min.js", get_plotlyjs())
    by_id = {r.id: r for r in runs}
    problems: list[str] = []
    shown = {p.run_id for s in series for p in s.points}
    for run_id in sorted(shown):
        info = by_id.get(run_id)
        page = out_dir / "runs" / f"{run_id}.html"
        if info is not None and not _fresh(page, Path(info.path)):
            publish(page, _run_page(Run(Path(info.path)), problems))
    parts = ["<h1>abbench history</h1><p><a href='compare.html'>compare two runs</a></p>"]
    cls = " class='bad'" if check.failed else ""
    parts.append(f"<h2>Newest run</h2><pre{cls}>{html.escape(format_check(check, results))}"
                 "</pre>")
    newest = by_id.get(check.newest or "")
    if newest is not None and not newest.error:
        parts.append(f"<h2>Latest table: run <a href='runs/{newest.id}.html'>"
                     f"{html.escape(newest.id)}</a></h2>")
        try:
            parts.append(table_html(run_table(Run(Path(newest.path)), problems=problems)))
        except StoreError as e:
            parts.append(f"<pre class='bad'>{html.escape(str(e))}</pre>")
    parts.append("<h2>Series</h2><p class='legend'>Each point: one run's mean of its rounds "
                 "with their 95% interval; hover for run and commit, click for the run's "
                 "report. ▼/▲: a step called changed (red: a regression beyond "
                 f"{threshold * 100:g}%).</p>")
    figures: dict[str, Any] = {}
    for (_metric, _workload), group in groups(series).items():
        parts.append(f"<h3>{html.escape(group[0].row_label)}</h3>")
        for s in group:
            figures[s.slug] = _figure(s, threshold)
            parts.append(f"<div class='plot' id='{s.slug}'></div>")
    parts.append(f"<script>const FIGURES = {json.dumps(figures)};{_PLOT_JS}</script>")
    page = out_dir / "index.html"
    publish(page, _page("abbench history", "\n".join(parts), plotly=True))
    publish(out_dir / "compare.html", _page(
        "abbench compare", "<p><a href='index.html'>history</a></p><h1>Compare two runs "
        "of a series</h1>" + _COMPARE_HTML
        + f"<script>const SERIES = {json.dumps(_compare_data(series))};{_COMPARE_JS}"
        "</script>"))
    return page


_COMPARE_HTML = """
<p>Series <select id='series'></select> run A <select id='a'></select>
run B <select id='b'></select></p><div id='out'></div>
"""

# Welch's interval of the log-ratio of two runs' round means; t quantiles at 97.5%
_COMPARE_JS = """
const T975 = [0,12.71,4.303,3.182,2.776,2.571,2.447,2.365,2.306,2.262,2.228,2.201,2.179,
  2.160,2.145,2.131,2.120,2.110,2.101,2.093,2.086,2.080,2.074,2.069,2.064,2.060,2.056,
  2.052,2.048,2.045,2.042];
const tq = df => df < 1 ? NaN : df <= 30 ? T975[Math.round(df)] : 1.96;
const mean = a => a.reduce((x, y) => x + y, 0) / a.length;
const vr = a => { const m = mean(a); return a.reduce((x, y) => x + (y - m) ** 2, 0) /
  (a.length - 1); };
const S = document.getElementById('series'), A = document.getElementById('a'),
  B = document.getElementById('b'), O = document.getElementById('out');
const opt = (el, items) => { el.innerHTML = ''; items.forEach(([v, t]) => {
  const o = document.createElement('option'); o.value = v; o.textContent = t;
  el.appendChild(o); }); };
function runs() { const s = SERIES[S.value];
  const items = s.runs.map((r, i) => [i, r.id + ' (' + r.commit.slice(0, 10) + ')']);
  opt(A, items); opt(B, items); B.value = s.runs.length - 1; A.value = Math.max(0,
  s.runs.length - 2); show(); }
function show() {
  const s = SERIES[S.value], a = s.runs[A.value], b = s.runs[B.value];
  const la = a.rounds.map(Math.log), lb = b.rounds.map(Math.log);
  const d = mean(lb) - mean(la);
  let cell = (100 * Math.expm1(d)).toFixed(1) + '%';
  if (la.length > 1 && lb.length > 1) {
    const va = vr(la) / la.length, vb = vr(lb) / lb.length, se = Math.sqrt(va + vb);
    const df = (va + vb) ** 2 / (va ** 2 / (la.length - 1) + vb ** 2 / (lb.length - 1));
    const h = tq(df) * se;
    cell += ' [' + (100 * Math.expm1(d - h)).toFixed(1) + ', ' +
      (100 * Math.expm1(d + h)).toFixed(1) + ']';
  }
  const row = (r) => '<tr><th><a href="runs/' + r.id + '.html">' + r.id + '</a></th><td>' +
    r.commit + '</td><td>' + r.rounds.map(v => v.toPrecision(4)).join(' / ') + '</td><td>' +
    mean(r.rounds).toPrecision(4) + '</td></tr>';
  O.innerHTML = '<h2>' + s.title + '</h2><table><tr><th>run</th><th>commit</th>' +
    '<th>rounds</th><th>mean</th></tr>' + row(a) + row(b) + '</table><p>B against A: ' +
    cell + ' (' + s.direction + ' is better; unpaired 95% interval, Welch)</p>' +
    '<p class="bad">Warning: these runs were not interleaved. What changed on the machine ' +
    'between them is inside this difference; an interleaved A/B run (abbench run with ' +
    'both builds as arms) separates the builds from the machine.</p>';
}
opt(S, SERIES.map((s, i) => [i, s.title])); S.onchange = runs; A.onchange = show;
B.onchange = show; if (SERIES.length) runs();
"""
