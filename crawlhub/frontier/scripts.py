"""The frontier's Lua scripts: one job per file in ``lua/`` (package data).

A script's first line may name the helper files it needs, in order::

    --! include _now _helpers _policy

The loader puts them before the script's own text (each file is Lua on its
own, so the helpers are written once and tested with every script that uses
them). Helper files start with an underscore; every other file is a script
a client registers with ``server.register_script(source(name))``.
"""

from __future__ import annotations

import functools
from pathlib import Path

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
