"""Speculative decoding per prompt set: decode tok/s and acceptance, in every server life.

Each prompt of each set (``speculative: {sets: [code, ctx, think, {name: nonce, nonce:
{...}}]}``) is decoded greedily, streamed, one at a time, after the workloads. A set
gives one sample (row ``speculative <set>``) with:

- ``decode_tok_s``: the sum over its prompts of (tokens - 1) over the sum of
  (last chunk - first chunk), the client's clock;
- ``spec_accept_rate``: accepted / drafted tokens;
- ``spec_accept_len``: mean accepted length, 1 + accepted / verification steps (the
  tokens one target forward pass yields; llama.cpp's and vLLM's definition);
- ``spec_drafted_per_token``: drafted tokens / output tokens.

Where each server says it is its preset's (``spec_*`` fields): the Prometheus
counters' deltas over the set where the server exposes them (llama.cpp with
``--metrics``, vLLM), else the final chunk's per-request fields summed over the set
(llama.cpp ``timings.draft_n``/``draft_n_accepted``, SGLang ``meta_info``). A figure
no source gives is left out and said why under ``unavailable``, never written as 0.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from abbench.collectors.base import dig
from abbench.collectors.counters import counter_value
from abbench.config.presets import Preset
from abbench.config.quality import SpeculativeConfig
from abbench.config.schema import Config
from abbench.errors import Interrupted, RequestError
from abbench.model.records import DecodeSample, at
from abbench.quality.fingerprints import FingerprintTask, PromptSet
from abbench.slot import SlotContext, SlotTask
from abbench.workload.decode import StreamResult

#: the three counts, by meaning
COUNTS = ("drafted", "accepted", "steps")


def row_of(set_name: str) -> str:
    """The row id of a prompt set's sample."""
    return f"speculative {set_name}"


@dataclass
class SetTotals:
    """One prompt set's requests, summed."""

    tokens: int = 0
    decode_tokens: int = 0
    decode_s: float = 0.0
    #: per-request counts summed (None: some request's answer lacked the field)
    fields: dict[str, int | None] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))
    requests: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def add(self, item_id: str | None, r: StreamResult, preset: Preset) -> None:
        n = r.completion_tokens or 0
        self.tokens += n
        span = None if r.t_first is None or r.t_last is None else r.t_last - r.t_first
        if n >= 2 and span and span > 0:
            self.decode_tokens += n - 1
            self.decode_s += span
        answer = {"timings": r.timings, "usage": r.usage, **r.extra}
        rec: dict[str, Any] = {"id": item_id, "completion_tokens": n, "decode_s": span}
        paths = {"drafted": preset.spec_drafted_field, "accepted": preset.spec_accepted_field,
                 "steps": preset.spec_steps_field}
        for k, path in paths.items():
            v = dig(answer, path) if path else None
            rec[k] = v if isinstance(v, int) and not isinstance(v, bool) else None
            have = self.fields[k]
            self.fields[k] = None if have is None or rec[k] is None else have + rec[k]
        self.requests.append(rec)


def acceptance(counts: dict[str, float | None], tokens: int) -> dict[str, float]:
    """The acceptance metrics that ``counts`` (drafted, accepted, steps) allow."""
    out: dict[str, float] = {}
    drafted, accepted, steps = (counts.get(k) for k in COUNTS)
    if drafted is not None and tokens > 0:
        out["spec_drafted_per_token"] = drafted / tokens
    if drafted and accepted is not None:
        out["spec_accept_rate"] = accepted / drafted
    if steps and accepted is not None:
        out["spec_accept_len"] = 1 + accepted / steps
    return out


def scrape(ctx: SlotContext, preset: Preset) -> dict[str, float] | None:
    """The preset's speculative counters now (a name the server lacks is left out);
    None when there is no metrics endpoint to read."""
    if not preset.spec_counters or not preset.metrics_path:
        return None
    try:
        r = ctx.client.get(preset.metrics_path)
    except RequestError:
        return None
    if r.status != 200:
        return None
    text = r.body.decode("utf-8", "replace")
    out: dict[str, float] = {}
    for k, name in preset.spec_counters.items():
        try:
            out[k] = counter_value(text, name)
        except (KeyError, ValueError):
            continue
    return out


