"""The base of every model of arms.yaml: frozen, no unknown key, no NaN or infinite
number, and no YAML boolean where a number or text is meant (``rounds: yes`` used to
mean 1 round, ``port: on`` port 1)."""

from __future__ import annotations

import re
import types
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from abbench.errors import clip_repr


def _admits(annotation: Any, kinds: tuple[type, ...]) -> bool:
    """Whether a field's type accepts a value of one of ``kinds`` as it is."""
    if annotation is Any or annotation in kinds:
        return True
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _admits(args[0], kinds)
    if origin in (typing.Union, types.UnionType):
        return any(_admits(a, kinds) for a in args)
    if origin is typing.Literal:
        return any(isinstance(a, kinds) for a in args)
    return False


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_for_a_number(cls, v: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if isinstance(v, bool) and field is not None and not _admits(field.annotation, (bool,)):
            numeric = _admits(field.annotation, (int, float))
            raise PydanticCustomError(
                "bool_type_here", "got the boolean {value}: YAML reads yes, no, on, off, true "
                "and false as booleans; {fix}",
                {"value": str(v).lower(), "fix": "write a number" if numeric else
                 "quote it if it is text"})
        return v


def endpoint_path(v: str | None) -> str | None:
    """A server endpoint: a path from the server's root (``/health``), nothing else."""
    if v is not None and (not v.startswith("/") or "://" in v or re.search(r"\s", v)):
        raise PydanticCustomError(
            "endpoint_path", "{path} is not an endpoint path: write it from the server's root, "
            "starting with / (e.g. /health)", {"path": clip_repr(v, 80)})
    return v


_CONTEXT_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*$")


def parse_context(value: int | str) -> int:
    """``"32K"`` -> 32768, ``"255K"`` -> 261120, ``"1000"`` -> 1000, ``"1M"`` -> 1048576."""
    if isinstance(value, bool):
        raise ValueError("a context length is a number of tokens such as 1000, 32K or 255K")
    if isinstance(value, int):
        n = value
    else:
        m = _CONTEXT_RE.match(str(value))
        if not m:
            raise ValueError(
                f"{clip_repr(value)} is not a context length: write a number of tokens such as "
                "1000, 32K or 255K (K = 1024 tokens, M = 1024K)"
            )
        scale = {"": 1, "k": 1024, "m": 1024 * 1024}[m.group(2).lower()]
        exact = float(m.group(1)) * scale
        if exact != int(exact):  # 1.5 used to be read as 1 token
            raise ValueError(f"{clip_repr(value)} is not a whole number of tokens"
                             + (f" ({exact:g})" if scale > 1 else "")
                             + f"; write e.g. {max(1, round(exact))}")
        n = int(exact)
    if n < 1:
        raise ValueError(f"a context length must be at least 1 token, got {clip_repr(value)}")
    return n
