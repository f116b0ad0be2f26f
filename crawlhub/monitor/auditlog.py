"""The audit log of fetches (``<spider>:log``, a capped stream written by crawlhub.stats): read, filtered,
one line each (`crawlhub log`)."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any

import redis

from crawlhub.frontier.records import text
from crawlhub.stats import log_key


def log_entry(fields: Mapping[bytes, bytes] | Mapping[str, str]) -> dict[str, Any]:
    e = {text(k): text(v) for k, v in fields.items()}
    return {"time": float(e["t"]), "url": e["url"], "domain": e.get("domain", ""), "worker": e.get("worker", ""),
            "status": int(e["status"]) if e.get("status") else None, "error": e.get("error", ""),
            "ms": float(e.get("ms") or 0), "bytes": int(e.get("bytes") or 0), "proxy": e.get("proxy", ""),
            "browser": e.get("browser") == "1"}


class BadFilter(ValueError):
    """A status filter that can match no attempt."""


def check_status_filter(value: str) -> str:
    """A status filter as ``matches`` reads it: a code (``404``: 100-599, the codes HTTP defines), a class (``5xx``:
    1xx-5xx) or ``error``. Anything else (``7xx``, ``99``, ``abc``) would match nothing, silently: BadFilter, saying
    what it accepts."""
    wanted = value.strip().lower()
    if wanted == "error" or re.fullmatch(r"[1-5](?:xx|[0-9]{2})", wanted, flags=re.ASCII):
        return wanted
    raise BadFilter(f"--status {value!r} matches no attempt: give a status code (100-599, as 404), a class "
                    "(1xx, 2xx, 3xx, 4xx or 5xx) or error")


def matches(entry: dict[str, Any], status: str | None, domain: str | None) -> bool:
    if domain and entry["domain"] != domain:
        return False
    if status:
        s = status.lower()
        if s == "error":
            return entry["status"] is None
        if s.endswith("xx"):
            return entry["status"] is not None and str(entry["status"])[0] == s[0]
        return str(entry["status"]) == s
    return True


def format_entry(e: dict[str, Any]) -> str:
    when = time.strftime("%H:%M:%S", time.localtime(e["time"])) + f".{int(e['time'] * 1000) % 1000:03d}"
    outcome = str(e["status"]) if e["status"] is not None else f"ERR {e['error']}"
    extra = (f" via {e['proxy']}" if e["proxy"] else "") + (" [browser]" if e["browser"] else "")
    return f"{when} {outcome:>5} {e['ms']:7.0f}ms {e['bytes']:>8}B  {e['worker']:24} {e['url']}{extra}"


def read_log(server: redis.Redis, spider: str, limit: int, status: str | None = None,
             domain: str | None = None) -> tuple[list[dict[str, Any]], bytes]:
    """The newest ``limit`` matching entries, oldest first, and the last stream id seen."""
    found: list[dict[str, Any]] = []
    last_id, start = b"0-0", "+"
    while len(found) < limit:
        batch: list[tuple[bytes, dict[bytes, bytes]]] = server.xrevrange(log_key(spider), max=start, min="-", count=1000)  # type: ignore[assignment]
        if not batch:
            break
        if last_id == b"0-0":
            last_id = batch[0][0]
        for _, fields in batch:
            e = log_entry(fields)
            if matches(e, status, domain):
                found.append(e)
                if len(found) >= limit:
                    break
        start = "(" + batch[-1][0].decode()
    # workers send their entries in batches: in the stream, one worker's may follow another's later ones
    found.reverse()  # into stream order: the sort is stable, so entries of one time keep it
    return sorted(found, key=lambda e: e["time"]), last_id


