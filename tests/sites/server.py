"""A local web server for the tests (and the demo), on 127.0.0.1 only.

:class:`LocalSite` serves a dict of pages (http or https, self-signed) from
a thread and keeps an access log; :class:`LocalProxy` is a forwarding proxy
(with CONNECT tunnels) that records what went through it.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import http.client
import random
import select
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from email.utils import formatdate, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from tests.sites.fingerprint import peek_ja4


@dataclass
class Hit:
    at: float
    path: str
    status: int
    user_agent: str = ""
    arrived: float = 0.0  # when the request came in (``at``: when it was answered)
    headers: list = field(default_factory=list)  # (name, value) pairs, in the order they came
    ja4: str = ""  # the JA4 fingerprint of the connection's TLS ClientHello (https only)


@functools.lru_cache(maxsize=1)
def self_signed_cert() -> tuple[str, str]:
    """(cert file, key file) of a self-signed certificate for 127.0.0.1 and localhost, made once per process."""
    import datetime
    import ipaddress
    import tempfile

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "crawlhub local site")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                    x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(key, hashes.SHA256())
    )
    folder = Path(tempfile.mkdtemp(prefix="crawlhub-tls-"))
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    return str(folder / "cert.pem"), str(folder / "key.pem")


def serve(answer, port: int = 0, tls: bool = False, connect=None) -> ThreadingHTTPServer:
    """A threaded HTTP/1.1 server on 127.0.0.1 calling ``answer(handler)`` for each GET, serving from a thread.

    ``tls``: HTTPS with a self-signed certificate (:func:`self_signed_cert`);
    ``connect``: called with the handler for each CONNECT (a proxy's tunnel).
    """

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self):
            # the TLS handshake in this connection's own thread, as a real server does: done in accept() it would
            # let one client that stops mid-handshake (a worker under SIGSTOP) hold up every other connection
            if isinstance(self.request, ssl.SSLSocket):
                self.ja4 = peek_ja4(self.request)  # how this client opens TLS (tests.sites.fingerprint)
                self.request.settimeout(30)
                self.request.do_handshake()
                self.request.settimeout(None)
            super().setup()

        def do_GET(self):  # noqa: N802
            answer(self)

        def do_POST(self):  # noqa: N802 - (a login form's; the page's handler reads the body: LocalSite.request_body)
            answer(self)

        def do_CONNECT(self):  # noqa: N802
            if connect is None:
                self.send_error(405)
                return
            connect(self)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    if tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*self_signed_cert())
        server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@dataclass
class LocalSite:
    """A threaded HTTP server on 127.0.0.1 serving ``pages``.

    ``pages`` maps a path (with query) to an HTML string or to
    ``(status, content_type, body, headers)``; other paths answer 404. A header
    whose value is None is not sent (``{"Content-Length": None}``: a body whose
    length is not said, ended by closing the connection).
    ``delay`` (seconds, or a (low, high) range) is slept before each answer.
    ``handler`` may be given to answer dynamically: handler(site, path) ->
    None (fall through to pages) or (status, content_type, body, headers).
    """

    pages: dict = field(default_factory=dict)
    delay: float | tuple[float, float] = 0.0
    handler: object = None
    hits: list[Hit] = field(default_factory=list)
    tls: bool = False  # serve HTTPS with a self-signed certificate
    # 200 pages carry an ETag and a Last-Modified (when the page last changed) and a matching
    # If-None-Match / If-Modified-Since gets a 304
    conditional: bool = False
    # https: the JA4 fingerprints (tests.sites.fingerprint) answered; any other client gets a 403, as from an
    # anti-bot service that checks how a client opens TLS. None: every client; set to None to stop checking.
    fingerprints: set[str] | None = None

    def __post_init__(self):
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self.active = 0  # requests being served right now
        self.max_active = 0
        self._current = threading.local()
        self._versions: dict[str, tuple[str, float]] = {}  # path -> (ETag, time it last changed)

    def request_method(self) -> str:
        """The method of the request being answered (for a ``handler``)."""
        return getattr(self._current, "method", "GET")

    def request_body(self) -> bytes:
        """The body of the request being answered (a POST's form, for a ``handler``)."""
        return getattr(self._current, "body", b"")

    def request_header(self, name: str, default: str = "") -> str:
        """A header of the request being answered (for a ``handler``)."""
        headers = getattr(self._current, "headers", None)
        return headers.get(name, default) if headers is not None else default

    # -- serving ----------------------------------------------------------
    def start(self, port: int = 0) -> LocalSite:
        self._server = serve(self._answer, port, self.tls)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "site not started"
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def _answer(self, request: BaseHTTPRequestHandler) -> None:
        arrived = time.time()
        with self._lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        status = 500  # if the page raises
        self._current.headers = request.headers
        self._current.method = request.command
        length = int(request.headers.get("Content-Length") or 0) if request.command == "POST" else 0
        self._current.body = request.rfile.read(length) if length else b""
        ja4 = getattr(request, "ja4", "")
        try:
            allowed = self.fingerprints
            if allowed is not None and self.tls and ja4 not in allowed:
                status, ctype, data, headers = 403, "text/html", b"<html><body>Access denied</body></html>", {}
            else:
                status, ctype, data, headers = self._page(request.path)
        finally:
            # no longer "being served" before the client can see the answer
            with self._lock:
                self.active -= 1
                self.hits.append(Hit(time.time(), request.path, status, request.headers.get("User-Agent", ""), arrived,
                                     list(request.headers.items()), ja4))
        request.send_response(status)
        request.send_header("Content-Type", ctype)
        if headers.get("Content-Length", "") is not None:  # None: no length said (the body ends with the connection)
            request.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            if value is not None:
                request.send_header(name, value)
        request.end_headers()
        request.wfile.write(data)

    def _page(self, path: str) -> tuple[int, str, bytes, dict]:
        delay = self.delay
        if isinstance(delay, tuple):
            delay = random.uniform(*delay)
        if delay:
            time.sleep(delay)
        answer = self.handler(self, path) if self.handler else None
        if answer is None:
            page = self.pages.get(path)
            if page is None:
                answer = (404, "text/html", "<html><body><h1>Not found</h1></body></html>", {})
            elif isinstance(page, str):
                answer = (200, "text/html; charset=utf-8", page, {})
            else:
                answer = page
        status, ctype, body, headers = answer
        data = body.encode("utf-8") if isinstance(body, str) else body
        if self.conditional and status == 200:
            return self._conditional(path, ctype, data, headers)
        return status, ctype, data, headers

    def _conditional(self, path: str, ctype: str, data: bytes, headers: dict) -> tuple[int, str, bytes, dict]:
        etag = '"' + hashlib.sha1(data).hexdigest()[:16] + '"'
        with self._lock:
            known = self._versions.get(path)
            if known is None or known[0] != etag:
                known = self._versions[path] = (etag, float(int(time.time())))
        validators = {"ETag": etag, "Last-Modified": formatdate(known[1], usegmt=True)}
        if_none_match = self.request_header("If-None-Match")
        if_modified_since = self.request_header("If-Modified-Since")
        if if_none_match:
            fresh = etag in [v.strip() for v in if_none_match.split(",")]
        elif if_modified_since:
            since = parsedate_to_datetime(if_modified_since)
            fresh = since is not None and since.timestamp() >= known[1]
        else:
            fresh = False
        if fresh:
            return 304, ctype, b"", {**headers, **validators}
        return 200, ctype, data, {**headers, **validators}

    # -- access log ---------------------------------------------------------
    def fetched(self, prefix: str = "/") -> list[str]:
        with self._lock:
            return [h.path for h in self.hits if h.path.startswith(prefix) and h.path != "/robots.txt"]


@dataclass
class LocalProxy:
    """A forward HTTP proxy on 127.0.0.1 for tests: ``mode`` "ok" forwards (adding
    ``Via: 1.1 <name>``), "forbid" answers 403 to everything. With ``credentials``
    ("user:password") a request without them gets 407. ``seen`` logs
    (path, status, Proxy-Authorization present) per request."""

    name: str
    mode: str = "ok"
    credentials: str = ""
    seen: list = field(default_factory=list)

    def start(self) -> LocalProxy:
        self._server = serve(self._handle, connect=self._tunnel)
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def url(self, with_credentials: bool = True) -> str:
        auth = f"{self.credentials}@" if self.credentials and with_credentials else ""
        return f"http://{auth}127.0.0.1:{self.port}"

    @staticmethod
    def _send(handler, status: int, body: bytes, headers=()) -> None:
        handler.send_response(status)
        for name, value in headers:
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def _refused(self, handler: BaseHTTPRequestHandler) -> bool:
        """Answer 407 (wrong or missing credentials) or 403 ("forbid" mode); True if it did."""
        auth = handler.headers.get("Proxy-Authorization", "")
        if self.credentials and auth != "Basic " + base64.b64encode(self.credentials.encode()).decode():
            self.seen.append((handler.path, 407, bool(auth)))
            self._send(handler, 407, b"proxy authentication required", [("Proxy-Authenticate", 'Basic realm="test"')])
            return True
        if self.mode == "forbid":
            self.seen.append((handler.path, 403, bool(auth)))
            self._send(handler, 403, b"<html><body>Access denied by proxy</body></html>", [("Content-Type", "text/html")])
            return True
        return False

    def _tunnel(self, handler: BaseHTTPRequestHandler) -> None:
        """CONNECT host:port: a byte tunnel to 127.0.0.1 (https through the proxy)."""
        if self._refused(handler):
            return
        host, _, port = handler.path.rpartition(":")
        if host not in ("127.0.0.1", "localhost"):  # tests never leave this machine
            self.seen.append((handler.path, 502, True))
            self._send(handler, 502, b"only 127.0.0.1 is proxied here")
            return
        upstream = socket.create_connection((host, int(port)), timeout=30)
        handler.send_response(200, "Connection established")
        handler.end_headers()
        self.seen.append((handler.path, 200, bool(handler.headers.get("Proxy-Authorization"))))
        client = handler.connection
        try:
            while True:
                ready, _, _ = select.select([client, upstream], [], [], 30)
                if not ready:
                    break
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    (upstream if sock is client else client).sendall(data)
        except OSError:
            pass
        finally:
            upstream.close()
            handler.close_connection = True

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        auth = handler.headers.get("Proxy-Authorization", "")
        if self._refused(handler):
            return
        target = urlsplit(handler.path)
        if target.hostname not in ("127.0.0.1", "localhost"):  # tests never leave this machine
            self.seen.append((handler.path, 502, bool(auth)))
            self._send(handler, 502, b"only 127.0.0.1 is proxied here")
            return
        hop = {"proxy-authorization", "proxy-connection", "connection", "keep-alive", "host"}
        headers = [(k, v) for k, v in handler.headers.items() if k.lower() not in hop]
        conn = http.client.HTTPConnection(target.hostname, target.port or 80, timeout=30)
        try:
            conn.putrequest("GET", target.path + (f"?{target.query}" if target.query else ""), skip_accept_encoding=True)
            for k, v in [*headers, ("Via", f"1.1 {self.name}")]:
                conn.putheader(k, v)
            conn.endheaders()
            answer = conn.getresponse()
            body = answer.read()
            skip = ("content-length", "transfer-encoding", "connection")
            out = [(k, v) for k, v in answer.getheaders() if k.lower() not in skip]
            self.seen.append((handler.path, answer.status, bool(auth)))
            self._send(handler, answer.status, body, out)
        finally:
            conn.close()


def refused_port() -> int:
    """A loopback port nothing listens on (connections to it are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
