"""A fast generated website for benchmarks, on 127.0.0.1 only (Twisted, one process).

Page i (0 <= i < pages) at /p/<i> links to its children 5i+1 .. 5i+5 (a tree,
so the whole site is reachable from /p/0) and to three pages chosen by a
fixed hash (links the duplicate filter must catch). Bodies are ~1 KB.

    python -m bench.site --port 8999 --pages 20000
"""

from __future__ import annotations

import argparse
import sys

FANOUT = 5


def page_links(i: int, pages: int) -> list[int]:
    children = [c for c in range(FANOUT * i + 1, FANOUT * i + FANOUT + 1) if c < pages]
    others = [(i * 7919 + k * 104729) % pages for k in (1, 2, 3)]
    return children + others


def page_body(i: int, pages: int) -> bytes:
    links = "".join(f'<li><a href="/p/{j}">page {j}</a></li>' for j in page_links(i, pages))
    filler = "<p>" + ("lorem ipsum dolor sit amet " * 24) + "</p>"
    return f"<!doctype html><html><head><title>page {i}</title></head><body><h1>page {i}</h1><ul>{links}</ul>{filler}</body></html>".encode()


def serve(port: int, pages: int, tls: bool = False) -> None:
    from twisted.internet import reactor
    from twisted.web import resource, server

    class Pages(resource.Resource):
        isLeaf = True

        def render_GET(self, request):  # noqa: N802 - Twisted's name
            path = request.path.decode()
            if path.startswith("/p/") and path[3:].isdigit() and int(path[3:]) < pages:
                request.setHeader(b"content-type", b"text/html; charset=utf-8")
                return page_body(int(path[3:]), pages)
            request.setResponseCode(404)
            return b"not found"

    site = server.Site(Pages())
    site.noisy = False
    if tls:  # HTTPS with a self-signed certificate (the tests' own), for what each client's TLS handshake costs
        from twisted.internet import ssl

        from tests.sites.server import self_signed_cert

        cert, key = self_signed_cert()
        port_ = reactor.listenSSL(port, site, ssl.DefaultOpenSSLContextFactory(key, cert), interface="127.0.0.1")
    else:
        port_ = reactor.listenTCP(port, site, interface="127.0.0.1")
    print(f"READY {port_.getHost().port}", flush=True)
    reactor.run()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--pages", type=int, default=20000)
    parser.add_argument("--tls", action="store_true", help="serve HTTPS (a self-signed certificate)")
    args = parser.parse_args(argv)
    serve(args.port, args.pages, args.tls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
