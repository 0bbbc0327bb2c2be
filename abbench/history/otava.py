"""Series for change-detection services teams run: one CSV per series in the layout
apache-otava's CSV importer reads (a time column, attribute columns, metric columns),
and the ``otava.yaml`` that names them as its tests."""

from __future__ import annotations

import csv
import datetime as dt
import io
import os
from pathlib import Path

import yaml

from abbench.history.series import Series
from abbench.store.run import atomic_write

#: the columns of each CSV: time, the attributes Otava reports with a change, metrics
OTAVA_COLUMNS = ["time", "commit", "run", "value", "lower", "upper"]


def publish(path: Path, text: str) -> None:
    """Write atomically, readable by all (a site or export is meant to be served)."""
    atomic_write(path, text)
    os.chmod(path, 0o644)


def otava_csv(s: Series) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(OTAVA_COLUMNS)
    for p in s.points:
        when = dt.datetime.fromtimestamp(p.created_ts or 0.0, dt.timezone.utc)
        w.writerow([when.isoformat(timespec="seconds"), p.commit or "", p.run_id,
                    repr(p.value), repr(p.lo), repr(p.hi)])
    return buf.getvalue()


def write_otava(series: list[Series], out_dir: Path) -> Path:
    """``out_dir/<series>.csv`` per series and ``out_dir/otava.yaml`` naming each as a
    ``type: csv`` test (``otava analyze --config-file otava.yaml <test>``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tests = {}
    for s in series:
        name = f"{s.slug}.csv"
        publish(out_dir / name, otava_csv(s))
        tests[s.slug] = {"type": "csv", "file": str((out_dir / name).resolve()),
                         "time_column": "time", "attributes": ["commit", "run"],
                         "metrics": ["value"],
                         "csv_options": {"delimiter": ",", "quote_char": '"'}}
    conf = out_dir / "otava.yaml"
    publish(conf, yaml.safe_dump({"tests": tests}, sort_keys=False))
    return conf
