"""Browser header profiles: every request looks like one real browser, all of it.

Sites block on incoherent headers (a Chrome User-Agent with Firefox's Accept,
client hints from a browser that has none), so a profile is a browser's whole
navigation header set, taken from the browser itself, and a request gets all
of one profile or none of it. The profiles are a data file kept in the repo
(``crawlhub/data/browser_profiles.json``; docs/anti-blocking.md says how to
refresh it): current Chrome, Edge, Firefox and Safari on Windows, macOS and
Linux. (browserforge was checked first: offline, its 1.2.4 generator returned
Chrome for every browser asked for, scrambled the Sec-Fetch-* values and
produced bot user agents, so a checked data file is the honest choice.)

:class:`HeaderProfileMiddleware` (order 395, before Scrapy's default-header and
user-agent middlewares) applies them:

- ``HEADER_PROFILES_POLICY = "rotate"``: a profile per request;
  ``"sticky"``: one profile per proxy (or per domain without proxies), the same
  on every worker (``crawlhub:profiles:sticky`` in Redis).
- ``HEADER_PROFILES_FAMILIES`` / ``HEADER_PROFILES_OS`` narrow the choice;
  ``HEADER_PROFILES_PIN`` (or a spider's ``header_profile`` attribute, or
  ``meta["header_profile"]``) names one profile; ``False`` turns them off.
- Headers the spider set itself win; Sec-Fetch-Site follows the Referer.
- Browser-rendered requests keep Chromium's own headers (coherent by
  construction: PLAYWRIGHT_PROCESS_REQUEST_HEADERS = None) without "Headless" in the
  User-Agent: a profile of another browser on Chromium would be the very
  incoherence this avoids (Chromium sends its client hints itself).
"""

from __future__ import annotations

import functools
import json
import logging
import random
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from scrapy.exceptions import NotConfigured
from scrapy.settings import BaseSettings

from crawlhub import meta
from crawlhub.frontier import keys

logger = logging.getLogger(__name__)

DEFAULT_FILE = Path(__file__).parent / "data" / "browser_profiles.json"
FAMILIES = ("chrome", "edge", "firefox", "safari")
CHROMIUM = frozenset({"chrome", "edge"})
OSES = ("windows", "macos", "linux")
POLICIES = ("rotate", "sticky")  # HEADER_PROFILES_POLICY
STICKY = keys.PROFILES_STICKY  # hash: sticky key (proxy id or domain) -> profile id
APPLIED, PROFILE_META = meta.PROFILE_HEADERS, meta.HEADER_PROFILE  # (crawlhub.meta)

_CLIENT_HINTS = ("sec-ch-ua", "sec-ch-ua-mobile", "sec-ch-ua-platform")
_FETCH = ("sec-fetch-site", "sec-fetch-mode", "sec-fetch-dest")
# what each family sends on a navigation (lower-case names)
REQUIRED = {
    "chrome": {*_CLIENT_HINTS, *_FETCH, "sec-fetch-user", "upgrade-insecure-requests", "user-agent", "accept",
               "accept-encoding", "accept-language"},
    "firefox": {*_FETCH, "sec-fetch-user", "upgrade-insecure-requests", "user-agent", "accept", "accept-encoding",
                "accept-language"},
    "safari": {*_FETCH, "user-agent", "accept", "accept-encoding", "accept-language"},
}
REQUIRED["edge"] = REQUIRED["chrome"]
FORBIDDEN = {"chrome": set(), "edge": set(), "firefox": set(_CLIENT_HINTS), "safari": {*_CLIENT_HINTS, "sec-fetch-user"}}
PLATFORM_HINT = {"windows": '"Windows"', "macos": '"macOS"', "linux": '"Linux"'}
SITES = ("none", "same-origin", "same-site", "cross-site")


class ProfileError(ValueError):
    """A profile file that cannot be used, with the reason."""


@dataclass(frozen=True)
class Profile:
    id: str
    family: str
    os: str
    version: str
    headers: tuple[tuple[str, str], ...]

    def for_request(self, url: str, referer: str | None) -> list[tuple[str, str]]:
        """The profile's headers for a navigation to ``url`` (Sec-Fetch-Site from the Referer)."""
        site = fetch_site(url, referer)
        return [(k, site if k.lower() == "sec-fetch-site" else v) for k, v in self.headers]


def family_of(user_agent: str) -> str:
    """chrome, edge, firefox, safari, or "" for anything else (a bot, a mobile browser...)."""
    if "Firefox/" in user_agent and "Gecko/" in user_agent:
        return "firefox"
    if "Edg/" in user_agent and "Chrome/" in user_agent:
        return "edge"
    if "Chrome/" in user_agent and "Safari/537.36" in user_agent and "compatible;" not in user_agent:
        return "chrome"
    if "Version/" in user_agent and "Safari/" in user_agent and "Chrome/" not in user_agent:
        return "safari"
    return ""


