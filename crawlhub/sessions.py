"""Sessions shared by the cluster: a cookie jar bound to a proxy and a header profile (and so to the TLS target
the impersonate rung derives from that profile), kept in Redis so that any worker continues any session.

Keys of spider ``s`` (one hash tag, one slot on a Redis Cluster):

* ``s:{s}:sessions``: hash, session id (``<n>-<time>``: never the id of a session before a reset) -> JSON ``{id, state, proxy, profile, created, uses, gen, logins, by,
  lock_until, ver, bans}``. ``state``: ``login`` (its login is to be done: new, or the site expired it),
  ``logging`` (a worker logs it in, ``by``, until ``lock_until``), ``ready``. A retired session is deleted.
* ``s:{s}:sessions:c:<id>``: hash, ``domain TAB path TAB name`` -> the cookie as JSON (every attribute of
  :class:`http.cookiejar.Cookie`). ``ver`` in the session counts its writes.
* ``s:{s}:sessions:stats``: hash of counters (created, retired, logins, login_failures, failing: failed logins
  in a row, and failed_at: the last one's time) and ``why`` (the last retirement's reason); ``crawlhub status``
  shows them.

Every change goes through :data:`SCRIPT` (one call: a request's use of its session, a response's cookies, a
login claimed or done, an expiry, a retirement). The middlewares that use it are in
:mod:`crawlhub.downloadermiddlewares.sessions`; docs/anti-blocking.md ("Sessions") says what a spider writes.

Consistency: a response's cookies are written to Redis before the response reaches its callback, and every
request reads its session's cookies (when their version changed) as it goes out; so a request made after a
response was handled, in any worker, carries that response's cookies (read-your-writes within a session).
Requests of one session already in flight when a cookie changes go out with the cookies they read.
"""

from __future__ import annotations

import http.cookiejar
import json
from dataclasses import dataclass, field
from typing import Any

import redis

from crawlhub.frontier.keys import spider_keys
from crawlhub.frontier.records import text

LOGIN, LOGGING, READY = "login", "logging", "ready"
COOKIE_FIELDS = ("version", "name", "value", "port", "port_specified", "domain", "domain_specified",
                 "domain_initial_dot", "path", "path_specified", "secure", "expires", "discard", "comment",
                 "comment_url", "rfc2109")


@dataclass(frozen=True)
class SessionKeys:
    """A spider's session keys (named once: a worker uses them on every request)."""

    pool: str

    @classmethod
    def of(cls, spider: str) -> SessionKeys:
        return cls(spider_keys(spider).sessions)

    @property
    def stats(self) -> str:
        return f"{self.pool}:stats"

    def cookies(self, session_id: str) -> str:
        return f"{self.pool}:c:{session_id}"


def pool_key(spider: str) -> str:
    return SessionKeys.of(spider).pool


def cookies_key(spider: str, session_id: str) -> str:
    return SessionKeys.of(spider).cookies(session_id)


def stats_key(spider: str) -> str:
    return SessionKeys.of(spider).stats


def cookie_field(cookie: http.cookiejar.Cookie) -> str:
    return f"{cookie.domain}\t{cookie.path}\t{cookie.name}"


def cookie_to_json(cookie: http.cookiejar.Cookie) -> str:
    data = {name: getattr(cookie, name) for name in COOKIE_FIELDS}
    data["rest"] = dict(getattr(cookie, "_rest", {}))  # (HttpOnly, SameSite: the stdlib keeps them only there)
    return json.dumps(data, sort_keys=True)


def cookie_from_json(raw: str | bytes) -> http.cookiejar.Cookie:
    data = json.loads(raw)
    return http.cookiejar.Cookie(**{name: data.get(name) for name in COOKIE_FIELDS}, rest=data.get("rest") or {})


def jar_snapshot(jar: http.cookiejar.CookieJar) -> dict[str, str]:
    """Each cookie of ``jar`` as its field and JSON (what Redis holds for the session)."""
    return {cookie_field(c): cookie_to_json(c) for c in jar}


def fill_jar(jar: http.cookiejar.CookieJar, cookies: dict[Any, Any]) -> None:
    """Replace what ``jar`` holds by ``cookies`` (field -> JSON, as Redis returns them)."""
    jar.clear()
    for raw in cookies.values():
        try:
            jar.set_cookie(cookie_from_json(raw))
        except (ValueError, TypeError):
            continue  # (a value written by hand that is not a cookie: left out)


