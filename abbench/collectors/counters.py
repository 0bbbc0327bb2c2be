"""Counter rates over a workload window: Prometheus ``/metrics``, response fields,
and regexes over the server's log.

The default rate is ``misses_per_token``, defined once for every source:

    (prompt tokens not served from cache) / (tokens decoded)

both summed over the window, side calls included. Prometheus: the delta of the
preset's ``misses_counter`` minus ``misses_minus_counter`` (vLLM
``prompt_tokens_total - prompt_tokens_cached_total``, SGLang ``prompt_tokens_total -
cached_tokens_total``, llama.cpp ``prompt_tokens_total``, which already excludes
cached ones). Response fields: per request, its prompt tokens minus the cached ones
it reports, plus the same for each of its side calls. Each row records ``source``."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from abbench.collectors.base import (
    Collector,
    WindowState,
    base_fields,
    decoded_tokens,
    dig,
    record_window,
    window_samples,
)
from abbench.config.arms import ResolvedArm
from abbench.config.collectors import (
    FlushSettings,
    LogRegexSettings,
    PrometheusSettings,
    ResponseFieldSettings,
    _Rate,
)
from abbench.config.infer import see
from abbench.config.presets import Preset, arm_preset
from abbench.errors import ConfigError, RequestError
from abbench.model.records import CountersRecord, FlushRecord, SideCall, WorkloadSample
from abbench.server.http import Reply
from abbench.slot import SlotContext

# --------------------------------------------------------------- Prometheus


def _base_name(name: str) -> str:
    return name[: -len("_total")] if name.endswith("_total") else name


def counter_value(text: str, name: str, labels: dict[str, str] | None = None, *,
                  absent: float | None = None) -> float:
    """The value of counter ``name`` in Prometheus text ``text``, summed over the series
    whose labels include ``labels``. Trusts ``# TYPE``: a gauge or an absent name raises
    KeyError with the reason; an absent name reads ``absent`` when that is given (a
    counter the server creates at its first count)."""
    base = _base_name(name)
    labels = labels or {}
    total, named, found = 0.0, False, False
    for fam in text_string_to_metric_families(text):
        if fam.name not in (base, name):
            continue
        named = True
        if fam.type not in ("counter", "unknown"):
            raise KeyError(f"{name} is a {fam.type}, not a counter (# TYPE); a per-token "
                           "rate needs a counter")
        for s in fam.samples:
            ours = s.name in (base + "_total", name) or (fam.type == "unknown"
                                                         and s.name == base)
            if ours and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
                found = True
    if not named:
        if absent is not None:
            return absent
        raise KeyError(f"{name} is not among the server's metrics")
    if not found:
        raise KeyError(f"{name}: no series with labels {labels}")
    return total


def metric_names_in(text: str) -> set[str]:
    """The metric family names in Prometheus text (``_total`` stripped)."""
    return {_base_name(f.name) for f in text_string_to_metric_families(text)}


def rate_of(delta: float, denominator: float | None) -> float | None:
    if denominator is None:
        return delta
    return delta / denominator if denominator > 0 else None


class _RateCollector(Collector):
    settings: _Rate

    def _per(self, ctx: SlotContext, state: WindowState, samples: list[WorkloadSample],
             scrape_end: str | None = None) -> tuple[float | None, str | None]:
        """The window's denominator, or (None, why) when it cannot be had."""
        per = self.settings.per
        if per == "none":
            return None, None
        if per == "decoded":
            n = decoded_tokens(samples)
            return (float(n), None) if n > 0 else (None, "no tokens were decoded in the window")
        begin = state.data.get("per_begin")
        if scrape_end is None or begin is None:
            return None, f"counter {per} could not be read"
        try:
            return counter_value(scrape_end, per) - begin, None
        except KeyError as e:
            return None, str(e.args[0])

    def _store(self, ctx: SlotContext, row: str, value: float | None, why: str | None,
               window: str = "workload", **detail: Any) -> None:
        name = self.settings.name
        s = self.settings
        detail["spec"] = {"name": name, "label": s.label, "unit": s.unit,
                          "direction": s.direction}
        failed = flush_failure(ctx, row)
        if failed:  # the counts are not from a cold cache: no value rather than a wrong one
            value, why = None, failed
        if value is None:
            record_window(ctx, collector=self.name, window=window, workload=row, metrics={},
                          unavailable={name: why or "no value"}, **detail)
        else:
            record_window(ctx, collector=self.name, window=window, workload=row,
                          metrics={name: value}, **detail)


