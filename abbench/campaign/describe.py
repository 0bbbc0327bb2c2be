"""What run.json records of a run's arms, requests and servers: the arms as listed,
one request body per workload, a server's props."""

from __future__ import annotations

from typing import Any

from abbench.config.arms import ResolvedArm
from abbench.config.presets import arm_preset
from abbench.config.schema import Config
from abbench.config.values import format_cpus
from abbench.workload.decode import Client


def arm_meta(a: ResolvedArm) -> dict[str, Any]:
    """An arm as run.json lists it; ``cpus`` (the kernel's list format) and ``nice``
    only when the arm sets them."""
    out: dict[str, Any] = {"name": a.name, "label": a.label, "commit": a.commit,
                           "preset": a.preset}
    if a.series is not None:
        out["series"] = a.series
    if a.cpus is not None:
        out["cpus"] = format_cpus(a.cpus)
    if a.nice is not None:
        out["nice"] = a.nice
    if a.git is not None:  # the pinned commit and patch set: --resume builds these
        out["git"] = {"source": a.git.source, "ref": a.git.ref, "sha": a.git.sha,
                      "patch": [list(p) for p in a.git.patch or []],
                      "describe": a.git.describe()}
    return out


def request_templates(cfg: Config, client: Client) -> dict[str, Any]:
    """What each request of an arm sends: one body per workload (by its title, with
    its own decode length or load output length), and the warm-up's."""
    bodies = {w.title: client.request_body(
        "<prompt token ids>", w.load.output_tokens if w.load is not None else w.decode_tokens)
        for w in cfg.workloads}
    return {"workloads": bodies, "warmup": client.request_body("<prompt token ids>", 8)}


def server_props(client: Client, arm: ResolvedArm) -> dict[str, Any] | None:
    """The server's props, from ``props_path`` or else the preset's fallback paths (a
    renamed endpoint's old name: SGLang's /get_server_info)."""
    props = client.props()
    for path in arm_preset(arm).props_fallback_paths if props is None else ():
        old = Client(client.base_url, arm.model_copy(update={"props_path": path}))
        try:
            props = old.props()
        finally:
            old.close()
        if props is not None:
            break
    return props
