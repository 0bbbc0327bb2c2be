"""The arms file as a run stores it (config.yaml, run.json): environment
values and every known secret redacted."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from abbench.config.arms import resolve_arms
from abbench.config.schema import Config
from abbench.config.secrets import (
    argv_secrets,
    environment_secrets,
    is_secret_name,
    nested_secrets,
    scrub,
)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: ("***" if is_secret_name(k) and v else v) for k, v in env.items()}


def config_secret_values(cfg: Config) -> list[str]:
    """Secret values a config can carry: its env and vars, and the environment's
    (``${HF_TOKEN}`` expands into start commands)."""
    envs: list[Mapping[str, str]] = [os.environ, cfg.vars, cfg.defaults.env or {}]
    envs += [a.env or {} for a in cfg.arms]
    found = environment_secrets(*envs)
    for arm in resolve_arms(cfg):
        found += argv_secrets(arm.argv) + nested_secrets(arm.request_extra)
        found += environment_secrets(arm.env)
    return sorted(set(found), key=len, reverse=True)


def config_for_storage(cfg: Config) -> dict[str, Any]:
    """The resolved config as stored with a run, secrets redacted."""
    data = cfg.model_dump(mode="json", exclude_none=True)
    for arm in data.get("arms", []):
        if "env" in arm:
            arm["env"] = redact_env(arm["env"])
    if "env" in data.get("defaults", {}):
        data["defaults"]["env"] = redact_env(data["defaults"]["env"])
    data["vars"] = redact_env(data.get("vars", {}))
    if not data.get("sources"):  # the digest of a file without git arms is unchanged
        data.pop("sources", None)
    # cpus/nice only when set: the stored config (and its digest, which resume checks)
    # of an arms file without them is what it was before they existed
    data["resolved_arms"] = [
        {**a.model_dump(mode="json", exclude={k for k in ("cpus", "nice", "git")
                                              if getattr(a, k) is None}),
         "env": redact_env(a.env)} for a in resolve_arms(cfg)
    ]
    return scrub(data, config_secret_values(cfg))
