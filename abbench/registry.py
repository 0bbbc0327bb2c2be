"""Extension by declaration: what abbench can run is found through Python entry points.

Three groups, each ``name -> "module:attribute"``:

- ``abbench.collectors``: a collector kind (``kind:`` under ``collectors:``) -> a class
  taking the entry's settings (a pydantic model; a plugin's own kind gets
  :class:`abbench.config.collectors.PluginSettings`, its fields as given);
- ``abbench.presets``: a preset name (``preset:``) -> a :class:`abbench.config.presets.Preset`;
- ``abbench.tasks``: a provider of slot tasks -> a function ``(cfg) -> list[SlotTask]``.

The built-in ones are declared the same way, in pyproject.toml; :data:`BUILTIN` is
the same table for a source tree that was never installed (``PYTHONPATH=.``), and a
test keeps the two equal. A third-party package joins by declaring its own, e.g.
``[project.entry-points."abbench.collectors"] kv_misses = "myfork_abbench:KvMisses"``.
"""

from __future__ import annotations

import functools
import importlib
from importlib import metadata
from typing import Any

from abbench.errors import ConfigError

GROUPS = ("abbench.collectors", "abbench.presets", "abbench.tasks")

BUILTIN: dict[str, dict[str, str]] = {
    "abbench.collectors": {
        "vram": "abbench.collectors.memory:MemoryCollector",
        "rss": "abbench.collectors.memory:MemoryCollector",
        "prometheus": "abbench.collectors.counters:PrometheusCollector",
        "response_field": "abbench.collectors.counters:ResponseFieldCollector",
        "log_regex": "abbench.collectors.counters:LogRegexCollector",
        "flush": "abbench.collectors.counters:FlushCollector",
        "drift": "abbench.collectors.drift:DriftCollector",
    },
    "abbench.presets": {
        "llama.cpp": "abbench.config.presets:LLAMA_CPP",
        "vllm": "abbench.config.presets:VLLM",
        "sglang": "abbench.config.presets:SGLANG",
        "custom": "abbench.config.presets:CUSTOM",
    },
    "abbench.tasks": {
        "collectors": "abbench.collectors.tasks:collector_tasks",
        "fingerprints": "abbench.quality.fingerprints:fingerprint_tasks",
        "quality": "abbench.quality.checks:quality_tasks",
        "speculative": "abbench.quality.speculative:speculative_tasks",
    },
}


@functools.cache
def entries(group: str) -> dict[str, str]:
    """``name -> "module:attribute"`` of ``group``: the built-in ones first (in their
    declared order), then the installed packages' own, sorted by name. A plugin cannot
    replace a built-in name."""
    out = dict(BUILTIN[group])
    found = sorted((ep.name, ep.value) for ep in metadata.entry_points(group=group))
    for name, value in found:
        out.setdefault(name, value)
    return out


def names(group: str) -> list[str]:
    return list(entries(group))


@functools.cache
def load(group: str, name: str) -> Any:
    """The object an entry names (imported on first use)."""
    try:
        target = entries(group)[name]
    except KeyError:
        raise ConfigError(f"nothing named {name!r} is registered in {group}",
                          hint=f"known: {', '.join(entries(group))}; a package of your own "
                          f"joins with a {group!r} entry point") from None
    module, _, attr = target.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"{group} entry {name!r} ({target}) cannot be loaded: {e}",
                          hint="reinstall the package that declares it, or uninstall it"
                          ) from None
    return obj
