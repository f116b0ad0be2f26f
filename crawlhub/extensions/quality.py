"""QualityMonitor: know when extraction breaks, and never let a broken extraction damage stored data.

**Judging a page.** Every leased page is judged when its work is done (``crawlhub.signals.page_done``: its
output consumed, every item through the pipelines), against the page's own baseline: the items it yielded at
its last healthy fetch, which the URL status store keeps (``items``) and the refresher hands back with a
revisit:

* **healthy**: it yielded at least ``QUALITY_PAGE_MIN_SHARE`` of its baseline (any number without one) and
  none of its items was quarantined; or it answered 404/410 (its items are gone);
* **broken**: it had a baseline and yields less than that share of it (none at all, typically: the site
  changed its markup);
* **degraded**: some of its items were quarantined (ValidatePipeline): they were not stored again.

What is stored is protected: a broken or degraded page never marks its items gone (its ``GoneCheck`` is
skipped: their ``last_seen`` says nothing about the site). A broken page keeps its baseline and its revisit
interval, and loses its validators and body signature, so that its next fetch is a whole GET which a fixed
spider parses again (a conditional GET would answer 304 and the page would never be parsed). It is kept for
inspection in ``<spider>:quality:broken`` (URL, why, since when) until a fetch of it is healthy again. A degraded
page loses its validators and signature too: its quarantined items are not in the store, and a 304 would keep them
out after the spider is fixed.

**Figures.** Every page and every item that reaches validation is counted (crawlhub.quality has the fields);
the counts ride the cluster stats' pipeline (``crawlhub.signals.stats_flushing``), into the cycle's hash and
the window's. Every ``QUALITY_CHECK_INTERVAL`` seconds (and at close) a worker reads the recent figures (the
last two windows), the current cycle and the baseline cycle in one pipeline, and opens or closes events.

**Events.** The first broken page of a URL pattern, a pattern whose pages yielded items in the last cycle and
now yield none, a field whose coverage is below its declared floor or fell by ``QUALITY_COVERAGE_MARGIN``
from the last cycle, items quarantined or requests dead-lettered faster than their limits: each opens one
event in ``<spider>:quality:events`` (HSETNX: one worker opens it, logs one WARNING line and sends
``crawlhub.signals.quality_events``, which the webhook action posts). It closes, into
``<spider>:quality:closed``, when the recent figures show it healthy (an extraction event: when no page of
its pattern is broken any more).

**Change alerts.** A stored value that moved by more than its type's declared ``alert`` share (a price drop)
is recorded in ``<spider>:quality:alerts`` and sent as an ``alert`` through the same actions.

What this worker keeps meanwhile is what it has yet to send, and the baseline cycle's figures, which it
reads again when the cycle changes and every ``BASELINE_REREAD`` checks.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from typing import Any

from itemadapter import ItemAdapter
from scrapy import signals
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from twisted.internet import task

from crawlhub import meta
from crawlhub import signals as crawlhub_signals
from crawlhub.components import frontier_of
from crawlhub.connection import REDIS_ERRORS
from crawlhub.contracts import contract_of
from crawlhub.exceptions import InvalidItem
from crawlhub.quality import (
    ALERTS_MAX,
    CLOSED_MAX,
    Figures,
    Limits,
    add,
    count_item,
    decode,
    findings,
    quality_keys,
    quarantine_reasons,
    score,
    spider_rules,
    url_pattern,
    when,
)
from crawlhub.revisit.store import GoneCheck, QuarantineSuperseded, StatusUpdate
from crawlhub.stats import add_counts

__all__ = ["QualityMonitor", "quality_keys", "url_pattern"]

logger = logging.getLogger(__name__)

BASELINE_REREAD = 30  # checks between two reads of the baseline cycle's figures
EXAMPLES = 3  # example URLs kept per event subject


class QualityMonitor:
    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        if not settings.getbool("QUALITY_ENABLED", True):
            raise NotConfigured("QUALITY_ENABLED is off")
        self.crawler = crawler
        self.min_share = settings.getfloat("QUALITY_PAGE_MIN_SHARE", 0.5)
        self.interval = settings.getfloat("QUALITY_FLUSH_INTERVAL", 2.0)
        self.check_interval = settings.getfloat("QUALITY_CHECK_INTERVAL", 10.0)
        self.broken_max = settings.getint("QUALITY_BROKEN_MAX", 10000)
        self.cycle_seconds = max(1.0, settings.getfloat("QUALITY_CYCLE", 86400.0))
        self.window = max(1.0, settings.getfloat("QUALITY_WINDOW", 300.0))
        self.retention = settings.getint("QUALITY_RETENTION", 30 * 86400)
        self.score_min = settings.getfloat("QUALITY_SCORE_MIN", 0.0)
        self.limits = Limits.from_settings(settings)
        # without the cluster stats, the figures go with this monitor's own flush
        self.own_counts = not (settings.getbool("CLUSTER_STATS_ENABLED", True)
                               and settings.getbool("CRAWLHUB_SHARED", True))
        self.rules: tuple[Any, ...] = ()
        self.keys = quality_keys("?")
        self.spider_name = "?"
        self.revisits = False
        # what waits to be sent
        self.counts: dict[tuple[str, int], dict[str, int]] = {}  # (cycle, window slot) -> counts
        self.broken: dict[str, dict[str, Any]] = {}  # url -> record
        self.mended: dict[str, str] = {}  # url -> pattern: pages known broken that are healthy again
        self.alerts: list[dict[str, Any]] = []
        self.sent_dlq: dict[str, int] = {}  # dlq/reason/* Scrapy stats already counted (they are cumulative)
        # what this worker knows
        self.types_seen: set[str] = set()
        self.floors: dict[str, float] = {}  # "Type.field" -> declared coverage floor
        self.alert_rules: dict[str, dict[str, dict[str, float]]] = {}  # collection -> field -> rule
        self.examples: dict[str, deque[str]] = {}  # event key -> example URLs seen by this worker
        self.baseline: tuple[str, Figures | None] = ("", None)
        self.checks = 0
        self.last_score: float | None = None
        self._bucket: tuple[str, int] = ("", 0)
        self._bucket_until = 0.0
        self.timers: list[task.LoopingCall] = []
        self.posting: list[Any] = []
        connect = crawler.signals.connect
        connect(self.page_done, signal=crawlhub_signals.page_done)
        connect(self.item_scraped, signal=signals.item_scraped)
        connect(self.item_dropped, signal=signals.item_dropped)
        connect(self.items_changed, signal=crawlhub_signals.items_changed)
        connect(self.stats_flushing, signal=crawlhub_signals.stats_flushing)
        connect(self.spider_opened, signal=signals.spider_opened)
        connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> QualityMonitor:
        return cls(crawler)

    def spider_opened(self, spider: Any) -> None:
        self.rules = spider_rules(spider)
        self.spider_name = spider.name
        self.keys = quality_keys(spider.name)
        self.revisits = bool(getattr(spider, "revisit", None) or getattr(spider, "revisit_rules", None)
                             or getattr(spider, "sitemap_revisit", None))
        for every, call in ((self.interval, self.flush), (self.check_interval, self.check)):
            if every > 0:
                timer = task.LoopingCall(call)
                timer.start(every, now=False).addErrback(
                    lambda f: logger.error("Quality monitor stopped: %s", f.getTraceback()))
                self.timers.append(timer)

    def spider_closed(self, spider: Any) -> None:
        for timer in self.timers:
            if timer.running:
                timer.stop()
        self.flush()
        self.check(final=True)

    # -- counting ---------------------------------------------------------------------------------------
    def cycle_id(self, now: float) -> str:
        """The current crawl cycle: the frontier epoch of a one-shot spider, a QUALITY_CYCLE window else."""
        if self.revisits:
            return f"t{int(now // self.cycle_seconds * self.cycle_seconds)}"
        frontier = frontier_of(self.crawler)
        return f"e{frontier.epoch_id if frontier is not None else ''}"

    def _counts(self) -> dict[str, int]:
        """The counts of now's (cycle, window) bucket; the cycle is read again once a second."""
        now = time.time()
        if now >= self._bucket_until:
            self._bucket = (self.cycle_id(now), int(now // self.window))
            self._bucket_until = now + 1.0
        return self.counts.setdefault(self._bucket, {})

    def _example(self, key: str, url: str | None) -> None:
        if url:
            self.examples.setdefault(key, deque(maxlen=EXAMPLES)).append(url)

    def _count_item(self, item: Any, response: Any, valid: bool) -> None:
        if isinstance(item, dict):
            return
        contract = contract_of(type(item))  # type: ignore[arg-type]  # (a class: hashable)
        if contract.name not in self.types_seen:  # its declared floors and alert rules, once
            self.types_seen.add(contract.name)
            self.floors.update({f"{contract.name}.{k}": v for k, v in contract.floors.items()})
            if contract.alerts:
                self.alert_rules[getattr(type(item), "collection", "")] = contract.alerts
        adapter = ItemAdapter(item)
        lacking = count_item(self._counts(), contract.name, contract.fields, adapter, valid)
        url = adapter.get("source_url") or (response.url if response is not None else None)
        for name in lacking:
            self._example(f"coverage:{contract.name}.{name}", url)

    def item_scraped(self, item: Any, response: Any, spider: Any = None) -> None:
        self._count_item(item, response, valid=True)

    def item_dropped(self, item: Any, response: Any, exception: BaseException, spider: Any = None) -> None:
        if not isinstance(exception, InvalidItem):
            return
        self._count_item(item, response, valid=False)
        counts = self._counts()
        for reason in quarantine_reasons(exception.fields):
            counts[f"q|{reason}"] = counts.get(f"q|{reason}", 0) + 1
        self._example("rate:quarantine", response.url if response is not None else None)

    def _count_dead_letters(self) -> None:
        """The DLQ by reason, from the frontier's Scrapy stats (cumulative: their growth)."""
        stats = self.crawler.stats.get_stats()
        counts = None
        for name, value in stats.items():
            if name.startswith("dlq/reason/") and value > self.sent_dlq.get(name, 0):
                counts = counts if counts is not None else self._counts()
                grown = value - self.sent_dlq.get(name, 0)
                counts["dlq"] = counts.get("dlq", 0) + grown
                counts["d|" + name[len("dlq/reason/"):]] = counts.get("d|" + name[len("dlq/reason/"):], 0) + grown
                self.sent_dlq[name] = value

    def stats_flushing(self) -> list[tuple[str, dict[str, int], int]]:
        """Hand the counts to the cluster stats' flush (crawlhub.signals.stats_flushing)."""
        self._count_dead_letters()
        counts, self.counts = self.counts, {}
        out = []
        for (cycle, slot), fields in counts.items():
            if fields:
                out.append((self.keys["cycle"] + cycle, fields, self.retention))
                out.append((self.keys["window"] + str(slot), fields, int(3 * self.window) + 60))
        return out

    def _send_counts_alone(self) -> None:
        frontier = frontier_of(self.crawler)
        handed = self.stats_flushing()
        if frontier is None or not handed:
            return
        pipe = frontier.server.pipeline(transaction=False)
        for key, fields, ttl in handed:
            add_counts(pipe, key, fields, ttl)
        try:
            pipe.execute()
        except REDIS_ERRORS as exc:
            logger.warning("Quality figures not sent (Redis unavailable: %s)", exc)

    # -- judging a page -------------------------------------------------------------------------------
    def verdict(self, status: int | None, items: int, invalid: int, known: dict[str, Any]) -> tuple[str, str]:
        """('healthy' | 'broken' | 'degraded', why)."""
        if status in (404, 410):
            return "healthy", f"answered {status}: its items are gone"
        before = known.get("items") or 0
        if before and items < before * self.min_share:
            return "broken", (f"yielded {before} item(s) at its last healthy fetch, {items} now" if items else
                              f"yielded {before} item(s) at its last healthy fetch, none now")
        if invalid:
            return "degraded", f"{invalid} of its {items} item(s) quarantined"
        return "healthy", ""

    def page_done(self, request: Any, status: int | None, items: int, invalid: int, after_store: list[Any]) -> None:
        known = request.meta.get(meta.STATUS) or {}
        state, why = self.verdict(status, items, invalid, known)
        self.crawler.stats.inc_value(f"quality/pages/{state}")
        pattern = url_pattern(request.url, self.rules)
        counts = self._counts()
        for name, amount in (("pages", 1), (f"p|{pattern}|pages", 1), (f"p|{pattern}|items", items)):
            counts[name] = counts.get(name, 0) + amount
        if state != "healthy":
            counts[state] = counts.get(state, 0) + 1
        if not items and status not in (404, 410):
            self._example(pattern, request.url)
        for update in after_store:
            if isinstance(update, GoneCheck) and state != "healthy":
                update.skip = why
            elif isinstance(update, StatusUpdate):
                if state == "broken":
                    update.broken = why
                    update.interval = float(known.get("interval") or update.interval)
                elif state == "degraded":
                    update.degraded = True
                elif state == "healthy" and status not in (404, 410):
                    update.items = items
        lease = request.meta.get(meta.LEASE)
        if lease and (invalid or known.get("degraded")):
            # this fetch's quarantine records supersede the page's earlier ones (none left once it reads healthy)
            after_store.append(QuarantineSuperseded(request.url, str(lease)))
        if state == "broken":
            logger.debug("Extraction broken on %s: it %s; its items are not marked gone, it stays due", request.url,
                         why)
            self.broken[request.url] = {"url": request.url, "pattern": pattern, "why": why, "since": time.time(),
                                        "status": status}
        elif state == "degraded":
            logger.info("%s: %s; its items are not marked gone, its next fetch is a whole GET (crawlhub quarantine)",
                        request.url, why)
        elif known.get("broken") or request.url in self.broken:
            self.broken.pop(request.url, None)
            self.mended[request.url] = pattern

    # -- change alerts ----------------------------------------------------------------------------------
    def items_changed(self, changes: list[dict[str, Any]]) -> None:
        for change in changes:
            rule = self.alert_rules.get(change.get("collection", ""), {}).get(change.get("field", ""))
            if not rule:
                continue
            try:
                old, new = float(change["old"]), float(change["new"])
            except (TypeError, ValueError, KeyError):
                continue
            if old <= 0:
                continue
            moved = (new - old) / old
            if (-moved > rule.get("drop", float("inf"))) or (moved > rule.get("rise", float("inf"))):
                self.alerts.append({
                    "state": "alert", "kind": "change", "spider": self.spider_name,
                    "subject": f"{change['collection']}.{change['field']}", "key": change.get("key"),
                    "old": change["old"], "new": change["new"], "moved": round(moved, 4), "url": change.get("url"),
                    "since": time.time(),
                    "why": f"{change['field']} {'fell' if moved < 0 else 'rose'} {abs(moved):.0%} "
                           f"({change['old']} -> {change['new']}) for {change.get('key')}"})

    # -- sending ----------------------------------------------------------------------------------------
    def flush(self) -> None:
        """The broken and mended pages and the change alerts, in one pipeline."""
        if self.own_counts:
            self._send_counts_alone()
        if not (self.broken or self.mended or self.alerts):
            return
        frontier = frontier_of(self.crawler)
        if frontier is None:
            return
        broken, mended, alerts = self.broken, self.mended, self.alerts
        self.broken, self.mended, self.alerts = {}, {}, []
        try:
            self._send(frontier.server, broken, mended, alerts)
        except REDIS_ERRORS as exc:  # sent again with the next flush
            logger.warning("Quality records not sent (Redis unavailable: %s); sent with the next flush", exc)
            self.broken = {**broken, **self.broken}
            self.mended = {**mended, **self.mended}
            self.alerts[:0] = alerts

    def _send(self, server: Any, broken: dict[str, dict[str, Any]], mended: dict[str, str],
              alerts: list[dict[str, Any]]) -> None:
        keys = self.keys
        by_pattern: dict[str, list[dict[str, Any]]] = {}
        for record in broken.values():
            by_pattern.setdefault(record["pattern"], []).append(record)
        events = {pattern: self._event("extraction", pattern, "extraction broken", records[0]["why"],
                                       records[0]["since"], baseline=None, examples=[r["url"] for r in records])
                  for pattern, records in by_pattern.items()}
        pipe = server.pipeline(transaction=False)
        for url, record in broken.items():
            pipe.hsetnx(keys["broken"], url, json.dumps(record))
        for pattern, event in events.items():
            pipe.hsetnx(keys["events"], pattern, json.dumps(event))
        pipe.hlen(keys["broken"])
        if alerts:
            pipe.lpush(keys["alerts"], *(json.dumps(a) for a in alerts)).ltrim(keys["alerts"], 0, ALERTS_MAX - 1)
        out = pipe.execute()
        opened = [event for event, new in zip(events.values(), out[len(broken):], strict=False) if new]
        recorded = out[len(broken) + len(events)]
        if recorded > self.broken_max:
            logger.warning("%d broken pages recorded for %s (QUALITY_BROKEN_MAX %d)", recorded, self.spider_name,
                           self.broken_max)
        for alert in alerts[:5]:
            logger.warning("Change alert (%s): %s, %s", alert["subject"], alert["why"], alert["url"])
        if len(alerts) > 5:
            logger.warning("... and %d change alerts more (`crawlhub quality %s`)", len(alerts) - 5,
                           self.spider_name)
        self._announce(opened, "opened")
        if alerts:
            self.crawler.signals.send_catch_log(crawlhub_signals.quality_events, events=alerts)
        if mended:
            self._close_extraction(server, set(mended.values()), mended=list(mended))

    def _event(self, kind: str, subject: str, what: str, why: str, since: float, baseline: Any,
               examples: list[str], figure: Any = None) -> dict[str, Any]:
        event = {"kind": kind, "subject": subject, "what": what, "why": why, "since": since, "baseline": baseline,
                 "figure": figure, "examples": examples[:EXAMPLES], "example": examples[0] if examples else None,
                 "spider": self.spider_name}
        if kind == "extraction":
            event["pattern"] = subject
        return event

    def _announce(self, events: list[dict[str, Any]], state: str) -> None:
        """The one log line of each event this worker opened or closed, and the quality_events signal."""
        for event in events:
            if state == "opened" and event["kind"] == "extraction":
                logger.warning("Extraction broken on pages like %s (%s, e.g. %s): their items are not marked gone "
                               "and they stay due; `crawlhub quality %s --broken` lists them", event["subject"],
                               event["why"], event["example"], self.spider_name)
            elif state == "opened":
                logger.warning("Data quality: %s (%s%s); `crawlhub quality %s` shows the figures", event["what"],
                               event["why"], f", e.g. {event['example']}" if event.get("example") else "",
                               self.spider_name)
            else:
                logger.warning("Data quality: %s: healthy again (since %s)", event["what"].replace(" broken", "")
                               if event["kind"] == "extraction" else event["subject"], when(event["since"]))
        if events:
            self.crawler.signals.send_catch_log(crawlhub_signals.quality_events,
                                                events=[{**e, "state": state} for e in events])

    def _close(self, server: Any, key: str, event: dict[str, Any]) -> bool:
        if not server.hdel(self.keys["events"], key):  # another worker closed it
            return False
        event = {**event, "closed": time.time()}
        server.pipeline(transaction=False).lpush(self.keys["closed"], json.dumps(event)).ltrim(
            self.keys["closed"], 0, CLOSED_MAX - 1).execute()
        self._announce([event], "closed")
        return True

    def _close_extraction(self, server: Any, patterns: set[str], mended: list[str] | None = None,
                          events: dict[str, dict[str, Any]] | None = None) -> None:
        """Close the extraction events of ``patterns`` that have no broken page left (after removing ``mended``)."""
        if mended:
            server.hdel(self.keys["broken"], *mended)
        if events is None:
            events = {k.decode(): json.loads(v) for k, v in server.hgetall(self.keys["events"]).items()}
        candidates = [p for p in patterns if p in events]
        if not candidates:
            return
        still = {json.loads(raw).get("pattern") for raw in server.hvals(self.keys["broken"])}
        for pattern in candidates:
            if pattern not in still:
                self._close(server, pattern, events[pattern])

    # -- checking the cluster's figures -------------------------------------------------------------------
    def check(self, final: bool = False) -> None:
        """Read the recent, current and baseline figures (one pipeline); open and close events; the score."""
        frontier = frontier_of(self.crawler)
        if frontier is None:
            return
        if final:
            self._count_dead_letters()
        now = time.time()
        cycle, slot = self.cycle_id(now), int(now // self.window)
        start = now if cycle.startswith("e") else float(cycle[1:])
        keys = self.keys
        server = frontier.server
        try:
            pipe = server.pipeline(transaction=False)
            pipe.zadd(keys["cycles"], {cycle: start}, nx=True)
            pipe.zrange(keys["cycles"], -20, -1, withscores=True)
            pipe.hgetall(keys["window"] + str(slot))
            pipe.hgetall(keys["window"] + str(slot - 1))
            pipe.hgetall(keys["cycle"] + cycle)
            pipe.hgetall(keys["events"])
            pipe.hset(keys["meta"], mapping={"floors": json.dumps(self.floors), "score_min": self.score_min,
                                             "cycle": "epoch" if not self.revisits else self.cycle_seconds,
                                             "window": self.window, "limits": json.dumps(vars(self.limits))})
            pipe.expire(keys["cycles"], self.retention)
            _, cycles, w_now, w_before, current, open_raw = pipe.execute()[:6]
            baseline = self._baseline(server, cycle, cycles)
            pending = [c for (c_id, c_slot), c in self.counts.items() if c_slot >= slot - 1]
            recent = Figures(add(decode(w_now), decode(w_before), *pending))
            this_cycle = Figures(add(decode(current), *[c for (c_id, _), c in self.counts.items() if c_id == cycle]))
            open_events = {k.decode(): json.loads(v) for k, v in open_raw.items()}
            self._judge(server, recent, baseline, open_events, now)
        except REDIS_ERRORS as exc:
            logger.warning("Quality check skipped (Redis unavailable: %s); the next one in %.0fs", exc,
                           self.check_interval)
            return
        self.checks += 1
        self.last_score = score(this_cycle, baseline, self.floors, self.limits.min_items)
        kinds: dict[str, int] = {}
        for event in open_events.values():
            kinds[event.get("kind", "extraction")] = kinds.get(event.get("kind", "extraction"), 0) + 1
        self.crawler.stats.set_value("quality/score", self.last_score)
        self.crawler.signals.send_catch_log(crawlhub_signals.quality_checked, spider=self.spider_name,
                                            score=self.last_score, coverage=this_cycle.coverage(), events=kinds)

    def _baseline(self, server: Any, cycle: str, cycles: list[tuple[bytes, float]]) -> Figures | None:
        """The figures of the cycle before ``cycle`` (read again when it changes and every BASELINE_REREAD checks)."""
        names = [c.decode() for c, _ in cycles]
        previous = names[names.index(cycle) - 1] if cycle in names and names.index(cycle) > 0 else ""
        if not previous:
            self.baseline = ("", None)
        elif previous != self.baseline[0] or self.checks % BASELINE_REREAD == 0:
            self.baseline = (previous, Figures(decode(server.hgetall(self.keys["cycle"] + previous))))
        return self.baseline[1]

    def _judge(self, server: Any, recent: Figures, baseline: Figures | None, open_events: dict[str, dict[str, Any]],
               now: float) -> None:
        holding, healthy = findings(recent, baseline, self.floors, self.limits)
        new = {key: self._event(e["kind"], e["subject"], e["what"], e["why"], now, e.get("baseline"),
                                list(self.examples.get(key, ())), e.get("figure"))
               for key, e in holding.items() if key not in open_events}
        if new:
            pipe = server.pipeline(transaction=False)
            for key, event in new.items():
                pipe.hsetnx(self.keys["events"], key, json.dumps(event))
            self._announce([e for e, won in zip(new.values(), pipe.execute(), strict=True) if won], "opened")
        extraction = set()
        for key in healthy & set(open_events):
            if open_events[key].get("kind", "extraction") == "extraction":
                extraction.add(key)
            else:
                self._close(server, key, open_events[key])
        if extraction:
            self._close_extraction(server, extraction, events=open_events)
