"""abbench: interleaved A/B benchmarking of LLM inference-server builds."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    import pandas as pd


def load_samples(results_dir: Any = "results") -> pd.DataFrame:
    """All stored samples under ``results_dir`` as a tidy DataFrame (see README)."""
    from abbench.history import load_samples as _load

    return _load(results_dir)
