"""The JA4 fingerprint of a TLS ClientHello (FoxIO's JA4, the TLS client part), for test sites that tell a
browser from a script the way anti-bot services do: by how the client opens TLS, whatever its headers say.

JA4 = ``t<version><d|i><ciphers><extensions><alpn>_<ciphers hash>_<extensions hash>``: the cipher suites
and the extensions sorted (GREASE values left out, SNI and ALPN left out of the hash), the signature
algorithms in their order, each hash the first 12 hex digits of a SHA-256. Sorting makes it stable
against Chrome's shuffled extension order (which changes JA3 on every connection).
"""

from __future__ import annotations

import hashlib
import socket
import struct

GREASE = {0x0A0A + 0x1010 * i for i in range(16)}
VERSIONS = {0x0304: "13", 0x0303: "12", 0x0302: "11", 0x0301: "10"}

# Real browsers' JA4. Debian's Chromium, measured on this project's machine (`chromium --headless
# --ignore-certificate-errors --dump-dom https://127.0.0.1:PORT/` against this module's server, a page with a
# dozen images so that later connections resume the first one's TLS session; to an IP address, so no SNI:
# "i"; tests/integration/test_ladder.py measures it again), and Chrome 120-131 to a host name as FoxIO
# publishes it. Firefox and Safari are not here: no real one was at hand to measure (curl_cffi's targets
# for them are not checked against one).
BROWSERS = {
    "t13i1516h2_8daaf6152771_cb7bf5808d99",  # Chromium 156 (Debian), to an IP address
    "t13i1517h2_8daaf6152771_e2d80978ab2e",  # the same resuming a TLS session (pre_shared_key: one extension more)
    "t13d1516h2_8daaf6152771_02713d6af862",  # Chrome 120-131 (FoxIO's published value)
}


def _u16(data: bytes, at: int) -> int:
    return int(struct.unpack(">H", data[at:at + 2])[0])


def client_hello(data: bytes) -> dict:
    """The fields JA4 reads, from the first TLS record of a connection (ValueError: not a ClientHello)."""
    if len(data) < 9 or data[0] != 22 or data[5] != 1:
        raise ValueError("not a TLS ClientHello")
    hs = data[5:5 + _u16(data, 3)]
    at = 4
    version = _u16(hs, at)
    at += 2 + 32
    at += 1 + hs[at]  # session id
    n = _u16(hs, at)
    ciphers = [_u16(hs, at + 2 + i) for i in range(0, n, 2)]
    at += 2 + n
    at += 1 + hs[at]  # compression methods
    end = at + 2 + _u16(hs, at)
    at += 2
    out = {"version": version, "ciphers": ciphers, "extensions": [], "sni": False, "alpn": "", "versions": [],
           "sigalgs": []}
    while at + 4 <= end:
        kind, size = _u16(hs, at), _u16(hs, at + 2)
        body = hs[at + 4:at + 4 + size]
        at += 4 + size
        out["extensions"].append(kind)
        if kind == 0:
            out["sni"] = True
        elif kind == 16 and size > 3:
            out["alpn"] = body[3:3 + body[2]].decode("latin-1")
        elif kind == 43 and size:
            out["versions"] = [_u16(body, 1 + i) for i in range(0, body[0], 2)]
        elif kind == 13 and size >= 2:
            out["sigalgs"] = [_u16(body, 2 + i) for i in range(0, _u16(body, 0), 2)]
    return out


def ja4(data: bytes) -> str:
    hello = client_hello(data)
    versions = [v for v in hello["versions"] if v not in GREASE] or [hello["version"]]
    ciphers = [c for c in hello["ciphers"] if c not in GREASE]
    extensions = [e for e in hello["extensions"] if e not in GREASE]
    alpn = hello["alpn"]
    head = (f"t{VERSIONS.get(max(versions), '00')}{'d' if hello['sni'] else 'i'}{min(len(ciphers), 99):02d}"
            f"{min(len(extensions), 99):02d}{alpn[0] + alpn[-1] if alpn else '00'}")

    def digest(value: str) -> str:
        return hashlib.sha256(value.encode()).hexdigest()[:12] if value else "000000000000"

    sigalgs = ",".join(f"{s:04x}" for s in hello["sigalgs"] if s not in GREASE)
    hashed = ",".join(f"{e:04x}" for e in sorted(e for e in extensions if e not in (0, 16)))
    return (f"{head}_{digest(','.join(f'{c:04x}' for c in sorted(ciphers)))}_"
            f"{digest(hashed + ('_' + sigalgs if sigalgs else ''))}")


def peek_ja4(sock: socket.socket, timeout: float = 10.0) -> str:
    """The JA4 of a connection's ClientHello, read without consuming it (the TLS handshake reads it after);
    '' if what came first is not one."""
    previous = sock.gettimeout()
    # a blocking socket with a receive timeout: MSG_WAITALL then waits in the kernel until that much is there
    # (a ClientHello may come in more than one segment), for at most ``timeout``
    sock.settimeout(None)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", int(timeout), 0))
    try:
        head = socket.socket.recv(sock, 5, socket.MSG_PEEK | socket.MSG_WAITALL)
        data = head
        if len(head) == 5 and head[0] == 22:
            data = socket.socket.recv(sock, 5 + _u16(head, 3), socket.MSG_PEEK | socket.MSG_WAITALL)
        return ja4(data) if data else ""
    except (OSError, ValueError, IndexError, struct.error):
        return ""
    finally:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 0))
        sock.settimeout(previous)
