"""A fault-injecting HTTP proxy between the tests' clients and the local S3 server (moto's server mode), standard
library only: for a seeded share of requests it answers ``503 SlowDown`` with S3's XML error, resets the connection
in the middle of the response body, or stalls before answering; every other request is forwarded as it came.

    from tools.fault_proxy import FaultProxy, Faults

    with FaultProxy(s3_server, Faults(seed=1, slow_down=0.1, reset=0.05, methods=("GET",))) as proxy:
        # shards_schema.storage (and, through storage.location_env, a job's Ray tasks), boto3 and pyarrow follow it
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        ...
    proxy.counts()  # {"requests": ..., "slow_down": ..., "reset": ..., "stall": ...}

Which requests fail is a pure function of the seed, the request (method, path, query without the random upload id)
and how many times that same request came before: the same requests meet the same faults whatever the interleaving
of concurrent clients, and a retry of a failed request draws again. The proxy runs in threads of the test process,
binds 127.0.0.1 only, and ``stop`` (or leaving the ``with``) closes every connection and returns once its threads
are gone, stalls included; a proxy starts once.
"""

from __future__ import annotations

import fcntl
import hashlib
import http.client
import http.server
import re
import socket
import socketserver
import struct
import termios
import threading
import time
import urllib.parse
from collections import Counter
from dataclasses import dataclass

from tools.local_s3 import free_port

KINDS = ("slow_down", "reset", "stall")
"""Fault kinds, in the order a request's draw is matched against their shares."""

SLOW_DOWN_BODY = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code><Message>Please reduce your '
                  'request rate.</Message><RequestId>{request_id}</RequestId><HostId>fault-proxy</HostId></Error>')
"""S3's answer to a client it throttles (what SDKs classify as throttling and retry with backoff)."""

# a proxy answers these for its own connection and never passes them on (RFC 9110 §7.6.1)
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization", "te",
              "trailer", "transfer-encoding", "upgrade"}
CHUNK_BYTES = 64 << 10
MAX_STALL_S = 60.0


@dataclass(frozen=True, kw_only=True)
class Faults:
    """Which faults the proxy injects, and where.

    Attributes:
        seed: seed of the draws (the same seed and requests give the same faults).
        slow_down: share of requests answered ``503 SlowDown`` at once (the request never reaches the server).
        reset: share of requests forwarded, then answered with the status line, the headers and half the body
            before the connection is reset (RST): the server has acted on the request (a PUT is stored) but the client
            never reads the whole answer. An answer without a body is reset before its first byte.
        stall: share of requests held ``stall_s`` before they are forwarded (longer than a client's read timeout:
            the client gives up and retries, or hangs if it has none). A request whose client gave up in the
            meantime is dropped, never forwarded late.
        stall_s: how long a stall lasts (at most 60 s; ``stop`` ends one early).
        methods: the HTTP methods that may meet a fault (upper case); None: all of them.
        keys: a regular expression a request's key (``request_key``: path and query) must match, somewhere, to
            meet a fault (e.g. ``"/inputs/.+[.]json$"``: the objects of a job's inputs, not its listings); None:
            every request.
    """

    seed: int = 0
    slow_down: float = 0.0
    reset: float = 0.0
    stall: float = 0.0
    stall_s: float = 5.0
    methods: tuple[str, ...] | None = None
    keys: str | None = None

    def __post_init__(self):
        shares = [self.slow_down, self.reset, self.stall]
        if min(shares) < 0 or sum(shares) > 1:
            raise ValueError(f"fault shares must be at least 0 and sum to at most 1, got {shares}")
        if not 0 <= self.stall_s <= MAX_STALL_S:
            raise ValueError(f"stall_s must be between 0 and {MAX_STALL_S} s, got {self.stall_s}")
        if isinstance(self.methods, str):
            raise TypeError(f"methods is a tuple of method names, e.g. ({self.methods!r},)")
        if self.methods is not None:
            object.__setattr__(self, "methods", tuple(m.upper() for m in self.methods))

    def draw(self, method: str, request_key: str, occurrence: int) -> str | None:
        """The fault of the ``occurrence``-th (from 0) request ``request_key`` of ``method``, or None."""
        if self.methods is not None and method not in self.methods:
            return None
        if self.keys is not None and re.search(self.keys, request_key) is None:
            return None
        digest = hashlib.blake2b(f"{self.seed}\0{method}\0{request_key}\0{occurrence}".encode(), digest_size=8)
        u = int.from_bytes(digest.digest(), "little") / 2.0 ** 64
        for kind in KINDS:
            u -= getattr(self, kind)
            if u < 0:
                return kind
        return None


def request_key(path: str) -> str:
    """A request's path and query with the upload id dropped (moto makes a random one per multipart upload, so a
    part's draws would differ from run to run) and the parameters sorted."""
    parsed = urllib.parse.urlsplit(path)
    query = sorted((k, v) for k, v in urllib.parse.parse_qsl(parsed.query, keep_blank_values=True)
                   if k != "uploadId")
    return parsed.path + ("?" + urllib.parse.urlencode(query) if query else "")


