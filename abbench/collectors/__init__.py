"""Collectors: metrics beyond tok/s (peak VRAM and RSS, cache misses per token,
counter rates, drift signals), each measured over a window and stored as sample
records in samples.jsonl so that the report shows them as rows.

- :mod:`.settings`: the ``collectors:`` section of arms.yaml (no other imports);
- :mod:`.base`: windows, records and the collector interface;
- :mod:`.memory`: the NVML / psutil sampling thread (VRAM, RSS);
- :mod:`.counters`: Prometheus counters, response fields, log regexes;
- :mod:`.drift`: clocks, temperature, power, CPU frequency and load, and their warnings;
- :mod:`.tasks`: the slot tasks and the workload-window hook the runner calls.
"""
