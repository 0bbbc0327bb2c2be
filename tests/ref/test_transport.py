"""The one HTTP transport (abbench/server/http.py) against answers that never end,
servers that are gone, and kept-alive connections the server closed."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from abbench.server.http import Transport, TransportError


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *a: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path in ("/ok", "/close"):
            body = b'{"status": "ok"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = self.path == "/close"  # no "Connection: close" said
            return
        self.send_response(200)  # /slow: a body that never ends, a few bytes at a time
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            while True:
                self.wfile.write(b"1\r\n[\r\n")
                self.wfile.flush()
                time.sleep(0.05)
        except OSError:
            pass


class _Server(ThreadingHTTPServer):
    """Counts the connections it has closed (``closed``, under ``cond``)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.closed = 0
        self.cond = threading.Condition()

    def shutdown_request(self, request: socket.socket | tuple[bytes, socket.socket]) -> None:
        super().shutdown_request(request)
        with self.cond:
            self.closed += 1
            self.cond.notify_all()

    def wait_closed(self, n: int) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: self.closed >= n, timeout=60), self.closed


@pytest.fixture
def srv() -> Iterator[_Server]:
    srv = _Server()
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def server(srv: _Server) -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}"


def test_a_body_that_never_ends_is_cut_at_the_deadline(server: str) -> None:
    with Transport(server) as t:
        with pytest.raises(TransportError, match=r"^GET /slow: the answer took longer than 1 s$"):
            t.get("/slow", timeout=1)  # cut by its deadline: the body never ends
        with pytest.raises(TransportError, match=r"^GET /slow: the answer is larger than "
                                                 r"100 bytes$"):
            t.get("/slow", timeout=30, max_body=100)
        assert t.get("/ok", timeout=5).status == 200  # the session is still good


def test_a_server_that_is_gone_in_one_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nobody listens here once the socket closes
    with Transport(f"http://127.0.0.1:{port}") as t, pytest.raises(TransportError) as e:
        t.get("/health", timeout=2)
    assert e.value.message == "connection failed: GET /health: connection refused"


def test_a_kept_alive_connection_the_server_closed_is_no_error(server: str,
                                                               srv: _Server) -> None:
    """/close answers, then closes the connection without saying so (as llama.cpp does
    with idle ones): the next request on the session still gets its answer."""
    with Transport(server) as t:
        for i in range(3):
            assert t.get("/close", timeout=5).status == 200
            srv.wait_closed(i + 1)  # the server has closed the kept-alive connection
            assert t.get("/ok", timeout=5).status == 200
