"""Progress: a live display on a terminal, plain log lines otherwise (both on stderr)."""

from __future__ import annotations

import sys
import time
from typing import Protocol

from rich.console import Console
from rich.progress import BarColumn, TaskID, TextColumn, TimeRemainingColumn
from rich.progress import Progress as RichProgress

from abbench.errors import printable


class Progress(Protocol):
    def start(self, total_slots: int) -> None: ...
    def slot(self, index: int, arm: str, round_: int, what: str) -> None: ...
    def log(self, message: str) -> None: ...
    def finish(self) -> None: ...


def _eta(started: float, done: int, total: int) -> str:
    if done <= 0:
        return "?"
    left = (time.monotonic() - started) / done * (total - done)
    m, s = divmod(int(left), 60)
    return f"{m}m{s:02d}s"


class PlainProgress:
    """One line per event, for logs and pipes."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.total = 0
        self.started = time.monotonic()
        self.done = 0

    def start(self, total_slots: int) -> None:
        self.total = total_slots
        self.started = time.monotonic()

    def slot(self, index: int, arm: str, round_: int, what: str) -> None:
        self.done = index
        self.total = max(self.total, index + 1)  # --until-ci adds slots as it goes
        print(f"[{index + 1}/{self.total}] round {round_} arm {arm}: {what} "
              f"(ETA {_eta(self.started, index, self.total)})", file=self.stream, flush=True)

    def log(self, message: str) -> None:
        print(printable(message), file=self.stream, flush=True)

    def finish(self) -> None:
        pass


class LiveProgress:
    """rich's live progress bar with arm, round, workload and ETA."""

    def __init__(self) -> None:

        self.console = Console(stderr=True)
        self.bar = RichProgress(TextColumn("{task.description}"), BarColumn(),
                                TextColumn("{task.completed}/{task.total} server lives"),
                                TimeRemainingColumn(), console=self.console, transient=False)
        self.task: TaskID | None = None

    def start(self, total_slots: int) -> None:
        self.bar.start()
        self.task = self.bar.add_task("starting", total=total_slots)

    def slot(self, index: int, arm: str, round_: int, what: str) -> None:
        if self.task is None:
            return
        self.bar.update(self.task, completed=index,
                        total=max(index + 1, self.bar.tasks[0].total or 0),
                        description=f"round {round_} · {arm} · {what}")

    def log(self, message: str) -> None:
        self.bar.console.print(printable(message), markup=False, highlight=False)

    def finish(self) -> None:
        if self.task is not None:
            self.bar.update(self.task, completed=self.bar.tasks[0].total)
        self.bar.stop()


def make_progress(live: bool | None = None) -> Progress:
    if live is None:
        live = sys.stderr.isatty()
    return LiveProgress() if live else PlainProgress()


class SilentProgress:
    def start(self, total_slots: int) -> None: ...
    def slot(self, index: int, arm: str, round_: int, what: str) -> None: ...
    def log(self, message: str) -> None: ...
    def finish(self) -> None: ...
