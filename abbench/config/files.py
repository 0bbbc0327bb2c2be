"""Reading the files a run takes as input: the arms file and the files it names
(prompt texts, prompt sets, quality suites).

Every one is read the same careful way, so that no input can hang abbench, eat its
memory or crash it, and every refusal names the file, the line and what to do:

- regular files only: a FIFO, a device (a link to ``/dev/zero``), a directory, a
  socket or a symlink loop is refused before a byte is read (opened non-blocking,
  then checked, so a FIFO with no writer cannot hold the open);
- a size cap per kind of file (:data:`ARMS_FILE_MAX` and the others below);
- UTF-8 (a leading byte-order mark is dropped), refused with the line and column of
  the first bad byte, and no NUL character;
- YAML through a SafeLoader that refuses a key given twice, nesting deeper than
  :data:`YAML_MAX_DEPTH`, more than :data:`YAML_MAX_ALIASES` aliases, a recursive
  alias, and a document that aliases expand past :data:`YAML_MAX_NODES` values
  (the billion-laughs file).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from abbench.errors import ConfigError, clip, clip_repr

#: the largest arms file read (a real one is a few KiB)
ARMS_FILE_MAX = 1024 * 1024
#: the largest prompt-set or quality-suite file read
ITEM_FILE_MAX = 1024 * 1024
#: the largest prompt text read (its tokens are repeated to fill any context)
PROMPT_TEXT_MAX = 8 * 1024 * 1024

#: YAML nesting (mappings and lists inside each other) deeper than this is refused
YAML_MAX_DEPTH = 32
#: aliases (``*name``) in one document
YAML_MAX_ALIASES = 100
#: values in a document once its aliases are expanded
YAML_MAX_NODES = 100_000

_KINDS = [(stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket")]


def _size(n: int) -> str:
    mib = 1024 * 1024
    if n >= mib:
        return f"{n // mib} MiB" if n % mib == 0 else f"{n / mib:.2f} MiB"
    return f"{n / 1024:.0f} KiB" if n >= 1024 else f"{n} bytes"


def _link_note(path: Path) -> str:
    """`` (a symlink to X)`` when ``path`` is a symlink, for messages."""
    try:
        return f" (a symlink to {clip_repr(os.readlink(path))})" if path.is_symlink() else ""
    except OSError:
        return ""


def read_text(path: Path, *, limit: int, where: str, label: str = "the file",
              hint: str = "give the path of a text file", kind: str = "such a file") -> str:
    """The text of ``path``; a :class:`ConfigError` at ``where`` saying what is wrong
    with it otherwise (``label`` names the file in the message: ``the prompt file
    '/x/p.txt' is a FIFO ...``; ``kind`` says what the cap is for: ``an arms file``)."""

    def refuse(problem: str, why: str = hint) -> ConfigError:
        return ConfigError(f"{label} {problem}", where=where, hint=why)

    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        if path.is_symlink():
            raise refuse(f"is a symlink to {clip_repr(os.readlink(path))}, which does not "
                         "exist") from None
        raise refuse("does not exist") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise refuse("is a symlink loop", "point the link at a file, or give the file "
                         "itself") from None
        if e.errno in (errno.EACCES, errno.EPERM):
            raise refuse("cannot be read: permission denied", "fix its permissions") from None
        if e.errno == errno.ENXIO:
            raise refuse(f"is a socket, not a regular file{_link_note(path)}") from None
        raise refuse(f"cannot be opened: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a file")
            raise refuse(f"is {kind}, not a regular file{_link_note(path)}",
                         "abbench reads its inputs from regular files only (no pipes, "
                         "devices or directories); " + hint)
        if st.st_size > limit:
            raise refuse(f"is {_size(st.st_size)}: larger than the {_size(limit)} {kind} "
                         "may be", f"is this the right file? {hint}")
        chunks: list[bytes] = []
        got = 0
        while got <= limit:
            piece = os.read(fd, min(1 << 20, limit + 1 - got))
            if not piece:
                break
            chunks.append(piece)
            got += len(piece)
    except OSError as e:
        raise refuse(f"cannot be read: {e.strerror or e}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:  # it grew while we read it
        raise refuse(f"is larger than the {_size(limit)} {kind} may be",
                     f"is this the right file? {hint}")
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise refuse(f"is not UTF-8: line {line}, column {col}: byte 0x{data[e.start]:02x}",
                     "save it as UTF-8 (most editors: 'save with encoding')") from None
    nul = text.find("\0")
    if nul >= 0:
        raise refuse(f"holds a NUL character on line {text.count(chr(10), 0, nul) + 1}",
                     f"is it a binary file? {hint}")
    return text


# ------------------------------------------------------------------ YAML


class _Refused(Exception):
    def __init__(self, message: str, hint: str, mark: Any):
        super().__init__(message)
        self.message, self.hint, self.mark = message, hint, mark


class _Loader(yaml.SafeLoader):
    """PyYAML's SafeLoader, with caps on nesting and aliases, and no key twice."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > YAML_MAX_ALIASES:
                raise _Refused(f"more than {YAML_MAX_ALIASES} aliases (*name)",
                               "write the values out; an arms file needs few aliases",
                               self.peek_event().start_mark)
        self._depth += 1
        try:
            if self._depth > YAML_MAX_DEPTH:
                raise _Refused(f"nested deeper than {YAML_MAX_DEPTH} levels",
                               "an arms file needs a few levels; flatten it",
                               self.peek_event().start_mark)
            event = self.peek_event()
            tag = getattr(event, "tag", None)
            if tag not in (None, "!") and tag in self.yaml_constructors:
                short = tag.replace("tag:yaml.org,2002:", "!!")
                raise _Refused(f"a YAML tag ({clip(short, 60)}): abbench reads plain YAML, "
                               "without tags", "write the value plainly (quote it if it is "
                               "text)", event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            try:
                key = self.construct_object(key_node, deep=deep)
                first = seen.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:  # an unhashable key: the base class says so
                continue
            if first != key_node.start_mark.line + 1:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {clip_repr(key, 80)} is given twice (first on line "
                    f"{first})", key_node.start_mark)
        return super().construct_mapping(node, deep)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_expansion(root: yaml.Node) -> None:
    """Refuse a recursive alias, or a document its aliases expand past the cap."""
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            on_path.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in _children(node))
            if size[key] > YAML_MAX_NODES:
                raise _Refused(f"aliases expand it to more than {YAML_MAX_NODES:,} values",
                               "write the values out; aliases that nest aliases multiply",
                               node.start_mark)
            continue
        if key in size:
            continue
        if key in on_path:
            raise _Refused("an alias refers to the mapping or list that holds it (a "
                           "recursive alias)", "write the values out", node.start_mark)
        on_path.add(key)
        stack.append((node, True))
        stack += [(c, False) for c in _children(node)]