@dataclass
class SessionState:
    """A session as the cluster has it (the script's JSON)."""

    id: str
    state: str
    proxy: str = ""
    profile: str = ""
    created: float = 0.0
    uses: int = 0
    gen: int = 0
    logins: int = 0
    ver: int = 0
    by: str = ""
    lock_until: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, raw: str | bytes) -> SessionState:
        data = json.loads(raw)
        known = {k: data.pop(k) for k in list(data) if k in cls.__dataclass_fields__ and k != "extra"}
        return cls(**known, extra=data)


SCRIPT = """-- Sessions shared by the cluster (crawlhub.sessions).
-- KEYS[1]: the pool hash (id -> JSON); KEYS[2]: the counters; KEYS[3]: the session's cookies (ops on one session).
-- ARGV[1]: op, ARGV[2]: now; then per op:
--   'pool'    size, max_age, max_uses, first state, proxy, profiles: ends sessions past their age or uses; if
--             fewer than size are live, creates one, bound to that proxy and to the first of the profiles
--             (ids one a line, the worker's choice first) that no live session has (else the first), so that
--             the sessions of a pool show browsers of their own. Returns the live ones.
--   'use'     id, known ver, max_age, max_uses, count ('1': a request's use): the session (counted, or ended
--             past its age or uses: ''), its cookies when ver differs from known ver.
--   'claim'   id, worker, timeout: the worker takes its login (state login, or logging past lock_until).
--   'logged'  id, worker, '1' ok / '0' failed, why: ready (a new generation), or retired (then: failed logins
--             in a row).
--   'cookies' id, JSON {field: cookie} to set, JSON [field] to delete, ttl: the new ver (0: no such session).
--   'expire'  id, gen: the site ended the session's generation gen: it logs in again (once per generation).
--   'retire'  id, why, 'ban' or '': deletes the session and its cookies.
local op, now = ARGV[1], tonumber(ARGV[2])
local function get(id)
  local raw = redis.call('HGET', KEYS[1], id)
  return raw and cjson.decode(raw) or nil
end
local function put(s) local raw = cjson.encode(s); redis.call('HSET', KEYS[1], s.id, raw); return raw end
local function retire(id, why, cookies)
  redis.call('HDEL', KEYS[1], id)
  if cookies then redis.call('DEL', cookies) end
  redis.call('HINCRBY', KEYS[2], 'retired', 1)
  redis.call('HSET', KEYS[2], 'why', why)
end
local function spent(s, max_age, max_uses)
  if max_uses > 0 and s.uses >= max_uses then return 'used ' .. s.uses .. ' times' end
  if max_age > 0 and now - s.created >= max_age then return 'older than ' .. max_age .. ' s' end
  return nil
end
if op == 'pool' then
  local size, max_age, max_uses = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
  local live, used = {}, {}
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    local s = cjson.decode(all[i + 1])
    local why = spent(s, max_age, max_uses)
    if why then retire(s.id, why, KEYS[1] .. ':c:' .. s.id) else live[#live + 1] = all[i + 1]; used[s.profile or ''] = true end
  end
  local created = ''
  if #live < size then
    local profile
    for candidate in string.gmatch(ARGV[8], '[^\\n]+') do
      if not used[candidate] then profile = candidate; break end
    end
    profile = profile or string.match(ARGV[8], '[^\\n]*')
    -- (the time in the id: a session made after `crawlhub reset` never takes the id of one a worker still knows)
    local id = string.format('%d-%x', redis.call('HINCRBY', KEYS[2], 'created', 1), math.floor(now * 1000) % 16777216)
    live[#live + 1] = put({id = id, state = ARGV[6], proxy = ARGV[7], profile = profile, created = now, uses = 0,
                           gen = 0, logins = 0, ver = 0, by = '', lock_until = 0, bans = 0})
    created = id
  end
  return {created, live}
end
local id = ARGV[3]
local s = get(id)
if op == 'use' then
  if not s then return {'', false} end
  local why = spent(s, tonumber(ARGV[5]), tonumber(ARGV[6]))
  if why then retire(id, why, KEYS[3]); return {'', false} end
  if ARGV[7] == '1' then s.uses = s.uses + 1 end
  local raw = ARGV[7] == '1' and put(s) or cjson.encode(s)
  if tostring(s.ver) == ARGV[4] then return {raw, false} end
  return {raw, redis.call('HGETALL', KEYS[3])}
end
if op == 'cookies' then
  if not s then return 0 end
  local sets, dels = cjson.decode(ARGV[4]), cjson.decode(ARGV[5])
  for f, v in pairs(sets) do redis.call('HSET', KEYS[3], f, v) end
  for _, f in ipairs(dels) do redis.call('HDEL', KEYS[3], f) end
  if tonumber(ARGV[6]) > 0 then redis.call('EXPIRE', KEYS[3], tonumber(ARGV[6])) end
  s.ver = s.ver + 1
  put(s)
  return s.ver
end
if not s then return {'', 0} end
if op == 'claim' then
  if s.state == 'login' or (s.state == 'logging' and tonumber(s.lock_until) <= now) then
    s.state, s.by, s.lock_until = 'logging', ARGV[4], now + tonumber(ARGV[5])
    return {put(s), 1}
  end
  return {cjson.encode(s), 0}
end
if op == 'logged' then
  if s.state ~= 'logging' or s.by ~= ARGV[4] then return {cjson.encode(s), 0} end
  if ARGV[5] == '1' then
    s.state, s.by, s.lock_until, s.gen, s.logins = 'ready', '', 0, s.gen + 1, s.logins + 1
    redis.call('HINCRBY', KEYS[2], 'logins', 1)
    redis.call('HSET', KEYS[2], 'failing', 0)
    return {put(s), 0}
  end
  redis.call('HINCRBY', KEYS[2], 'login_failures', 1)
  local failing = redis.call('HINCRBY', KEYS[2], 'failing', 1)
  redis.call('HSET', KEYS[2], 'failed_at', now)
  retire(id, 'login failed: ' .. ARGV[6], KEYS[3])
  return {'', failing}
end
if op == 'expire' then
  if s.state ~= 'ready' or tostring(s.gen) ~= ARGV[4] then return {cjson.encode(s), 0} end
  s.state = 'login'
  redis.call('HINCRBY', KEYS[2], 'expired', 1)
  return {put(s), 1}
end
if op == 'retire' then
  if ARGV[5] == 'ban' then redis.call('HINCRBY', KEYS[2], 'banned', 1) end
  retire(id, ARGV[4], KEYS[3])
  return {'', 1}
end
return redis.error_reply('crawlhub.sessions: unknown op ' .. tostring(op))
"""