class PrometheusCollector(_RateCollector):
    """Delta of a counter (minus another) over the window, per decoded token."""

    name = "prometheus"
    settings: PrometheusSettings

    def __init__(self, settings: PrometheusSettings):
        self.settings = settings

    def _names(self, preset: Preset) -> tuple[str, str | None]:
        s = self.settings
        if s.counter:
            return s.counter, s.minus
        if not preset.misses_counter:
            raise ConfigError(f"preset {preset.name} names no misses counter",
                              hint="give counter: (and minus:) in the prometheus collector, "
                                   "or misses_counter under preset_fields:" + see("collectors"))
        return preset.misses_counter, s.minus or preset.misses_minus_counter

    def check(self, arm: ResolvedArm) -> list[str]:
        preset = arm_preset(arm)
        self._names(preset)
        if not (self.settings.path or preset.metrics_path):
            raise ConfigError(f"preset {preset.name} has no metrics path",
                              hint="give path: in the prometheus collector, or metrics_path "
                                   "under preset_fields:" + see("collectors"))
        return []

    def _scrape(self, ctx: SlotContext) -> tuple[str | None, str | None]:
        path = self.settings.path or arm_preset(ctx.arm).metrics_path
        if not path:
            return None, "no metrics path (set path: or preset_fields.metrics_path)"
        try:  # the client's transport re-sends once on a kept-alive connection closed
            r = ctx.client.get(path, timeout=10)
        except RequestError as e:
            return None, e.message
        if r.status != 200:
            flags = arm_preset(ctx.arm).metrics_flags
            hint = f" (does the server run with {flags}?)" if flags else ""
            return None, f"GET {path} answered HTTP {r.status}{hint}"
        return r.text, None

    def _read(self, text: str, preset: Preset) -> dict[str, float]:
        counter, minus = self._names(preset)
        lazy = preset.counters_absent_until_counted
        out: dict[str, float] = {}
        for name, labels in ((counter, self.settings.labels), (minus, self.settings.labels),
                             (self.settings.per, None)):
            if name and name not in ("decoded", "none"):
                out[name] = counter_value(text, name, labels,
                                          absent=0.0 if name in lazy else None)
        return out

    def begin_server(self, ctx: SlotContext) -> None:
        """Once per server life: which configured counters this build exposes."""
        text, why = self._scrape(ctx)
        preset = arm_preset(ctx.arm)
        rec: dict[str, Any] = {**base_fields(ctx), "type": "counters",
                               "collector": self.name}
        if text is None:
            rec.update(ok=False, reason=why)
        else:
            wanted = dict(preset.metric_names)
            try:
                counter, minus = self._names(preset)
            except ConfigError:
                counter, minus = None, None
            for name in (counter, minus):
                if name and name not in wanted.values():
                    wanted[name] = name
            present = metric_names_in(text)
            lazy = preset.counters_absent_until_counted
            rec.update(ok=True, missing=sorted(n for n in wanted.values()
                                               if _base_name(n) not in present
                                               and n not in lazy))
        ctx.record(CountersRecord.model_validate(rec))

    def begin_window(self, ctx: SlotContext, row: str) -> WindowState:
        state = WindowState(row)
        text, why = self._scrape(ctx)
        if text is None:
            state.data["why"] = why
            return state
        try:
            state.data["begin"] = self._read(text, arm_preset(ctx.arm))
        except KeyError as e:
            state.data["why"] = str(e.args[0])
        return state

    def end_window(self, ctx: SlotContext, state: WindowState) -> None:
        samples = window_samples(ctx, state.row)
        begin = state.data.get("begin")
        if begin is None:
            self._store(ctx, state.row, None, state.data.get("why"))
            return
        preset = arm_preset(ctx.arm)
        counter, minus = self._names(preset)
        end, why = self._settled_end(ctx, preset)
        if end is None:
            self._store(ctx, state.row, None, why)
            return
        deltas = {k: end[k] - begin[k] for k in end}
        delta = deltas[counter] - (deltas[minus] if minus else 0.0)
        if self.settings.per in ("decoded", "none"):
            per, why = self._per(ctx, state, samples)
        else:
            per, why = deltas.get(self.settings.per), None
        if self.settings.per != "none" and per is None:
            self._store(ctx, state.row, None, why, deltas=deltas)
            return
        value = rate_of(delta, per if self.settings.per != "none" else None)
        source = f"prometheus: {counter}" + (f" - {minus}" if minus else "")
        self._store(ctx, state.row, value, "the denominator was 0", deltas=deltas,
                    per=per, source=source)

    def _settled_end(self, ctx: SlotContext, preset: Preset
                     ) -> tuple[dict[str, float] | None, str | None]:
        """Scrape until two reads agree (a server may count a request just after it
        answered it), at most ``settle_s``."""
        deadline = time.perf_counter() + self.settings.settle_s
        last: dict[str, float] | None = None
        while True:
            text, why = self._scrape(ctx)
            if text is None:
                return None, why
            try:
                now = self._read(text, preset)
            except KeyError as e:
                return None, str(e.args[0])
            if now == last or time.perf_counter() >= deadline:
                return now, None
            last = now
            time.sleep(0.05)


