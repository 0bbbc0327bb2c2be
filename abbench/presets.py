"""What each server family needs: readiness, tokenize, metrics, cache flush, request fields.

Facts from the servers' sources (../shared/notes/servers.md). Every field can be
overridden per arm in arms.yaml; ``custom`` assumes only an OpenAI-style
``/v1/completions`` endpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from abbench.errors import ConfigError


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
    flush_path: str | None = None
    #: fields every completion request carries to force greedy, exact-length decode
    request_extra: dict[str, Any] = field(default_factory=dict)
    #: the id-list prompt gets no BOS from the server: prepend it ourselves
    prepend_bos: bool = False
    #: counters for misses/token and the like, by meaning
    metric_names: dict[str, str] = field(default_factory=dict)
    #: where a response says how many prompt tokens came from cache
    cached_tokens_field: str | None = None


PRESETS: dict[str, Preset] = {
    "llama.cpp": Preset(
        name="llama.cpp",
        tokenize_path="/tokenize",
        tokenize_field="content",
        props_path="/props",
        flush_path=None,  # per request: cache_prompt false
        request_extra={"n_predict": None, "cache_prompt": False},
        prepend_bos=True,
        metric_names={
            "prompt_tokens": "llamacpp:prompt_tokens_total",
            "generation_tokens": "llamacpp:tokens_predicted_total",
        },
        cached_tokens_field="timings.cache_n",
    ),
    "vllm": Preset(
        name="vllm",
        tokenize_path="/tokenize",
        props_path="/v1/models",
        flush_path="/reset_prefix_cache",
        request_extra={"min_tokens": None},
        metric_names={
            "prompt_tokens": "vllm:prompt_tokens",
            "generation_tokens": "vllm:generation_tokens",
            "prefix_cache_queries": "vllm:prefix_cache_queries",
            "prefix_cache_hits": "vllm:prefix_cache_hits",
        },
        cached_tokens_field="usage.prompt_tokens_details.cached_tokens",
    ),
    "sglang": Preset(
        name="sglang",
        tokenize_path="/v1/tokenize",
        props_path="/get_server_info",
        flush_path="/flush_cache",
        request_extra={"min_tokens": None},
        metric_names={
            "prompt_tokens": "sglang:prompt_tokens",
            "generation_tokens": "sglang:generation_tokens",
            "cached_tokens": "sglang:cached_tokens",
        },
        cached_tokens_field="meta_info.cached_tokens",
    ),
    "custom": Preset(name="custom", metrics_path=None),
}


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown preset {name!r}",
                          hint=f"use one of: {', '.join(PRESETS)}") from None
