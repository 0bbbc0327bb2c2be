"""After a failed request: can this server life go on, or has its server died or hung?"""

from __future__ import annotations

from abbench.config.arms import ResolvedArm
from abbench.config.presets import arm_preset
from abbench.model.records import WorkloadSample
from abbench.server.process import Server

#: after a failed request, how long a server has to be seen exiting
#: (:meth:`~abbench.server.process.Server.alive`): its dying resets the connection
#: before its process can be reaped, and a life read as going on would end "ok"
DEATH_GRACE_S = 0.5


class SlotFailed(Exception):
    """This server life cannot go on (its server died or hangs)."""


def check_after(rec: WorkloadSample, server: Server, arm: ResolvedArm) -> None:
    """After a sample: raise SlotFailed when it failed and the server cannot go on.
    The readiness path is probed only when a request went silent (the transport's and
    the load workload's "no data for ..."), for the preset's ``hang_probe_timeout_s``:
    SGLang's /health runs a generation, a request that failed otherwise asks it nothing."""
    if rec.status != "failed":
        return
    silent = "no data for" in str(rec.reason or "")
    trouble = _server_trouble(server, arm_preset(arm).hang_probe_timeout_s, probe=silent)
    if trouble:
        raise SlotFailed(f"{trouble} ({rec.reason}); log: {server.log_path}")


def _server_trouble(server: Server, timeout: float, *, probe: bool) -> str | None:
    """After a failed request: why this server cannot go on, or None when it can.

    Dead, or (when the request went silent: ``probe``) alive but not answering its
    readiness path within ``timeout`` (hung, e.g. SIGSTOPped).
    """
    if not server.alive(DEATH_GRACE_S):
        return f"the server died (exit code {server.proc.returncode})"
    if not probe:
        return None
    if not server.responds(timeout):
        if not server.alive():
            return f"the server died (exit code {server.proc.returncode})"
        return f"the server hangs: no answer to GET {server.arm.ready.path} in {timeout:g} s"
    return None