def os_of(user_agent: str) -> str:
    if "Windows NT" in user_agent:
        return "windows"
    if "Macintosh" in user_agent:
        return "macos"
    if "Linux" in user_agent and "Android" not in user_agent:
        return "linux"
    return ""


def _major(text: str, marker: str) -> str:
    _, found, rest = text.partition(marker)
    return rest.split(".", 1)[0].split(" ", 1)[0] if found else ""


def incoherence(headers: Mapping[str, str] | Iterable[tuple[str, str]] | Iterable[list[str]]) -> list[str]:
    """What is wrong with a header set as one browser's navigation ([] = coherent).

    ``headers``: (name, value) pairs or a dict. Checks the User-Agent's family
    and OS against the client hints, the Accept header's family, the headers the
    family always or never sends, and the Sec-Fetch-* values.
    """
    pairs = list(headers.items()) if isinstance(headers, Mapping) else [tuple(pair) for pair in headers]
    h = {str(k).lower(): str(v) for k, v in pairs}
    ua = h.get("user-agent", "")
    family, os_ = family_of(ua), os_of(ua)
    if not family:
        return [f"User-Agent is not a known desktop browser: {ua[:120]!r}"]
    problems = [f"{family} always sends {name}" for name in sorted(REQUIRED[family] - h.keys())]
    problems += [f"{family} never sends {name}" for name in sorted(FORBIDDEN[family] & h.keys())]
    accept = h.get("accept", "")
    chromium_accept = "application/signed-exchange" in accept and "image/apng" in accept
    if family in CHROMIUM and not chromium_accept:
        problems.append(f"Accept is not {family}'s: {accept!r}")
    if family not in CHROMIUM and (chromium_accept or "image/avif" in accept):
        problems.append(f"Accept is Chromium's, not {family}'s: {accept!r}")
    if family in CHROMIUM:
        version = _major(ua, "Chrome/")
        hints = h.get("sec-ch-ua", "")
        brands = {b: v for b, v in re.findall(r'"([^"]+)";v="(\d+)"', hints) if not b.startswith("Not")}
        # Chrome names itself and Chromium, Edge likewise; a plain Chromium build names Chromium alone
        allowed = [{"Chromium", "Google Chrome"}, {"Chromium"}] if family == "chrome" else [{"Chromium", "Microsoft Edge"}]
        if set(brands) not in allowed or any(v != version for v in brands.values()):
            problems.append(f"sec-ch-ua {hints!r} does not match {family} {version} of the User-Agent")
        if family == "edge" and _major(ua, "Edg/") != version:
            problems.append("Edg/ and Chrome/ versions differ")
        if os_ and h.get("sec-ch-ua-platform") != PLATFORM_HINT[os_]:
            problems.append(f"sec-ch-ua-platform {h.get('sec-ch-ua-platform')!r} is not the User-Agent's {os_}")
        if h.get("sec-ch-ua-mobile", "?0") != "?0":
            problems.append("a desktop User-Agent with sec-ch-ua-mobile ?1")
    if family == "firefox" and _major(ua, "rv:") != _major(ua, "Firefox/"):
        problems.append("Firefox's rv: and Firefox/ versions differ")
    if family == "safari" and os_ != "macos":
        problems.append("Safari outside macOS")
    if "sec-fetch-mode" in h and h["sec-fetch-mode"] != "navigate":
        problems.append(f"Sec-Fetch-Mode {h['sec-fetch-mode']!r} on a navigation")
    if "sec-fetch-dest" in h and h["sec-fetch-dest"] != "document":
        problems.append(f"Sec-Fetch-Dest {h['sec-fetch-dest']!r} on a navigation")
    if "sec-fetch-site" in h and h["sec-fetch-site"] not in SITES:
        problems.append(f"Sec-Fetch-Site {h['sec-fetch-site']!r} is not one of {', '.join(SITES)}")
    if "sec-fetch-user" in h and h["sec-fetch-user"] != "?1":
        problems.append(f"Sec-Fetch-User {h['sec-fetch-user']!r}")
    return problems


@functools.cache
def _extractor() -> Any:
    import tldextract  # Scrapy's own dependency: its bundled suffix list, never fetched

    return tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)


@functools.lru_cache(maxsize=4096)
def _site_of(host: str) -> str:
    """The registrable domain (example.co.uk), or the host itself for IPs and single labels."""
    if not host or host.replace(".", "").isdigit() or ":" in host or "." not in host:
        return host
    return _extractor()(host).top_domain_under_public_suffix or host


def fetch_site(url: str, referer: str | None) -> str:
    """Sec-Fetch-Site for a navigation from ``referer`` (none: typed in, as a seed is)."""
    if not referer:
        return "none"
    a, b = urlsplit(referer), urlsplit(url)
    if (a.scheme, a.hostname, a.port) == (b.scheme, b.hostname, b.port):
        return "same-origin"
    same_site = a.scheme == b.scheme and _site_of(a.hostname or "") == _site_of(b.hostname or "")
    return "same-site" if same_site else "cross-site"


