"""Every check that needs no server, in the one function ``validate`` and ``run`` both
call (and ``calibrate`` and ``run --resume``): what validate says of a file is what run
checks before it starts anything.

The file itself is read and typed by :func:`abbench.config.loader.load_config`; here
come the checks of what it asks for: each arm's start command and working directory,
the slot tasks it makes (prompt sets and quality suites are read, the quality command
split and its program found, every collector tried against every arm's preset), and
the warnings of :func:`abbench.config.arms.config_warnings`. The one difference:
a program that is not there is an error for ``run`` and a warning for ``validate``
(which may run on another machine than the servers), and so is a missing model file
when the program is not there either. :func:`abbench.config.foresight.foresee` says
what would fail only once a server runs: a missing endpoint, a context too long.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from abbench import registry
from abbench.config.arms import check_arm, config_warnings, resolve_arms
from abbench.config.foresight import foresee
from abbench.config.schema import Config
from abbench.quality.fingerprints import FingerprintTask, set_origin
from abbench.slot import SlotTask


@dataclass
class Checked:
    """A config that passed every check: the tasks it makes, and what to warn about."""

    cfg: Config
    tasks: list[SlotTask]
    warnings: list[str] = field(default_factory=list)

    def set_sources(self) -> list[str]:
        """Each fingerprint set by name, with where a named file came from when it is
        not abbench's own (``chat (prompts/chat.yaml, over the built-in one)``)."""
        out: list[str] = []
        for task in self.tasks:
            if isinstance(task, FingerprintTask) and task.cold:
                for i, ref in enumerate(task.refs):
                    name = ref.name or task.files[i].name
                    origin = set_origin(self.cfg, task.files[i].path) if i in task.files \
                        and ref.path is None else None
                    out.append(name if origin in (None, "built-in") else f"{name} ({origin})")
        return out


def default_tasks(cfg: Config) -> list[SlotTask]:
    """The slot tasks a config asks for: every abbench.tasks provider's, in order."""
    tasks: list[SlotTask] = []
    for name in registry.names("abbench.tasks"):
        tasks += registry.load("abbench.tasks", name)(cfg)
    return tasks


def check_config(cfg: Config, *, strict_exec: bool) -> Checked:
    """Every check of ``cfg`` that needs no server; raises ConfigError (exit 2)."""
    warnings: list[str] = []
    arms = resolve_arms(cfg)
    for arm in arms:
        warnings += check_arm(cfg, arm, strict_exec=strict_exec)
    tasks = default_tasks(cfg)  # reads prompt sets and suites
    for task in tasks:
        check = getattr(task, "check", None)
        if check is not None:
            warnings += check(cfg)
    for i, arm in enumerate(arms):
        warnings += foresee(cfg, arm, where=f"{cfg.source or 'arms file'}: arms[{i}] "
                            f"({arm.name})", strict=strict_exec)
    warnings += config_warnings(cfg)
    return Checked(cfg, tasks, warnings)