def read_sessions(server: redis.Redis, spider: str) -> dict[str, Any]:
    """The pool as ``crawlhub status`` shows it: live sessions by state, and the counters."""
    pipe = server.pipeline(transaction=False)
    pipe.hgetall(pool_key(spider))
    pipe.hgetall(stats_key(spider))
    pool, stats = pipe.execute()
    sessions = []
    for raw in (pool or {}).values():
        try:
            sessions.append(json.loads(raw))
        except ValueError:
            continue
    counters = {text(k): text(v) for k, v in (stats or {}).items()}
    return {"sessions": sorted(sessions, key=lambda s: float(s.get("created", 0))), "counters": counters}


def format_sessions(data: dict[str, Any]) -> list[str]:
    """``crawlhub status``'s lines (none when the spider has no sessions)."""
    sessions, counters = data.get("sessions") or [], data.get("counters") or {}
    if not sessions and not counters:
        return []
    states: dict[str, int] = {}
    for s in sessions:
        states[s.get("state", "?")] = states.get(s.get("state", "?"), 0) + 1
    live = ", ".join(f"{n} {state}" for state, n in sorted(states.items())) or "none"
    lines = [f"sessions: {live}; created {counters.get('created', 0)}, logins {counters.get('logins', 0)}, "
             f"expired {counters.get('expired', 0)}, retired {counters.get('retired', 0)} "
             f"(banned {counters.get('banned', 0)}, failed logins {counters.get('login_failures', 0)})"]
    if counters.get("why"):
        lines.append(f"  last retired: {counters['why']}")
    if int(counters.get("failing", 0) or 0):
        lines.append(f"  logins failing: {counters['failing']} in a row")
    return lines
