"""RevisitPolicy: when a page is due again.

A spider declares it (one-shot, today's behaviour, when it declares nothing)::

    revisit = "24h"                                  # every page, once a day
    revisit_rules = {r"/shop/page/": "6h", r"/product/": "1d"}  # first matching regex wins
    revisit_min, revisit_max = "10m", "30d"           # bounds of the adaptive schedule
    revisit_gone_delay = "10m"                        # an item missing from its page's revisit: gone after this

and a request may say ``meta={"revisit": "2h"}`` (or ``False``: never again).

The schedule adapts as Nutch's AdaptiveFetchSchedule does: a page found
unchanged (304, or the same body) waits ``1 + REVISIT_INC_RATE`` times longer
next time, a changed page ``1 - REVISIT_DEC_RATE`` times as long, always
within the bounds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from scrapy.settings import BaseSettings

from crawlhub import meta

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|hour|d|day|w|week)?s?\s*$", re.I)
_UNIT = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hour": 3600, "d": 86400, "day": 86400,
         "w": 604800, "week": 604800}


class BadDuration(ValueError):
    pass


def parse_duration(value: object) -> float:
    """Seconds from 90, "90s", "15m", "6h", "1d", "2w"."""
    if isinstance(value, bool):
        raise BadDuration(f"bad duration {value!r}: write it as 90, 90s, 15m, 6h, 1d or 2w")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        m = _DURATION.match(str(value))
        if not m:
            raise BadDuration(f"bad duration {value!r}: write it as 90, 90s, 15m, 6h, 1d or 2w")
        seconds = float(m[1]) * _UNIT[(m[2] or "s").lower()]
    if seconds <= 0:
        raise BadDuration(f"bad duration {value!r}: must be more than 0")
    return seconds


def _delay(own: object, setting: object, spider: str) -> float:
    """REVISIT_GONE_DELAY (a spider's ``revisit_gone_delay`` wins): a duration, or 0 for none."""
    value, what = (own, "revisit_gone_delay") if own is not None else (setting, "REVISIT_GONE_DELAY")
    if value in (0, "0", "", None):
        return 0.0
    try:
        return parse_duration(value)
    except BadDuration as exc:
        raise BadDuration(f"spider {spider}: {what}: {exc} (or 0: marked gone at the revisit that misses it)") from None


@dataclass(frozen=True)
class RevisitPolicy:
    default: float | None = None  # seconds; None: crawl once
    rules: tuple[tuple[re.Pattern[str], float], ...] = ()
    minimum: float = 60.0
    maximum: float = 30 * 86400.0
    inc_rate: float = 0.2
    dec_rate: float = 0.2
    # seconds an item missing from its page's revisit waits (``missing_since``, ``gone_due``) before it is marked
    # gone, so that an item moved to another page is seen there first; 0: marked at that revisit
    gone_delay: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def for_spider(cls, spider: object, settings: BaseSettings) -> RevisitPolicy:
        name = getattr(spider, "name", "?")

        def duration(value: object, what: str) -> float:
            try:
                return parse_duration(value)
            except BadDuration as exc:
                raise BadDuration(f"spider {name}: {what}: {exc}") from None

        default = getattr(spider, "revisit", None)
        rules = getattr(spider, "revisit_rules", None) or {}
        minimum = getattr(spider, "revisit_min", None) or settings.get("REVISIT_MIN_INTERVAL", 60)
        maximum = getattr(spider, "revisit_max", None) or settings.get("REVISIT_MAX_INTERVAL", 30 * 86400)
        try:
            compiled = tuple((re.compile(pattern), duration(value, f"revisit_rules[{pattern!r}]"))
                             for pattern, value in dict(rules).items())
        except re.error as exc:
            raise BadDuration(f"spider {name}: revisit_rules: bad pattern: {exc}") from None
        policy = cls(
            default=duration(default, "revisit") if default is not None else None,
            rules=compiled, minimum=duration(minimum, "revisit_min"), maximum=duration(maximum, "revisit_max"),
            inc_rate=settings.getfloat("REVISIT_INC_RATE", 0.2), dec_rate=settings.getfloat("REVISIT_DEC_RATE", 0.2),
            gone_delay=_delay(getattr(spider, "revisit_gone_delay", None), settings.get("REVISIT_GONE_DELAY", 0), name),
        )
        if policy.minimum > policy.maximum:
            raise BadDuration(f"spider {name}: revisit_min ({policy.minimum:g}s) is more than revisit_max ({policy.maximum:g}s)")
        return policy

    @property
    def enabled(self) -> bool:
        """Whether any page of this spider is ever revisited (else the crawl is one-shot, as before)."""
        return self.default is not None or bool(self.rules)

    def interval_for(self, url: str, request_meta: dict[str, Any] | None = None) -> float | None:
        """The first interval of a page (seconds), or None: never revisited."""
        wanted = (request_meta or {}).get(meta.REVISIT)
        if wanted is False:
            return None
        if wanted is not None:
            return self.bound(parse_duration(wanted))
        for pattern, seconds in self.rules:
            if pattern.search(url):
                return self.bound(seconds)
        return self.bound(self.default) if self.default is not None else None

    def bound(self, seconds: float) -> float:
        return min(self.maximum, max(self.minimum, seconds))

    def adapt(self, interval: float, changed: bool | None) -> float:
        """The next interval: longer when unchanged, shorter when changed (None: first fetch, as declared)."""
        if changed is None:
            return self.bound(interval)
        return self.bound(interval * (1 - self.dec_rate) if changed else interval * (1 + self.inc_rate))
