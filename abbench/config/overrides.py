"""The one way command-line options enter a config: validated like the file's own
fields, with errors that name the option."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from abbench.config.schema import Config, check_until_ci_cap
from abbench.config.stats import StatsConfig
from abbench.errors import ConfigError


def with_stats(cfg: Config, **changes: Any) -> Config:
    """``cfg`` with ``stats`` fields overridden (CLI options); None leaves a field."""
    changes = {k: v for k, v in changes.items() if v is not None}
    if not changes:
        return cfg
    try:
        stats = StatsConfig.model_validate({**cfg.stats.model_dump(), **changes})
    except ValidationError as e:
        msg = "; ".join(f"{'.'.join(map(str, er['loc']))}: {er['msg']}" for er in e.errors())
        raise ConfigError(msg, where="command line",
                          hint="write percentages like --until-ci 1% (or 0.01)") from None
    try:
        check_until_ci_cap(stats, cfg.rounds)
    except ValueError as e:
        raise ConfigError(str(e), where="command line",
                          hint=f"the arms file plans {cfg.rounds} rounds") from None
    return cfg.model_copy(update={"stats": stats})