# ----------------------------------------------------------- response fields


class ResponseFieldCollector(_RateCollector):
    """Per request: prompt tokens minus the cached ones the response reports, per
    decoded token (or the field itself, with ``value: field``)."""

    name = "response_field"
    settings: ResponseFieldSettings

    def __init__(self, settings: ResponseFieldSettings):
        self.settings = settings

    def check(self, arm: ResolvedArm) -> list[str]:
        preset = arm_preset(arm)
        if not (self.settings.field or preset.cached_tokens_fields):
            raise ConfigError(f"preset {preset.name} names no cached-tokens field",
                              hint="give field: in the response_field collector, or "
                                   "cached_tokens_fields under preset_fields:"
                                   + see("collectors"))
        return []

    def begin_window(self, ctx: SlotContext, row: str) -> WindowState:
        return WindowState(row)

    def end_window(self, ctx: SlotContext, state: WindowState) -> None:
        s = self.settings
        paths = s.field or list(arm_preset(ctx.arm).cached_tokens_fields)
        for rec in window_samples(ctx, state.row):
            rep = rec.rep
            if not rec.valid:
                continue
            if not paths:
                self._store(ctx, state.row, None, "no response field configured (field:)",
                            window="request", rep=rep)
                continue
            raw = _field(rec, paths, s.missing)
            if raw is None:
                self._store(ctx, state.row, None, f"the response has none of {paths}",
                            window="request", rep=rep)
                continue
            value = float(raw)
            if s.value == "misses":
                # misses/token, one definition (see misses_per_token): the side calls'
                # uncached prompt tokens count with their decoded tokens
                misses, why = request_misses(rec, paths, s.missing)
                if misses is None:
                    self._store(ctx, state.row, None, why, window="request", rep=rep)
                    continue
                value = misses
            per = float(decoded_tokens([rec]))
            if s.per == "none":
                out: float | None = value
            elif s.per == "decoded":
                out = rate_of(value, per)
            else:
                self._store(ctx, state.row, None, "a response-field rate is per decoded token "
                            "or none", window="request", rep=rep)
                continue
            self._store(ctx, state.row, out, "no tokens decoded", window="request", rep=rep,
                        field_value=raw, per=per, source=f"response: {', '.join(paths)}")


