"""`make shop`: the demo's shop on 127.0.0.1, served until Ctrl-C, to crawl by hand with `scrapy crawl scrapeme`.

It listens on --port (8800) when that port is free, else on a free one, and prints the seed command for its URL.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading

from crawlhub.services import port_open
from tests.sites.server import LocalSite
from tests.sites.shop import shop_pages

PORT = 8800


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=PORT, help=f"the port to listen on when free ({PORT})")
    parser.add_argument("--products", type=int, default=600)
    parser.add_argument("--per-page", type=int, default=12)
    parser.add_argument("--delay", type=float, default=0.2, help="seconds the shop takes per page")
    args = parser.parse_args(argv)
    port = 0 if not 0 < args.port < 65536 or port_open(args.port) else args.port
    if port != args.port:
        print(f"port {args.port} is taken: the shop listens on a free port instead", file=sys.stderr)
    pages = shop_pages(args.products, args.per_page)
    shop = LocalSite(pages, delay=args.delay).start(port)
    print(f"Demo shop: {args.products} products on {len(pages)} listing pages at {shop.url}/shop/", flush=True)
    print(f"seed a crawl with: crawlhub seed scrapeme {shop.url}/shop/   (Ctrl-C stops the shop)", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C
        stop.wait()
    shop.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