def _unacknowledged_bytes(sock: socket.socket) -> int:
    """Bytes sent on ``sock`` that its peer has not acknowledged yet (Linux's TIOCOUTQ; 0 where termios lacks it, as
    on macOS)."""
    try:
        return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]
    except (AttributeError, OSError):
        return 0


class FaultProxy:
    """The proxy in front of ``upstream`` (``http://127.0.0.1:PORT``, the ``s3_server`` fixture's endpoint).

    ``endpoint`` is its own URL once started (``start`` or ``with``); ``counts()`` the requests it saw and the faults
    it injected by kind; ``events()`` each request's (method, key, fault or None) in the order they arrived."""

    def __init__(self, upstream: str, faults: Faults | None = None, *, port: int | None = None):
        parsed = urllib.parse.urlsplit(upstream)
        if parsed.scheme != "http" or not parsed.hostname or not parsed.port:
            raise ValueError(f"upstream must be http://HOST:PORT, got {upstream!r}")
        self.upstream = (parsed.hostname, parsed.port)
        self.faults = faults or Faults()
        self.port = port
        self.endpoint = ""
        self._lock = threading.Lock()
        self._seen: Counter[tuple[str, str]] = Counter()
        self._counts: Counter[str] = Counter()
        self._events: list[tuple[str, str, str | None]] = []
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ life cycle
    def start(self) -> FaultProxy:
        for attempt in range(5):  # a free port can be taken between the probe and the bind
            port = self.port or free_port()
            try:
                self._server = _Server(("127.0.0.1", port), _Handler, self)
                break
            except OSError:
                if self.port or attempt == 4:
                    raise
        self.port = self._server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"fault-proxy-{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop accepting, end stalls, close every client connection and wait for the handler threads."""
        if self._server is None:
            return
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._server.close_connections()
        deadline = time.monotonic() + timeout_s
        for thread in self._server.handler_threads():
            thread.join(max(0.0, deadline - time.monotonic()))
        self._thread.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in self._server.handler_threads() if t.is_alive()]
        self._server = None
        if alive:
            raise RuntimeError(f"fault proxy on port {self.port}: threads still running after {timeout_s} s: {alive}")

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ what happened
    def counts(self) -> dict[str, int]:
        """{"requests": requests seen, then one entry per fault kind}: a snapshot."""
        with self._lock:
            return {"requests": self._counts["requests"], **{kind: self._counts[kind] for kind in KINDS}}

    def events(self) -> list[tuple[str, str, str | None]]:
        with self._lock:
            return list(self._events)

    def _decide(self, method: str, path: str) -> str | None:
        key = request_key(path)
        with self._lock:
            occurrence = self._seen[(method, key)]
            self._seen[(method, key)] += 1
            fault = self.faults.draw(method, key, occurrence)
            self._counts["requests"] += 1
            if fault:
                self._counts[fault] += 1
            self._events.append((method, key, fault))
        return fault


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    """A threaded HTTP server that knows its open connections, so ``stop`` can close the idle keep-alive ones."""

    daemon_threads = True  # joined by FaultProxy.stop, which first closes their sockets

    def __init__(self, address, handler, proxy: FaultProxy):
        self.proxy = proxy
        self._open: dict[socket.socket, threading.Thread] = {}
        self._open_lock = threading.Lock()
        self._handler_list: list[threading.Thread] = []
        super().__init__(address, handler)

    def process_request(self, request, client_address):
        thread = threading.Thread(target=self.process_request_thread, args=(request, client_address),
                                  name=f"fault-proxy-conn-{client_address[1]}", daemon=True)
        with self._open_lock:
            self._open[request] = thread
            self._handler_list.append(thread)
        thread.start()

    def shutdown_request(self, request):
        with self._open_lock:
            self._open.pop(request, None)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self._open_lock:
            sockets = list(self._open)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a handler blocked reading the next request
            except OSError:
                pass

    def handler_threads(self) -> list[threading.Thread]:
        with self._open_lock:
            return list(self._handler_list)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as S3 clients expect
    server: _Server

    def setup(self):
        super().setup()
        # headers and body go out in separate writes: with Nagle's algorithm the second waits for the client's
        # delayed ACK (40 ms a request on Linux)
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format, *args):  # quiet: the counts and events say what happened
        pass

    def handle_expect_100(self):
        # answered in _proxy: a throttled request must get its 503 instead of "100 Continue" (its body never comes)
        return True

    def do_GET(self):
        self._proxy()

    do_PUT = do_POST = do_HEAD = do_DELETE = do_OPTIONS = do_PATCH = do_GET

    # ------------------------------------------------------------------ one request
    def _proxy(self) -> None:
        proxy = self.server.proxy
        fault = proxy._decide(self.command, self.path)
        expects_continue = self.headers.get("Expect", "").lower() == "100-continue"
        try:
            if fault == "slow_down":
                self._slow_down(expects_continue)
            elif fault == "stall":
                self._continue(expects_continue)
                body = list(self._request_body())  # whole, so that a client that gives up is seen to be gone
                if proxy._stopping.wait(proxy.faults.stall_s) or self._client_gone():
                    self.close_connection = True  # never forwarded late: the server never acts on it
                    return
                self._forward(body, reset=False)
            else:
                self._continue(expects_continue)
                self._forward(self._request_body(), reset=fault == "reset")
        except (ConnectionError, TimeoutError):
            self.close_connection = True  # the client went away (gave up on a stall, say): nothing to answer

    def _continue(self, expects_continue: bool) -> None:
        if expects_continue:
            self.send_response_only(100)
            self.end_headers()

    def _client_gone(self) -> bool:
        """Whether the client closed its connection (an orderly close or a reset) while its request waited."""
        try:
            return self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False  # connected, nothing sent since
        except OSError:
            return True

    def _slow_down(self, expects_continue: bool) -> None:
        if expects_continue:
            self.close_connection = True  # the client sends no body after a final answer to Expect: 100-continue
        else:
            for _ in self._request_body():  # read, so that the connection is ready for the next request
                pass
        request_id = f"FAULTPROXY{self.server.proxy.counts()['requests']:010d}"
        body = b"" if self.command == "HEAD" else SLOW_DOWN_BODY.format(request_id=request_id).encode()
        self.send_response_only(503, "Slow Down")
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-amz-request-id", request_id)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def _forward(self, body, reset: bool) -> None:
        """Send the request with ``body`` (pieces of bytes) to the server and its answer back (``_answer``)."""
        proxy = self.server.proxy
        upstream = http.client.HTTPConnection(*proxy.upstream, timeout=60)
        try:
            upstream.connect()
            upstream.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as for the client (setup)
            upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
            for name, value in self.headers.items():
                if name.lower() not in HOP_BY_HOP and name.lower() != "expect":
                    upstream.putheader(name, value)  # Host included: the client signed it
            if chunked:
                upstream.putheader("Transfer-Encoding", "chunked")
            upstream.endheaders()
            for piece in body:
                upstream.send(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            if chunked:
                upstream.send(b"0\r\n\r\n")
            response = upstream.getresponse()
            self._answer(response, reset)
        finally:
            upstream.close()

    def _answer(self, response: http.client.HTTPResponse, reset: bool) -> None:
        """Pass ``response`` on to the client, or with ``reset`` its head and half its body, then an RST."""
        has_body = self.command != "HEAD" and response.status not in (204, 304)
        length = response.getheader("Content-Length")
        chunked = response.chunked  # http.client undoes the chunking: it is redone for the client below
        until_close = has_body and not chunked and length is None  # a body that ends when the connection does
        if reset and not (has_body and (chunked or until_close or int(length) > 0)):
            self._reset()  # nothing to cut in half: the client gets no answer at all
            return
        head = [f"HTTP/1.1 {response.status} {response.reason}\r\n"]
        head += [f"{name}: {value}\r\n" for name, value in response.getheaders() if name.lower() not in HOP_BY_HOP]
        if chunked and has_body:
            head.append("Transfer-Encoding: chunked\r\n")
        self.close_connection = self.close_connection or until_close
        if self.close_connection:
            head.append("Connection: close\r\n")
        self.wfile.write("".join(head).encode("latin-1") + b"\r\n")
        if not has_body:
            return
        # with reset: half the announced length, or half the first piece of a body of unknown length
        budget = int(length) // 2 if reset and length else None
        while piece := response.read1(CHUNK_BYTES):
            if reset:
                budget = len(piece) // 2 if budget is None else budget
                piece = piece[:budget]
                budget -= len(piece)
            if piece:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            if reset and budget <= 0:
                self._reset()
                return
        if chunked:
            self.wfile.write(b"0\r\n\r\n")

    def _reset(self) -> None:
        """Close the client connection with an RST (SO_LINGER on, 0 s) instead of an orderly FIN, once what was sent
        has reached the client: a reset that overtakes it makes the client's kernel drop the unread bytes."""
        self.close_connection = True
        deadline = time.monotonic() + 1.0
        while _unacknowledged_bytes(self.connection) and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(0.01)  # the client, blocked on the body, reads what arrived
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()

    def _request_body(self):
        """The request's body in pieces (a Content-Length body, or a chunked one undone)."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                        pass
                    return
                yield self.rfile.read(size)
                self.rfile.readline()
        remaining = int(self.headers.get("Content-Length") or 0)
        while remaining > 0:
            piece = self.rfile.read(min(CHUNK_BYTES, remaining))
            if not piece:
                raise ConnectionError("the client closed the connection inside the request body")
            remaining -= len(piece)
            yield piece