def load_profiles(path: str | Path | None = None) -> list[Profile]:
    """The profiles of a file (default: the bundled one), each checked; a bad file is a ProfileError."""
    path = Path(path) if path else DEFAULT_FILE
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ProfileError(f"header profiles {path}: {exc}") from None
    entries = doc.get("profiles") if isinstance(doc, dict) else doc
    if not isinstance(entries, list) or not entries:
        raise ProfileError(f"header profiles {path}: expected a non-empty list under 'profiles'")
    profiles, seen = [], set()
    for n, e in enumerate(entries):
        where = f"header profiles {path}, profile {n} ({e.get('id', '?') if isinstance(e, dict) else '?'})"
        try:
            profile = Profile(str(e["id"]), e["family"], e["os"], str(e["version"]),
                              tuple((str(k), str(v)) for k, v in e["headers"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ProfileError(f"{where}: malformed ({exc!r})") from None
        problems = incoherence(profile.headers)
        ua = {k.lower(): v for k, v in profile.headers}.get("user-agent", "")
        if family_of(ua) != profile.family:
            problems.append(f"family {profile.family!r} but the User-Agent is {family_of(ua) or 'unknown'}")
        if os_of(ua) != profile.os:
            problems.append(f"os {profile.os!r} but the User-Agent is {os_of(ua) or 'unknown'}")
        if profile.id in seen:
            problems.append("duplicate id")
        if problems:
            raise ProfileError(f"{where}: " + "; ".join(problems))
        seen.add(profile.id)
        profiles.append(profile)
    return profiles


class ProfileBook:
    """The profiles a spider may use, and how it picks one."""

    def __init__(self, profiles: list[Profile], policy: str = "rotate", rng: random.Random | None = None) -> None:
        if policy not in POLICIES:
            raise NotConfigured(f"HEADER_PROFILES_POLICY must be {' or '.join(map(repr, POLICIES))}, not {policy!r}")
        if not profiles:
            raise NotConfigured("no header profile matches HEADER_PROFILES_FAMILIES / HEADER_PROFILES_OS")
        self.profiles = profiles
        self.by_id = {p.id: p for p in profiles}
        self.policy = policy
        self.rng = rng or random.Random()

    @classmethod
    def from_settings(cls, settings: BaseSettings, all_profiles: list[Profile] | None = None) -> ProfileBook:
        profiles = all_profiles if all_profiles is not None else load_profiles(settings.get("HEADER_PROFILES_FILE") or None)
        families = [f.lower() for f in settings.getlist("HEADER_PROFILES_FAMILIES")] or list(FAMILIES)
        oses = [o.lower() for o in settings.getlist("HEADER_PROFILES_OS")] or list(OSES)
        for name, given, known in (("HEADER_PROFILES_FAMILIES", families, FAMILIES), ("HEADER_PROFILES_OS", oses, OSES)):
            unknown = sorted(set(given) - set(known))
            if unknown:
                raise NotConfigured(f"{name}: unknown {unknown}; choose from {', '.join(known)}")
        chosen = [p for p in profiles if p.family in families and p.os in oses]
        return cls(chosen, settings.get("HEADER_PROFILES_POLICY") or "rotate")

    def pick(self) -> Profile:
        return self.rng.choice(self.profiles)


def profile_entry(headers: list[tuple[str, str]]) -> dict[str, Any]:
    """A profile file entry from a real browser's navigation headers (Host, Connection, Cookie dropped)."""
    kept = [[k, v] for k, v in headers if k.lower() not in ("host", "connection", "cookie", "referer", "priority",
                                                             "cache-control", "pragma", "dnt")]
    ua = {k.lower(): v for k, v in kept}.get("user-agent", "")
    family, os_ = family_of(ua), os_of(ua)
    version = _major(ua, {"firefox": "Firefox/", "edge": "Edg/", "safari": "Version/"}.get(family, "Chrome/"))
    return {"id": f"{family or 'unknown'}-{version}-{os_ or 'unknown'}", "family": family, "os": os_,
            "version": version, "headers": kept, "problems": incoherence(kept)}


def capture_profiles(port: int, count: int = 1) -> Iterator[dict[str, Any]]:
    """Serve 127.0.0.1:port and yield a profile entry for each top-level navigation a browser makes."""
    from http.server import BaseHTTPRequestHandler, HTTPServer

    captured: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            if self.headers.get("Sec-Fetch-Dest", "document") == "document" and self.path != "/favicon.ico":
                captured.append(profile_entry(list(self.headers.items())))
            body = b"<html><body>captured: close this tab</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    with HTTPServer(("127.0.0.1", port), Handler) as server:
        remaining = count
        while remaining > 0:
            server.handle_request()
            while captured and remaining > 0:
                remaining -= 1
                yield captured.pop(0)
