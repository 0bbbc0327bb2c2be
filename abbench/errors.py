"""One error hierarchy. Nothing below the CLI prints or exits; the CLI maps these
to ``Error: ...`` on stderr and an exit code.

Every error carries *what* went wrong, *where* (file, field, arm, round) and a
*hint* of what to do next.
"""

from __future__ import annotations

import re

#: the most characters of a value (a key, a path, a server's answer) a message echoes
ECHO_LIMIT = 200


#: control characters a terminal would act on (ESC sequences, bell, backspace, C1)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with every control character but newline and tab shown as U+FFFD: what
    a server or a label carries reaches no terminal as an escape sequence."""
    return _CONTROL.sub("\ufffd", text)


def clip(value: object, limit: int = ECHO_LIMIT) -> str:
    """``value`` as one line of at most about ``limit`` characters, for a message."""
    text = (value if isinstance(value, str) else str(value)).replace("\r", " ").replace("\n", " ")
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


def clip_repr(value: object, limit: int = ECHO_LIMIT) -> str:
    """``repr(value)``, clipped like :func:`clip`."""
    return clip(repr(value), limit)


class AbbenchError(Exception):
    """Base of all abbench errors. ``exit_code`` is what the CLI exits with."""

    exit_code = 1

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None):
        # a backstop: whatever a message echoes, it stays a few lines
        message = clip(message, 1500) if len(message) > 1500 else message
        super().__init__(message)
        self.message = message
        self.where = clip(where, 600) if where and len(where) > 600 else where
        self.hint = clip(hint, 600) if hint and len(hint) > 600 else hint

    def __str__(self) -> str:
        parts = [f"{self.where}: {self.message}" if self.where else self.message]
        if self.hint:
            parts.append(f"hint: {self.hint}")
        return printable("\n".join(parts))


class ConfigError(AbbenchError):
    """Bad input: an arms file, a CLI option, a run id. Exit code 2."""

    exit_code = 2


class InternalError(AbbenchError):
    """A bug in abbench, not bad input: exit code 70 (EX_SOFTWARE), and the message says
    to report it."""

    exit_code = 70

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None):
        super().__init__(f"abbench bug: {message}", where=where,
                         hint=hint or "report it with the command that ran and this message")


class StoreError(AbbenchError):
    """The results directory cannot be written or a stored run cannot be read."""

    exit_code = 2


class ServerError(AbbenchError):
    """A server exited, never became ready, or could not be started."""

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None,
                 log_tail: str = ""):
        super().__init__(message, where=where, hint=hint)
        self.log_tail = log_tail

    def __str__(self) -> str:
        text = super().__str__()
        if self.log_tail:
            tail = "\n".join("    " + line for line in self.log_tail.rstrip().splitlines())
            text += f"\n  last lines of the server log:\n{tail}"
        return printable(text)


class PortTaken(ServerError):
    """Another process took the life's port between abbench choosing it and the
    server binding it: with ``port: auto`` the life starts again on another port."""


class RequestError(AbbenchError):
    """One request failed: HTTP error, broken stream, timeout, wrong token count."""


class Interrupted(AbbenchError):
    """The run was stopped by SIGINT/SIGTERM; what was measured is kept."""

    exit_code = 130


class SchedulerError(AbbenchError):
    """The batch scheduler (Slurm) is missing, unreachable, or refused a job. Exit code 2."""

    exit_code = 2
