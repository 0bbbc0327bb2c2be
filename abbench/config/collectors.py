"""The ``collectors:`` section of arms.yaml: one typed, frozen model per kind."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
)

from abbench import registry
from abbench.config.frozen import Frozen, endpoint_path
from abbench.errors import clip_repr


class _Frozen(Frozen):
    pass


Window = Literal["workload", "server"]
_BOTH: list[Window] = ["workload", "server"]


class VramSettings(_Frozen):
    """Peak GPU memory of the server's process tree and of the device (NVML)."""

    kind: Literal["vram"]
    period_ms: float = Field(20.0, gt=0, le=10000, description="sampling period; short "
                             "spikes between two samples are missed")
    gpus: list[int | str] | None = Field(None, description="NVML indices or UUIDs; default: "
                                         "the arm's CUDA_VISIBLE_DEVICES, else every GPU")
    windows: list[Window] = Field(default_factory=lambda: _BOTH.copy(), min_length=1)
    rss_fallback: bool = Field(True, description="without NVML, or when the server holds no "
                               "GPU memory, record the tree's peak RSS instead")


class RssSettings(_Frozen):
    """Peak resident memory (RSS) of the server's process tree (psutil)."""

    kind: Literal["rss"]
    period_ms: float = Field(20.0, gt=0, le=10000)
    windows: list[Window] = Field(default_factory=lambda: _BOTH.copy(), min_length=1)


class _Rate(_Frozen):
    name: str = Field("misses_per_token", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
                      description="metric key in samples.jsonl; misses_per_token is the "
                      "'misses/token' row")
    label: str | None = Field(None, description="row label for a metric of your own")
    unit: str = ""
    direction: Literal["higher", "lower"] = "lower"
    per: str = Field("decoded", description="denominator: 'decoded' (tokens the client "
                     "received in the window, side calls included), 'none' (the raw delta), "
                     "or a Prometheus counter name")


class PrometheusSettings(_Rate):
    """A counter's delta over each workload window, per decoded token (``/metrics``)."""

    kind: Literal["prometheus"]
    counter: str | None = Field(None, description="counter name (with or without _total); "
                                "default: the preset's misses counter")
    minus: str | None = Field(None, description="a counter whose delta is subtracted "
                              "(hits from queries); default: the preset's, when counter is "
                              "not given")
    labels: dict[str, str] = Field(default_factory=dict, description="only series with these "
                                   "label values count (summed over the rest)")
    path: Annotated[str | None, AfterValidator(endpoint_path)] = Field(
        None, description="metrics path; default: the preset's")
    settle_s: float = Field(1.0, ge=0, le=30, description="at a window's end, wait up to this "
                            "long for the counters to stop moving")


class ResponseFieldSettings(_Rate):
    """Per request, from a field of the response (e.g. ``timings.cache_n``)."""

    kind: Literal["response_field"]
    field: list[str] | None = Field(None, description="dotted paths tried in order; default: "
                                    "the preset's cached-tokens fields")
    value: Literal["misses", "field"] = Field("misses", description="misses: prompt_tokens - "
                                              "field; field: the field itself")
    missing: Literal["unavailable", "zero"] = Field("unavailable", description="a response "
                                                    "without the field: unavailable, or 0 "
                                                    "(vLLM leaves it out when it is 0)")

    @field_validator("field", mode="before")
    @classmethod
    def _one_or_many(cls, v: object) -> object:
        return [v] if isinstance(v, str) else v


class LogRegexSettings(_Rate):
    """A number in the server's log lines, for servers that only log their counters."""

    kind: Literal["log_regex"]
    pattern: str = Field(description="regex with one group (or a group named n) that "
                         "captures a number")
    mode: Literal["sum", "last"] = Field("sum", description="sum: each match adds; last: a "
                                         "running total, the window's delta counts")

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            rx = re.compile(v)
        except re.error as e:
            raise ValueError(f"pattern {clip_repr(v)} is not a regex: {e}") from None
        if rx.groups < 1:
            raise ValueError("pattern needs a group that captures the number, e.g. "
                             r"'misses=(\d+)'")
        return v


class DriftSettings(_Frozen):
    """GPU clocks, temperature, power (NVML) and CPU frequency and load, per server life."""

    kind: Literal["drift"]
    period_s: float = Field(1.0, gt=0, le=60)
    warn_pct: float = Field(5.0, gt=0, description="warn when arms differ, or the run drifts, "
                            "by more than this percent")


class FlushSettings(_Frozen):
    """Not a metric: empty the server's prefix cache (the preset's flush_path) as each
    workload window opens, so that the collectors listed after it count from a cold
    cache. Each flush is recorded with its HTTP status."""

    kind: Literal["flush"]
    path: Annotated[str | None, AfterValidator(endpoint_path)] = Field(
        None, description="default: the preset's flush_path")
    method: Literal["POST", "GET"] = "POST"


class PluginSettings(BaseModel):
    """A collector kind a package of its own registers (abbench.collectors entry
    points): its fields are the plugin's to read (``model_extra``)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    kind: str

    @field_validator("kind")
    @classmethod
    def _registered(cls, kind: str) -> str:
        known = registry.names("abbench.collectors")
        if kind not in known:
            raise ValueError(f"unknown collector kind {clip_repr(kind)}; known: {', '.join(known)} "
                             "(a package of your own adds one with an abbench.collectors "
                             "entry point)")
        return kind


_BUILTIN_KINDS = ("vram", "rss", "prometheus", "response_field", "log_regex", "drift", "flush")


def _kind(value: Any) -> str:
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    return kind if kind in _BUILTIN_KINDS else "plugin"


CollectorSettings = Annotated[
    Annotated[VramSettings, Tag("vram")] | Annotated[RssSettings, Tag("rss")]
    | Annotated[PrometheusSettings, Tag("prometheus")]
    | Annotated[ResponseFieldSettings, Tag("response_field")]
    | Annotated[LogRegexSettings, Tag("log_regex")] | Annotated[DriftSettings, Tag("drift")]
    | Annotated[FlushSettings, Tag("flush")] | Annotated[PluginSettings, Tag("plugin")],
    Discriminator(_kind),
]