def _field(rec: WorkloadSample | SideCall, paths: list[str], missing: str) -> Any:
    raw = next((v for v in (dig(rec, p) for p in paths) if v is not None), None)
    return 0 if raw is None and missing == "zero" else raw


def request_misses(rec: WorkloadSample, paths: list[str], missing: str = "absent"
                   ) -> tuple[float | None, str | None]:
    """Prompt tokens not served from cache in one request and its side calls."""
    total = 0.0
    parts: list[WorkloadSample | SideCall] = [rec, *(rec.side_calls or ())]
    for part in parts:
        if isinstance(part, SideCall) and not part.ok:
            continue  # a failed side call: the server may not have seen it either
        cached = _field(part, paths, missing)
        if part.prompt_tokens is None or cached is None:
            where = "a side call" if part is not rec else "the response"
            return None, f"{where} has no prompt_tokens or none of {paths}"
        total += float(part.prompt_tokens) - float(cached)
    return total, None


# ----------------------------------------------------------------- log regex


def _settled_size(path: Path, *, quiet: float = 0.05, limit: float = 1.0) -> int:
    """The log's size once it has not grown for ``quiet`` seconds (at most ``limit``):
    the lines a server printed as a request ended are in the file."""
    deadline = time.monotonic() + limit
    size = path.stat().st_size
    while True:
        time.sleep(quiet)
        now = path.stat().st_size
        if now == size or time.monotonic() >= deadline:
            return now
        size = now


class LogRegexCollector(_RateCollector):
    """Numbers captured from the server log's lines written during the window."""

    name = "log_regex"
    settings: LogRegexSettings

    def __init__(self, settings: LogRegexSettings):
        self.settings = settings
        self.rx = re.compile(settings.pattern)
        #: per server log: the bytes read up to their last whole line, and the last value
        #: in them (each window reads only what the log gained since the one before)
        self._read: dict[Path, tuple[int, float]] = {}

    def _last_before(self, path: Path, size: int) -> float:
        """The last value in the log's first ``size`` bytes (0.0 for none)."""
        done, last = self._read.get(path, (0, 0.0))
        if size < done:  # another file at this path
            done, last = 0, 0.0
        with open(path, "rb") as f:
            f.seek(done)
            chunk = f.read(size - done)
        whole = chunk.rfind(b"\n") + 1  # a line still being written is read again
        lines = self._values(chunk[:whole].decode("utf-8", "replace"))
        if lines:
            last = lines[-1]
        self._read[path] = (done + whole, last)
        tail = self._values(chunk[whole:].decode("utf-8", "replace"))
        return tail[-1] if tail else last

    def _values(self, text: str) -> list[float]:
        out = []
        for m in self.rx.finditer(text):
            g = m.group("n") if "n" in self.rx.groupindex else m.group(1)
            try:
                out.append(float(g))
            except (TypeError, ValueError):
                continue
        return out

    def begin_window(self, ctx: SlotContext, row: str) -> WindowState:
        path = ctx.server.log_path
        try:
            # the previous request's last lines first (a warm-up's timing line, printed
            # as its response ended, once landed in the next row's window)
            offset = _settled_size(path)
            last = self._last_before(path, offset)
        except OSError:
            offset, last = 0, 0.0
        return WindowState(row, {"offset": offset, "last": last})

    def end_window(self, ctx: SlotContext, state: WindowState) -> None:
        try:
            _settled_size(ctx.server.log_path)  # the window's last lines reach the file
            with open(ctx.server.log_path, "rb") as f:
                f.seek(state.data["offset"])
                text = f.read().decode("utf-8", "replace")
        except OSError as e:
            self._store(ctx, state.row, None, f"cannot read the server log: {e}")
            return
        values = self._values(text)
        if not values:
            self._store(ctx, state.row, None, "no log line matched the pattern in the window")
            return
        delta = sum(values) if self.settings.mode == "sum" else values[-1] - state.data["last"]
        per, why = self._per(ctx, state, window_samples(ctx, state.row))
        if self.settings.per != "none" and per is None:
            self._store(ctx, state.row, None, why, matches=len(values))
            return
        self._store(ctx, state.row, rate_of(delta, per), "the denominator was 0",
                    matches=len(values), delta=delta, per=per)


