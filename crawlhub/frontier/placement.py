"""Where a partitioned frontier's partitions sit on a Redis Cluster, and moving them so that every master
carries its share (``crawlhub partitions SPIDER --balance``; docs/deploy.md).

A partition is one slot (its hash tag, :func:`crawlhub.frontier.keys.placed_tag`). A cluster created with
equal slot ranges already holds the same number of partitions per master, give or take one; one resharded
by hand, or grown by a master, may not. :func:`plan` picks the fewest partition moves that bring every
master within one partition of the others; :func:`move_slot` moves one slot with its keys, the way
``redis-cli --cluster reshard`` does (SETSLOT IMPORTING / MIGRATING, MIGRATE the keys in batches, SETSLOT
NODE on every master). Workers go on meanwhile: a script call on a slot being moved is answered with
TRYAGAIN or ASK, and the round sends that partition's part again with the next one (docs/frontier.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crawlhub.frontier.keys import Keys, slot_of_tag


@dataclass(frozen=True)
class Move:
    partition: int
    slot: int
    source: str  # host:port of the master that holds it
    target: str


def holders(server: Any, keys: Keys) -> dict[str, list[int]]:
    """Master (host:port) -> the partitions whose slot it holds (every master listed, even with none)."""
    out: dict[str, list[int]] = {node.name: [] for node in server.get_primaries()}
    for p in range(keys.partitions):
        out.setdefault(server.get_node_from_key(keys.part(p).anchor).name, []).append(p)
    return out


def plan(held: dict[str, list[int]], keys: Keys) -> list[Move]:
    """The moves that leave every master within one partition of the others (from the fullest to the emptiest)."""
    held = {node: list(parts) for node, parts in held.items()}
    moves = []
    while held:
        full = max(held, key=lambda n: (len(held[n]), n))
        empty = min(held, key=lambda n: (len(held[n]), n))
        if len(held[full]) - len(held[empty]) <= 1:
            break
        p = held[full].pop()
        held[empty].append(p)
        moves.append(Move(p, slot_of_tag(keys.tag(p)[1:-1]), full, empty))
    return moves


def move_slot(server: Any, slot: int, source: str, target: str, batch: int = 100) -> int:
    """Move ``slot`` and its keys from master ``source`` to master ``target`` (host:port); the keys moved."""
    nodes = {node.name: node for node in server.get_primaries()}
    src, dst = nodes[source], nodes[target]

    def on(node: Any, *args: Any) -> Any:
        return server.execute_command(*args, target_nodes=node)

    src_id, dst_id = _text(on(src, "CLUSTER", "MYID")), _text(on(dst, "CLUSTER", "MYID"))
    on(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
    on(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
    kwargs = server.get_connection_kwargs()
    auth: list[Any] = []
    if kwargs.get("password"):
        auth = ["AUTH2", kwargs.get("username") or "default", kwargs["password"]]
    moved = 0
    while True:
        names = on(src, "CLUSTER", "GETKEYSINSLOT", slot, batch)
        if not names:
            break
        on(src, "MIGRATE", dst.host, dst.port, "", 0, 60000, "REPLACE", *auth, "KEYS", *names)
        moved += len(names)
    on(dst, "CLUSTER", "SETSLOT", slot, "NODE", dst_id)  # the target first: it owns the slot before the others hear
    for node in nodes.values():
        if node is not dst:
            on(node, "CLUSTER", "SETSLOT", slot, "NODE", dst_id)
    server.nodes_manager.initialize()  # this client's slot map: the slot's new owner
    return moved


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
