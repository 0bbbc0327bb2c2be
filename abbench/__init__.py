"""abbench: interleaved A/B benchmarking of LLM inference-server builds.

``abbench.load_samples("results")``: every stored sample as a tidy pandas DataFrame.
``import abbench`` stays light (a server's reaper imports it): the history stack and
pandas load on the first call.
"""

from __future__ import annotations

from typing import Any

from abbench.version import __version__

__all__ = ["__version__", "load_samples"]


def load_samples(results_dir: Any = "results") -> Any:
    """All stored samples under ``results_dir`` as a pandas DataFrame (docs/history.md)."""
    from abbench.history.series import load_samples as _load  # the stack and pandas, lazily

    return _load(results_dir)