def set_counts(before: dict[str, float] | None, after: dict[str, float] | None,
               totals: SetTotals) -> tuple[dict[str, float | None], dict[str, str]]:
    """Each count from the counters' delta, else the responses' sum; and its source."""
    counts: dict[str, float | None] = {}
    source: dict[str, str] = {}
    for k in COUNTS:
        if before is not None and after is not None and k in before and k in after:
            counts[k], source[k] = after[k] - before[k], "prometheus"
        elif totals.fields[k] is not None and totals.requests:
            counts[k], source[k] = float(totals.fields[k] or 0), "response"
        else:
            counts[k] = None
    return counts, source


_WHY = {"spec_accept_rate": "no drafted and accepted counts (or nothing was drafted)",
        "spec_accept_len": "no verification-step count (llama.cpp: run with --metrics)",
        "spec_drafted_per_token": "no drafted-token count"}


class SpeculativeTask:
    """Decodes every prompt set after the workloads; one sample per set."""

    cold = False
    name = "speculative decoding"

    def __init__(self, cfg: Config, sc: SpeculativeConfig):
        self.sc = sc
        self.sets_of = FingerprintTask(cfg, sc, cold=True)  # resolves and checks the sets

    def sets(self, run_seed: int) -> list[PromptSet]:
        out = self.sets_of.sets(run_seed)
        for ps in out:
            if self.sc.prompts is not None:
                ps.items = ps.items[: self.sc.prompts]
        return out

    def run(self, ctx: SlotContext) -> None:
        preset = ctx.client.preset
        for ps in self.sets(ctx.run_seed):
            totals = SetTotals()
            t0 = time.time()
            before = scrape(ctx, preset)
            for item in ps.items:
                if ctx.stop_event.is_set():
                    raise Interrupted("interrupted during the speculative-decoding prompts")
                messages = item.chat()
                try:
                    r = ctx.client.complete(item.prompt or "", item.max_tokens or ps.max_tokens,
                                            exact=False, messages=messages,
                                            path=self.sc.chat_path if messages else None,
                                            stop_event=ctx.stop_event)
                    totals.add(item.id, r, preset)
                except RequestError as e:
                    totals.errors.append(f"{item.id}: {e.message}")
            after = scrape(ctx, preset)
            ctx.record(self.sample(ctx, ps, totals, before, after, t0))

    def sample(self, ctx: SlotContext, ps: PromptSet, totals: SetTotals,
               before: dict[str, float] | None, after: dict[str, float] | None,
               t0: float) -> DecodeSample:
        counts, source = set_counts(before, after, totals)
        metrics = acceptance(counts, totals.tokens)
        if totals.decode_s > 0:
            metrics["decode_tok_s"] = totals.decode_tokens / totals.decode_s
        unavailable = {k: why for k, why in _WHY.items() if k not in metrics}
        valid = not totals.errors and "decode_tok_s" in metrics
        reason = None if valid else ("; ".join(totals.errors[:3]) if totals.errors
                                     else "no prompt gave two tokens: no decode rate")
        return DecodeSample.model_validate({
            **at(ctx.slot), "type": "sample", "workload": row_of(ps.name), "rep": 0, "t": t0,
            "decode_tokens": ps.max_tokens, "completion_tokens": totals.tokens,
            "valid": valid, "status": "ok" if valid else "failed", "reason": reason,
            "metrics": metrics, "set": ps.name, "counts": counts, "spec_source": source,
            "unavailable": unavailable or None, "requests": totals.requests})


def speculative_tasks(cfg: Config) -> list[SlotTask]:
    """The speculative-decoding pass ``speculative:`` asks for (abbench.tasks entry)."""
    return [] if cfg.speculative is None else [SpeculativeTask(cfg, cfg.speculative)]