def load_yaml(text: str, *, where: str) -> tuple[Any, yaml.Node | None]:
    """The YAML document in ``text`` (data and root node); a :class:`ConfigError` at
    ``where`` with the line and column otherwise."""
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None, None
        _check_expansion(root)
        return loader.construct_document(root), root
    except _Refused as e:
        raise ConfigError(f"line {e.mark.line + 1}, column {e.mark.column + 1}: YAML error: "
                          f"{e.message}", where=where, hint=e.hint) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = clip(getattr(e, "problem", None) or str(e))
        if "found another document" in problem:
            raise ConfigError(f"{at}YAML error: a second document (---) in the file",
                              where=where, hint="keep one document: the file is one mapping"
                              ) from None
        if "'\\t'" in problem:
            raise ConfigError(f"{at}a tab character: YAML indents with spaces only",
                              where=where, hint="replace the tab with spaces (two per "
                              "level, as in the README's examples)") from None
        twice = "given twice" in problem
        tag = "could not determine a constructor" in problem
        kind = "YAML error" if twice or tag else "YAML syntax error"
        hint = ("keep one of them" if twice else
                "abbench reads plain YAML: no !tags (quote the value if it is text)" if tag
                else "check indentation and quoting near that line")
        raise ConfigError(f"{at}{kind}: {problem}", where=where, hint=hint) from None
    except RecursionError:  # a safety net: the caps above come first
        raise ConfigError("YAML error: nested too deeply", where=where,
                          hint="flatten the file") from None
    finally:
        loader.dispose()