# ----------------------------------------------------------------- cache flush


class FlushCollector(Collector):
    """Empties the prefix cache as each workload window opens; records the outcome."""

    name = "flush"

    def __init__(self, settings: FlushSettings):
        self.settings = settings

    def check(self, arm: ResolvedArm) -> list[str]:
        preset = arm_preset(arm)
        if not (self.settings.path or preset.flush_path):
            raise ConfigError(f"preset {preset.name} has no cache-flush endpoint",
                              hint="give path: in the flush collector, or flush_path under "
                                   "preset_fields:, or leave the flush collector out"
                                   + see("collectors"))
        return []

    def begin_window(self, ctx: SlotContext, row: str) -> None:
        preset = arm_preset(ctx.arm)
        path = self.settings.path or preset.flush_path
        rec: dict[str, Any] = {**base_fields(ctx), "type": "flush", "workload": row,
                               "path": path}
        if not path:
            rec.update(ok=False, reason=f"preset {ctx.arm.preset} has no flush endpoint "
                       "(set path: or preset_fields.flush_path)")
        else:
            rec.update(flush_once(lambda: ctx.client.call(self.settings.method, path, timeout=60),
                                  preset))
        ctx.record(FlushRecord.model_validate(rec))
        if rec.get("ok"):
            ctx.flushed.add(row)
        return None


def flush_once(send: Callable[[], Reply], preset: Preset, *,
               sleep: Any = time.sleep) -> dict[str, Any]:
    """Ask the server to empty its cache (``send`` makes the one request, through the
    client's transport): ok only on HTTP 200 and, where the preset names a success field
    (vLLM's ``{"success": false}`` while blocks are held), that field true; a false one
    is asked again for at most ``preset.flush_retry_s``."""
    needs = f" (the endpoint needs {preset.flush_needs})" if preset.flush_needs else ""
    deadline = time.perf_counter() + preset.flush_retry_s
    attempts = 0
    while True:
        attempts += 1
        try:
            r = send()
        except RequestError as e:
            return {"ok": False, "attempts": attempts, "reason": e.message}
        out: dict[str, Any] = {"status": r.status, "attempts": attempts}
        if r.status != 200:
            return {**out, "ok": False, "reason": f"HTTP {r.status}: {r.excerpt(200)}"
                    + (needs if r.status == 404 else "")}
        field_name = preset.flush_success_field
        if not field_name:
            return {**out, "ok": True}
        try:
            body = json.loads(r.text)
        except ValueError:
            body = None
        value = dig(body, field_name)
        out["body"] = body if isinstance(body, dict) else r.excerpt(200)
        if value is True:
            return {**out, "ok": True}
        if value is not False or time.perf_counter() >= deadline:
            why = (f"the server answered {field_name}={value!r}" if value is not None else
                   f"the answer has no boolean {field_name!r}: {r.excerpt(200)}")
            return {**out, "ok": False,
                    "reason": f"{why} after {attempts} attempt(s) in {preset.flush_retry_s:g} s "
                              "(blocks still held by running requests?)"}
        sleep(0.25)


def flush_failure(ctx: SlotContext, row: str) -> str | None:
    """Why this slot's flush of window ``row`` failed, or None (no flush, or it worked)."""
    for r in reversed(ctx.records()):
        if isinstance(r, FlushRecord) and r.slot == ctx.slot.index and r.workload == row:
            return None if r.ok else f"the cache flush failed: {r.reason}"
    return None
