"""Values of arms.yaml: cpu lists, context lengths as shown, the request fields
abbench owns, and the frozen base of every config model."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import (
    BeforeValidator,
)
from pydantic_core import PydanticCustomError

from abbench.config.frozen import Frozen, parse_context
from abbench.errors import clip


def parse_cpus(value: Any) -> list[int]:
    """``"0-3,8"`` -> [0, 1, 2, 3, 8]; ``[2, 0]`` -> [0, 2]; ``3`` -> [3]."""
    if isinstance(value, bool):
        raise ValueError("cpus is a list of CPU ids or a range string such as '0-7'")
    if isinstance(value, int):
        value = [value]
    ids: set[int] = set()
    if isinstance(value, str):
        for part in value.replace(" ", "").split(","):
            m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
            if not m or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
                raise ValueError(f"{value!r} is not a CPU list: write ids and ranges such "
                                 "as '0-7' or '0-3,8-11'")
            ids.update(range(int(m.group(1)), int(m.group(2) or m.group(1)) + 1))
    elif isinstance(value, list):
        for v in value:
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{v!r} is not a CPU id: ids are whole numbers from 0")
            ids.add(v)
    else:
        raise ValueError("cpus is a list of CPU ids or a range string such as '0-7'")
    if not ids:
        raise ValueError("cpus names no CPU")
    return sorted(ids)


def format_cpus(ids: list[int]) -> str:
    """[0, 1, 2, 3, 8] -> ``"0-3,8"`` (the kernel's list format, as in Cpus_allowed_list)."""
    parts: list[str] = []
    start = prev = None
    for i in sorted(ids):
        if prev is not None and i == prev + 1:
            prev = i
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = i
    if start is not None:
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)


def format_context(n: int) -> str:
    """32768 -> ``"32K"``; 1000 -> ``"1000"``."""
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}K"
    return str(n)


Context = Annotated[int, BeforeValidator(parse_context)]


def _scalars_as_text(values: Mapping[Any, Any], what: str) -> dict[str, str]:
    """``vars:`` and ``env:`` values: text. Numbers come as written in the file (see
    :func:`config_from_data`); a YAML boolean or null, a list or a mapping is refused
    (``FLAG: yes`` used to become "True", ``X:`` "")."""
    out: dict[str, str] = {}
    for k, val in values.items():
        name = clip(k, 60)
        if isinstance(val, bool) or val is None:
            shown = "null" if val is None else str(val).lower()
            raise PydanticCustomError(
                "text_value", "{name} is {shown}, not text: quote it ({name}: \"{text}\") to "
                "set the text", {"name": name, "shown": f"YAML's {shown}",
                                  "text": "" if val is None else str(val).lower()})
        if isinstance(val, (list, dict)):
            raise PydanticCustomError(
                "text_value", "{name} is a {kind}: {what} values are text",
                {"name": name, "kind": "list" if isinstance(val, list) else "mapping",
                 "what": what})
        out[str(k)] = str(val)
    return out


#: request fields abbench sets itself: request_extra may not change them
_OWNED_FIELDS = frozenset({"prompt", "messages", "stream", "stream_options", "max_tokens",
                           "ignore_eos"})
#: preset fields that carry the decode length (abbench fills them in)
_LENGTH_FIELDS = frozenset({"n_predict", "min_tokens"})


class _Frozen(Frozen):
    pass
