"""Secrets, redacted by value in everything abbench writes or prints.

What counts as a secret:

- the value of an environment variable (the process's, an arm's ``env:``, the arms
  file's ``vars:``) whose name says so: KEY, TOKEN, SECRET, PASSW, PWD, PASS, AUTH,
  CREDENTIAL (``TOKENIZERS_PARALLELISM`` and ``..._KEYS_PATH``-like names excepted by
  their values: paths, numbers and booleans are never secrets);
- the value after a flag whose name ends so (``--api-key X``, ``--api-key=X``,
  ``--hf-token``, ``--password``), in a start command or anywhere in text;
- the password of a URL (``postgres://user:PASSWORD@host``: ``DATABASE_URL`` and
  friends);
- the value of a ``request_extra`` key whose name says so (``api_key``, ``authorization``).

Known values are remembered for the process (:func:`remember`) and replaced by
``***`` wherever abbench writes: run files, logs it copies, stdout and stderr
(:func:`redact`). A value of fewer than 8 characters is replaced only where it stands
as a whole word (a short secret must not mangle unrelated text); one of fewer than
:data:`MIN_LEN` characters cannot be told from ordinary text and is not scrubbed.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "***"
#: shorter values are not scrubbed (a 2-character "secret" would mangle every text)
MIN_LEN = 3
#: shorter values are scrubbed only as whole words
_WORD_LEN = 8

_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|PWD|PASS|AUTH|CREDENTIAL", re.IGNORECASE)
_NOT_NAME = re.compile(r"TOKENIZER|KEYBOARD|PASSTHROUGH|BYPASS|AUTHOR|_PATH$|_FILE$|_DIR$",
                       re.IGNORECASE)
#: a flag whose value is a secret: its name ends in one of these words
_FLAG = re.compile(r"^--?(?:[\w-]*[-_])?(?:api[-_]?key|key|token|secret|password|passwd|pwd|"
                   r"pass|credentials?|auth)$", re.IGNORECASE)
_FLAG_IN_TEXT = re.compile(r"(?<![\w-])(--?(?:[\w-]*[-_])?(?:api[-_]?key|key|token|secret|password|"
                           r"passwd|pwd|pass|credentials?|auth))(=|\s+)(?!\*\*\*)([^\s'\"]+)",
                           re.IGNORECASE)
_URL_PASSWORD = re.compile(r"([a-z][a-z0-9+.-]*://[^/\s:@'\"]*:)([^@\s/'\"]+)@", re.IGNORECASE)
_PLAIN = re.compile(r"^(?:true|false|yes|no|on|off|none|null|[-+]?[\d.]+)$", re.IGNORECASE)

_lock = threading.Lock()
_known: set[str] = set()
_pattern: re.Pattern[str] | None = None


def is_secret_name(name: str) -> bool:
    """Whether a variable or key named so holds a secret."""
    return bool(_NAME.search(name)) and not _NOT_NAME.search(name)


def _is_value(v: object) -> bool:
    return (isinstance(v, str) and len(v) >= MIN_LEN and not _PLAIN.match(v)
            and not v.startswith(("/", "~", "./", "../")))


def secret_values(*envs: Mapping[str, str]) -> list[str]:
    """Values of the secret-named variables of ``envs``, longest first."""
    vals = {v for env in envs for k, v in env.items() if is_secret_name(k) and _is_value(v)}
    return sorted(vals, key=len, reverse=True)


def environment_secrets(*envs: Mapping[str, str]) -> list[str]:
    """:func:`secret_values`, and the URL passwords in any variable (``DATABASE_URL``)."""
    out = secret_values(*envs)
    for env in envs:
        for v in env.values():
            if "://" in v:
                out += [m.group(2) for m in _URL_PASSWORD.finditer(v) if _is_value(m.group(2))]
    return out


def argv_secrets(argv: Iterable[str]) -> list[str]:
    """Values after secret flags (``--api-key X``, ``--api-key=X``) and URL passwords."""
    out: list[str] = []
    args = [w for a in argv for w in (a.split() if " " in a else [a])]  # shell strings too
    for i, a in enumerate(args):
        name, eq, value = a.partition("=")
        if _FLAG.match(name):
            if eq:
                out.append(value)
            elif i + 1 < len(args) and not args[i + 1].startswith("-"):
                out.append(args[i + 1])
        out += [m.group(2) for m in _URL_PASSWORD.finditer(a)]
    return [v for v in out if _is_value(v)]


def nested_secrets(obj: Any) -> list[str]:
    """Values of secret-named keys anywhere in ``obj`` (request_extra, headers), and URL
    passwords in its strings."""
    out: list[str] = []
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            if isinstance(k, str) and is_secret_name(k) and _is_value(v):
                out.append(v)
            out += nested_secrets(v)
    elif isinstance(obj, list | tuple):
        for v in obj:
            out += nested_secrets(v)
    elif isinstance(obj, str):
        out += [m.group(2) for m in _URL_PASSWORD.finditer(obj) if _is_value(m.group(2))]
        if obj.lower().startswith(("bearer ", "basic ")) and _is_value(obj[7:].strip()):
            out.append(obj.split(None, 1)[1])
    return out


def remember(values: Iterable[str]) -> None:
    """Add known secret values: from now on :func:`redact` hides them."""
    global _pattern
    with _lock:
        new = {v for v in values if _is_value(v)} - _known
        for v in list(new):
            escaped = json.dumps(v)[1:-1]  # as it stands inside a JSON string
            if escaped != v:
                new.add(escaped)
        if not new:
            return
        _known.update(new)
        parts = []
        for v in sorted(_known, key=len, reverse=True):
            e = re.escape(v)
            parts.append(e if len(v) >= _WORD_LEN else rf"(?<![\w-]){e}(?![\w-])")
        _pattern = re.compile("|".join(parts))


def forget_all() -> None:
    """Forget every remembered value (tests)."""
    global _pattern
    with _lock:
        _known.clear()
        _pattern = None


def redact(text: str) -> str:
    """``text`` with every known secret, secret flag value and URL password as ***."""
    if not text:
        return text
    pattern = _pattern
    if pattern is not None:
        text = pattern.sub(MASK, text)
    if "://" in text:
        text = _URL_PASSWORD.sub(rf"\1{MASK}@", text)
    if "-" in text:
        text = _FLAG_IN_TEXT.sub(rf"\1\2{MASK}", text)
    return text


def scrub(obj: Any, values: list[str] | None = None) -> Any:
    """``obj`` (str, or lists/dicts of them) with every secret replaced by ***: the
    ``values`` given, every remembered one, secret flags and URL passwords."""
    if isinstance(obj, str):
        for v in values or ():
            obj = obj.replace(v, MASK)
        return redact(obj)
    if isinstance(obj, list):
        return [scrub(v, values) for v in obj]
    if isinstance(obj, dict):
        return {k: scrub(v, values) for k, v in obj.items()}
    return obj
