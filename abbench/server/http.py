"""The one HTTP transport to a server: every call abbench makes to one goes through a
:class:`Transport` (readiness and health here in ``server/``; tokenize, completions,
props, metrics and cache flushes through the workload's client above it).

One keep-alive session per transport, with one policy: a request whose kept-alive
connection the server had closed before any response (llama.cpp closes idle ones
after 5 s) is sent once more; nothing else is ever retried (no HTTP error, nothing
after a response began). A non-streamed answer is read whole under a size cap and
the request's deadline, so a body that never ends cannot hold abbench. Every failure
is a :class:`TransportError` with a one-line reason.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from abbench.errors import RequestError, clip

#: the largest non-streamed answer read (tokenize of a long prompt, /props, /metrics)
MAX_BODY = 16 * 1024 * 1024
#: seconds to open a connection
CONNECT_TIMEOUT = 10.0


class TransportError(RequestError):
    """An HTTP call failed before an answer could be used: the reason in one line."""


@dataclass(frozen=True)
class Reply:
    """A whole non-streamed answer."""

    status: int
    body: bytes
    content_type: str = ""

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def excerpt(self, n: int = 300) -> str:
        """The start of the body, for messages."""
        return clip(self.text.strip(), n)


class Stream:
    """An answer being streamed: its status and its body in the pieces that arrive."""

    def __init__(self, response: requests.Response, what: str, timeout: float):
        self._r = response
        self.what = what
        self.timeout = timeout
        self.status = response.status_code

    def pieces(self) -> Iterator[bytes]:
        try:
            yield from self._r.iter_content(chunk_size=None)
        except requests.RequestException as e:
            raise TransportError(_why(e, self.what, self.timeout)) from None

    def excerpt(self, n: int = 300) -> str:
        """The start of the body (an error answer), read under the size cap."""
        out = b""
        with contextlib.suppress(requests.RequestException):
            for piece in self._r.iter_content(chunk_size=4096):
                out += piece
                if len(out) > n * 4:
                    break
        return clip(out.decode("utf-8", "replace").strip(), n)


class Transport:
    """Talks HTTP to one server at ``base_url`` (``http://host:port``)."""

    def __init__(self, base_url: str, *, resend: bool = True):
        self.base_url = base_url
        self.session = requests.Session()
        retry = Retry(total=2, connect=1, read=1, status=0, other=0, redirect=0,
                      allowed_methods=None, raise_on_status=False) if resend else Retry(0)
        adapter = HTTPAdapter(max_retries=retry)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ calls
    def request(self, method: str, path: str, *, json: Any = None, timeout: float,
                max_body: int = MAX_BODY) -> Reply:
        """One call, its whole answer read (at most ``max_body`` bytes, within
        ``timeout`` seconds in all)."""
        what = f"{method} {path}"
        deadline = time.monotonic() + timeout
        try:
            with self.session.request(method, self.base_url + path, json=json, stream=True,
                                      timeout=(min(CONNECT_TIMEOUT, timeout), timeout)) as r:
                body = bytearray()
                for piece in r.iter_content(chunk_size=65536):
                    body += piece
                    if len(body) > max_body:
                        raise TransportError(f"{what}: the answer is larger than "
                                             f"{_size(max_body)}")
                    if time.monotonic() > deadline:
                        raise TransportError(f"{what}: the answer took longer than "
                                             f"{timeout:g} s")
                return Reply(r.status_code, bytes(body), r.headers.get("Content-Type", ""))
        except requests.RequestException as e:
            raise TransportError(_why(e, what, timeout)) from None

    def get(self, path: str, *, timeout: float, max_body: int = MAX_BODY) -> Reply:
        return self.request("GET", path, timeout=timeout, max_body=max_body)

    def post(self, path: str, body: Any, *, timeout: float, max_body: int = MAX_BODY) -> Reply:
        return self.request("POST", path, json=body, timeout=timeout, max_body=max_body)

    @contextlib.contextmanager
    def stream(self, path: str, body: Any, *, timeout: float) -> Iterator[Stream]:
        """POST ``body`` and stream the answer; ``timeout``: seconds without data."""
        what = f"POST {path}"
        try:
            r = self.session.post(self.base_url + path, json=body, stream=True,
                                  timeout=(CONNECT_TIMEOUT, timeout))
        except requests.RequestException as e:
            raise TransportError(_why(e, what, timeout)) from None
        with r:
            yield Stream(r, what, timeout)


def _size(n: int) -> str:
    return f"{n / 1024 / 1024:g} MiB" if n >= 1024 * 1024 else f"{n} bytes"


def _os_error(e: BaseException) -> OSError | None:
    """The operating system's error under a requests/urllib3 exception, if any."""
    seen: set[int] = set()
    todo: list[BaseException] = [e]
    while todo:
        x = todo.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, OSError) and x.errno in (errno.ECONNREFUSED, errno.ECONNRESET,
                                                  errno.EPIPE, errno.EHOSTUNREACH,
                                                  errno.ENETUNREACH, errno.ECONNABORTED):
            return x
        todo += [a for a in getattr(x, "args", ()) if isinstance(a, BaseException)]
        for attr in ("reason", "__cause__", "__context__"):
            v = getattr(x, attr, None)
            if isinstance(v, BaseException):
                todo.append(v)
    return None


def _why(e: requests.RequestException, what: str, timeout: float) -> str:
    """A failed call in one line: what was asked and what happened."""
    if isinstance(e, requests.Timeout) or "timed out" in str(e).lower():
        return f"timed out: {what} sent no data for {timeout:g} s"
    os_err = _os_error(e)
    if os_err is not None and os_err.errno is not None:
        return f"connection failed: {what}: {os.strerror(os_err.errno).lower()}"
    if isinstance(e, requests.exceptions.ChunkedEncodingError):
        return f"connection failed: ChunkedEncodingError: {what}: the answer broke off"
    return f"connection failed: {type(e).__name__}: {what}: {clip(str(e), 200)}"


# ------------------------------------------------------------------ load (asyncio)

#: the session and error type of the load generator (abbench/workload/load.py): many
#: streams on one event loop, where a thread per request would make the client the
#: bottleneck
AsyncSession = aiohttp.ClientSession
AsyncClientError = aiohttp.ClientError


def async_session(request_timeout: float) -> aiohttp.ClientSession:
    """A session for one load level: no total deadline (the level bounds itself), a
    read timeout per chunk, and a new connection per request (loopback: ~0.1 ms inside
    TTFT): llama-server closes a connection after a streamed response, and a reused
    closed one fails the request."""
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=request_timeout)
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    return aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False)
