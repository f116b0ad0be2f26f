"""Request fingerprint benchmark: microseconds to fingerprint one new request, crawlhub's fingerprinter against
Scrapy's default, in the same run.

Every link a page yields is fingerprinted once (the frontier's duplicate filter reads it). crawlhub's reads the URL
without URL_TRACKING_PARAMS (crawlhub.fingerprint); what that costs a link depends on its URL:

- no query: one look for ``?`` and ``;``, then Scrapy's;
- a query without tracking parameters: the query read, nothing taken out, Scrapy's;
- a query with tracking parameters: those taken out, a copy of the request, Scrapy's of the copy.

A new Request each call (Scrapy caches a request's fingerprint: a new link is never in that cache). No server.

    .venv/bin/python -m bench.fingerprint            # 100,000 requests per figure
    .venv/bin/python -m bench.fingerprint --quick    # 10,000
"""

from __future__ import annotations

import argparse
import time

from scrapy import Request
from scrapy.utils.request import RequestFingerprinter as ScrapyFingerprinter

from crawlhub.fingerprint import RequestFingerprinter

URLS = {
    "no query": "https://scrapeme.live/shop/Bulbasaur/",
    "a query": "https://scrapeme.live/shop/page/12/?orderby=price&per_page=16",
    "tracking parameters": "https://scrapeme.live/shop/page/12/?orderby=price&utm_source=mail&utm_medium=news&fbclid=IwAR0x",
}


def per_call(fingerprints: list, url: str, count: int, rounds: int = 7) -> list[float]:
    """For each of ``fingerprints``, the best of ``rounds`` runs of ``count`` new requests, in microseconds per request
    (its making included); the fingerprinters take turns, round by round, so a machine's drift falls on each."""
    best = [float("inf")] * len(fingerprints)
    for turn in range(rounds):
        order = list(enumerate(fingerprints))
        for i, fingerprint in order[::-1] if turn % 2 else order:  # each goes first in half the rounds
            start = time.perf_counter()
            for _ in range(count):
                fingerprint(Request(url))
            best[i] = min(best[i], time.perf_counter() - start)
    return [b / count * 1e6 for b in best]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10,000 requests per figure")
    args = parser.parse_args()
    count = 10_000 if args.quick else 100_000
    ours, scrapys = RequestFingerprinter(), ScrapyFingerprinter()
    (floor,) = per_call([lambda request: None], URLS["no query"], count)
    print(f"{count:,} new requests per figure, best of 7; a Request made alone: {floor:.2f} us")
    print("| link | crawlhub | Scrapy's | crawlhub - Scrapy's |")
    print("| --- | --- | --- | --- |")
    for name, url in URLS.items():
        mine, theirs = per_call([ours.fingerprint, scrapys.fingerprint], url, count)
        print(f"| {name} | {mine:.2f} us | {theirs:.2f} us | {mine - theirs:+.2f} us |")


if __name__ == "__main__":
    main()
