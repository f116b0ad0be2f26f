"""Sites that keep their visitors in sessions, as the session tests need them (a LocalSite ``handler``).

:class:`VisitorSite`: the home page hands out a ``visitor`` cookie (as an anti-bot service's first visit does);
every other page demands a valid one and answers 403 without. :class:`MembersSite`: a login form with a CSRF
token bound to a pre-login cookie; a POST with the right user, password and token starts a session (cookie
``sid``); every other page demands a live session and redirects to the login form without one. ``expire_all``
ends every session, as a site does when it logs its users out.

Both count what a test checks at the server: the cookies issued (the logins), and each page request with the
session it carried (``hits``: path, the session id or '' for none, whether it was valid).
"""

from __future__ import annotations

import html
import secrets
import threading
import time
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from urllib.parse import parse_qs

from tests.sites.server import LocalSite


def cookies_of(site: LocalSite) -> dict[str, str]:
    jar = SimpleCookie()
    jar.load(site.request_header("Cookie"))
    return {k: v.value for k, v in jar.items()}


def catalog(pages: int, per_list: int = 10) -> dict[str, str]:
    """Paths -> body of list pages (each linking its items and the next list) and item pages."""
    out = {}
    lists = (pages + per_list - 1) // per_list
    for k in range(lists):
        items = range(k * per_list, min(pages, (k + 1) * per_list))
        links = "".join(f'<li><a href="/item/{n}">Item {n}</a></li>' for n in items)
        nxt = f'<a href="/list/{k + 1}">next</a>' if k + 1 < lists else ""
        out[f"/list/{k}"] = f"<title>List {k}</title><ul>{links}</ul>{nxt}"
        for n in items:
            out[f"/item/{n}"] = f"<title>Item {n}</title><h1>Item {n}</h1>"
    return out


@dataclass
class SessionHit:
    path: str
    session: str  # the session cookie's value ('' = none sent)
    valid: bool
    at: float


@dataclass
class _Base:
    pages: int = 40
    issued: list[str] = field(default_factory=list)  # session cookies handed out, in order
    hits: list[SessionHit] = field(default_factory=list)  # page requests (not the login's own)

    def __post_init__(self):
        self.lock = threading.Lock()
        self.content = catalog(self.pages)
        self.live: set[str] = set()

    def page(self, path: str, user: str = "") -> tuple[int, str, str, dict] | None:
        body = self.content.get(path)
        if body is None:
            return None
        who = f'<p class="user">{html.escape(user)}</p><a href="/logout">Log out</a>' if user else ""
        return 200, "text/html; charset=utf-8", f"<html><body>{body}{who}</body></html>", {}

    def invalid_hits(self) -> list[SessionHit]:
        with self.lock:
            return [h for h in self.hits if not h.valid]


@dataclass
class VisitorSite(_Base):
    """``/`` sets ``visitor``; the rest demand it (403 without)."""

    cookie: str = "visitor"

    def __call__(self, site: LocalSite, path: str):
        have = cookies_of(site).get(self.cookie, "")
        with self.lock:
            valid = have in self.live
            if path == "/":
                headers = {}
                if not valid:
                    have = secrets.token_hex(8)
                    self.live.add(have)
                    self.issued.append(have)
                    headers = {"Set-Cookie": f"{self.cookie}={have}; Path=/; HttpOnly"}
                return 200, "text/html", '<html><body><a href="/list/0">catalog</a></body></html>', headers
            if path not in self.content:
                return None
            self.hits.append(SessionHit(path, have, valid, time.time()))
        if not valid:
            return 403, "text/html", "<html><body>Please enable cookies</body></html>", {}
        return self.page(path)


@dataclass
class MembersSite(_Base):
    """A login form with a CSRF token; pages for members only (302 to the form without a live session)."""

    user: str = "alice"
    password: str = "s3cret"
    login_forms: int = 0  # GETs of /login itself (a login's first step)
    sent_to_login: int = 0  # GETs of /login?next=... (a page whose session had ended, redirected to the form)
    failed_logins: int = 0
    expire_after: int = 0  # log everybody out once, when this many pages were served to members (0: never)
    slow_logins: int = 0  # the first this many login POSTs take login_delay seconds (a worker can die meanwhile)
    login_delay: float = 0.0
    login_posts: int = 0  # POSTs to /login received (counted as they arrive)
    expired_at: float = 0.0  # when it did

    def __post_init__(self):
        super().__post_init__()
        self.tokens: dict[str, str] = {}  # pre-login cookie -> the CSRF token its form carried

    def expire_all(self) -> int:
        """Log everybody out (the sessions they hold stop working); how many were live."""
        with self.lock:
            n = len(self.live)
            self.live.clear()
            return n

    def __call__(self, site: LocalSite, path: str):
        cookies = cookies_of(site)
        if path.startswith("/login"):
            return self._login(site, cookies, path)
        sid = cookies.get("sid", "")
        with self.lock:
            valid = sid in self.live
            if path in self.content:
                self.hits.append(SessionHit(path, sid, valid, time.time()))
                if valid and self.expire_after and not self.expired_at and \
                        sum(h.valid for h in self.hits) >= self.expire_after:
                    self.live.clear()  # (this page is still served: its session ended as it was answered)
                    self.expired_at = time.time()
        if path not in self.content:
            return None
        if not valid:
            return 302, "text/html", "", {"Location": f"/login?next={path}"}
        return self.page(path, self.user)

    def _login(self, site: LocalSite, cookies: dict[str, str], path: str):
        if site.request_method() != "POST":
            pre, token = secrets.token_hex(8), secrets.token_hex(16)
            with self.lock:
                if "?" in path:
                    self.sent_to_login += 1
                else:
                    self.login_forms += 1
                self.tokens[pre] = token
            form = (f'<html><body><form method="post" action="/login">'
                    f'<input type="hidden" name="csrf" value="{token}">'
                    f'<input name="user"><input name="password" type="password">'
                    f'<button type="submit">Log in</button></form></body></html>')
            return 200, "text/html", form, {"Set-Cookie": f"pre={pre}; Path=/"}
        form = {k: v[0] for k, v in parse_qs(site.request_body().decode()).items()}
        with self.lock:
            self.login_posts += 1
            slow = self.login_posts <= self.slow_logins
        if slow:
            time.sleep(self.login_delay)
        with self.lock:
            expected = self.tokens.pop(cookies.get("pre", ""), None)
            ok = (expected is not None and form.get("csrf") == expected and form.get("user") == self.user
                  and form.get("password") == self.password)
            if not ok:
                self.failed_logins += 1
                return 403, "text/html", "<html><body>Wrong user, password or form</body></html>", {}
            sid = secrets.token_hex(8)
            self.live.add(sid)
            self.issued.append(sid)
        return 200, "text/html", f'<html><body>Welcome {self.user} <a href="/logout">Log out</a></body></html>', {
            "Set-Cookie": f"sid={sid}; Path=/; HttpOnly"}
