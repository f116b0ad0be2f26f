"""The frontier's Lua scripts: one job per file in ``lua/`` (package data).

A script's first line may name the helper files it needs, in order::

    --! include _now _helpers _policy

The loader puts them before the script's own text (each file is Lua on its
own, so the helpers are written once and tested with every script that uses
them). Helper files start with an underscore; every other file is a script
a client runs through a :class:`Script` (``Script(server, source(name))``).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis
from redis.cluster import RedisCluster

LUA = Path(__file__).parent / "lua"
INCLUDE = "--! include"


@functools.cache
def source(name: str) -> str:
    """The full text of script ``name`` (``lua/<name>.lua``), its includes first."""
    text = (LUA / f"{name}.lua").read_text(encoding="utf-8")
    first, _, rest = text.partition("\n")
    if not first.startswith(INCLUDE):
        return text
    return "\n".join([*(source(part) for part in first[len(INCLUDE):].split()), rest])


def names() -> list[str]:
    """Every script (not the helpers)."""
    return sorted(p.stem for p in LUA.glob("*.lua") if not p.stem.startswith("_"))


class Script:
    """A Lua script called by its SHA (EVALSHA), like redis-py's ``register_script``, except where it is loaded: a
    node that does not know it (a restarted server, a promoted replica, a first call) gets it loaded there only.
    redis-py's helper loads it on every master of a cluster, each compiling it (about 0.4 ms for the tick), though
    a keyed script runs on its keys' master only. A script without keys runs on any node, so it is loaded on all."""

    def __init__(self, server: redis.Redis, text: str) -> None:
        self.server, self.script = server, text
        self.sha = hashlib.sha1(text.encode("utf-8")).hexdigest()

    def __call__(self, keys: Sequence[Any] = (), args: Sequence[Any] = ()) -> Any:
        try:
            return self.server.evalsha(self.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            return self.load_and_run(keys, args)

    def load_and_run(self, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """Load the script on the node of ``keys`` (every node: no keys), then run it."""
        server = self.server
        if isinstance(server, RedisCluster) and keys:
            server.execute_command("SCRIPT LOAD", self.script, target_nodes=server.get_node_from_key(keys[0]))
        else:
            server.script_load(self.script)
        return server.evalsha(self.sha, len(keys), *keys, *args)
