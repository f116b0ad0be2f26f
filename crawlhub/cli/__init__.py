"""The ``crawlhub`` command: watch and steer a crawl, manage the embedded servers.

Run it from the project directory (it reads the project's settings, so
REDIS_URL / MONGO_URI and the rest apply as they do to ``scrapy crawl``).
One module per command group, each thin over the functions that hold the
logic (crawlhub.monitor, crawlhub.frontier.control, crawlhub.frontier.politeness,
crawlhub.proxies, crawlhub.profiles, crawlhub.services):

    services.py       services up | down | status
    watch.py          status, health, log, report
    control.py        seed, bad-seeds, pause, resume, budget, reset
    dlq.py            dlq list | show | requeue | purge
    quarantine.py     quarantine list | show | requeue | purge (items that broke their type's contract)
    limits.py         limits set | clear | show
    partitions.py     partitions (a partitioned frontier, partition by partition)
    revisit.py        recrawl, schedule (continuous crawling)
    export.py         export (stored items to jsonl, json, csv, xml)
    store.py          canonicalize-keys (stored documents moved to their key URL's canonical form)
    ui.py             ui (the crawl in a browser, live: crawlhub.ui)
    antiblocking.py   proxies [reset], profiles list | check | capture
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import click

from crawlhub.cli._common import BadInput

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["known_spiders", "main", "spider_keys"]

# Each command and the module attribute that holds it (the one list of the commands), imported when the command
# runs: `crawlhub seed` does not load the store's driver, the web UI's server or the export's writers (with the
# spider's settings read lighter, 0.35 s of the command's 1.3 s of CPU, which every call from a script or a health
# check paid). `--help` and the ``commands`` mapping load them all.
COMMANDS: dict[str, str] = {
    "services": "services:group",
    **{name: f"watch:{name}" for name in ("status", "health", "log", "report")},
    "seed": "control:seed", "bad-seeds": "control:bad_seeds", "pause": "control:pause", "resume": "control:resume",
    "budget": "control:budget", "reset": "control:reset",
    "quality": "quality:quality",
    "recrawl": "revisit:recrawl", "schedule": "revisit:schedule",
    "export": "export:export_command", "canonicalize-keys": "store:canonicalize_keys",
    "ui": "ui:ui",
    "proxies": "antiblocking:proxies", "profiles": "antiblocking:profiles",
    "dlq": "dlq:group", "quarantine": "quarantine:group", "limits": "limits:group", "partitions": "partitions:partitions",
}


def _load(name: str) -> click.Command:
    module, attribute = COMMANDS[name].split(":")
    command: click.Command = getattr(importlib.import_module(f"crawlhub.cli.{module}"), attribute)
    return command


class Commands(click.Group):
    """The command group; what no command catches of a bad set-up ends as one line, wherever it was found:
    no project here, a malformed REDIS_URL or MONGO_URI (exit code 2), an embedded server that cannot start (3);
    a reader that closed standard output (``| head``) ends any command quietly with 0.
    Its commands are imported when one runs (``COMMANDS``)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.added})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.added:
            return self.added[cmd_name]
        return _load(cmd_name) if cmd_name in COMMANDS else None

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        """A command added at run time (a project's own, a plugin's), beside the listed ones."""
        name = name or cmd.name
        if name is None:
            raise TypeError("a command needs a name")
        self.added[name] = cmd

    @property  # type: ignore[override]
    def commands(self) -> dict[str, click.Command]:
        """Every command, loaded (click's own mapping; the commands themselves are reached by get_command)."""
        return {**{name: _load(name) for name in COMMANDS}, **self.added}

    @commands.setter
    def commands(self, value: dict[str, click.Command]) -> None:  # click.Group's __init__ (empty here)
        self.added: dict[str, click.Command] = dict(value)

    def invoke(self, ctx: click.Context) -> Any:
        from crawlhub.cli._common import ServiceDown
        from crawlhub.cli._output import reader_gone, stdout_closed
        from crawlhub.config import SettingError
        from crawlhub.connection import BadURL
        from crawlhub.services import NoProject, ServiceError

        try:
            return super().invoke(ctx)
        except (BadURL, NoProject, SettingError) as exc:
            raise BadInput(str(exc)) from None
        except ServiceError as exc:  # an embedded server that cannot start
            raise ServiceDown(str(exc)) from None
        except BrokenPipeError:
            if stdout_closed():  # `crawlhub log X | head`: the reader had what it wanted (docs/cli.md, "Exit codes")
                reader_gone()
            raise


@click.group(cls=Commands)
@click.version_option(package_name="crawlhub", prog_name="crawlhub",
                      message="%(prog)s %(version)s (Scrapy " + __import__("scrapy").__version__ + ")")
def main() -> None:
    """crawlhub: a distributed Scrapy crawl on one Redis frontier."""


def __getattr__(name: str) -> Callable[..., Any]:
    """``known_spiders`` and ``spider_keys``, as this module has always offered them, imported when asked for."""
    if name == "known_spiders":
        from crawlhub.addon import known_spiders

        return known_spiders
    if name == "spider_keys":
        from crawlhub.monitor.status import spider_keys

        return spider_keys
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    main()
