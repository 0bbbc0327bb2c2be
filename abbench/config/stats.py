"""``stats:`` in arms.yaml, and the percentages it (and the command line) take."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from abbench.errors import ConfigError

_PCT_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*%\s*$")


def parse_fraction(value: Any) -> Any:
    """``"1%"`` -> 0.01; a plain number is a fraction (0.01); others pass through."""
    if isinstance(value, str):
        m = _PCT_RE.match(value)
        if m:
            return float(m.group(1)) / 100
        try:
            return float(value)
        except ValueError:
            raise ValueError(f"{value!r} is not a percentage: write e.g. 1% or 0.01") from None
    return value


def fraction_option(text: str, name: str) -> float:
    """A command-line percentage (``2%`` or ``0.02``) as a fraction in (0, 1)."""
    try:
        v = float(parse_fraction(text))
    except ValueError as e:
        raise ConfigError(str(e), where=name, hint="write e.g. 2% or 0.02") from None
    if not 0 < v < 1:
        raise ConfigError(f"{text!r} is not between 0% and 100%", where=name,
                          hint="write e.g. 2% or 0.02")
    return v


Fraction = Annotated[float, BeforeValidator(parse_fraction), Field(gt=0, lt=1)]


class StatsConfig(BaseModel):
    """``stats:`` in arms.yaml: how verdicts are decided and when to stop adding rounds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    alpha: float = Field(0.05, gt=0, lt=0.5, description="significance level of each verdict "
                         "(Benjamini-Hochberg across the table's compared cells)")
    noise_band: Fraction = Field(0.01, description="changes inside ±band are noise (1% = 0.01)")
    noise_bands: dict[str, Fraction] = Field(default_factory=dict,
                                             description="per-metric bands, e.g. {ttft_ms: 3%}")
    until_ci: Fraction | None = Field(None, description="add rounds until every watched "
                                      "95% interval's half-width is at most this (e.g. 1%)")
    max_rounds: int | None = Field(None, ge=2, le=10000, description="cap on rounds with "
                                   "until_ci (default: 4 x rounds)")
    until_metrics: list[str] | None = Field(None, description="metrics until_ci watches "
                                            "(default: every table metric)")

    def band(self, metric: str) -> float:
        return self.noise_bands.get(metric, self.noise_band)




#: what ``table: metrics:`` may name besides metric names: families of rows
FAMILIES = ("decode_tok_s", "ttft_ms", "prefill_tok_s", "side_call_ms", "vram", "misses",
            "quality", "other")


class TableConfig(BaseModel):
    """``table:`` in arms.yaml: which rows the PR table shows, in this order. The
    others stay in the details and report.json, and any of them that changed is named
    in one line under the table."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    metrics: list[str] = Field(
        default_factory=lambda: ["decode_tok_s", "vram", "misses", "quality", "other"],
        min_length=1, description="families (decode_tok_s, ttft_ms, prefill_tok_s, "
        "side_call_ms, vram: peak VRAM once per server life, else peak RSS; misses: one "
        "misses/token source; quality; other: every other table metric, load rows and "
        "counters of your own) or metric names")
