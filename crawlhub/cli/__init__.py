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
    limits.py         limits set | clear | show
    partitions.py     partitions (a partitioned frontier, partition by partition)
    revisit.py        recrawl, schedule (continuous crawling)
    export.py         export (stored items to jsonl, json, csv, xml)
    ui.py             ui (the crawl in a browser, live: crawlhub.ui)
    antiblocking.py   proxies [reset], profiles list | check | capture
"""

from __future__ import annotations

from typing import Any

import click

from crawlhub.cli import antiblocking, control, dlq, export, limits, partitions, quality, revisit, services, ui, watch
from crawlhub.cli._common import BadInput
from crawlhub.monitor.status import known_spiders, spider_keys

__all__ = ["known_spiders", "main", "spider_keys"]


class Commands(click.Group):
    """The command group; what no command catches of a bad set-up ends as one line, wherever it was found:
    no project here, a malformed REDIS_URL or MONGO_URI (exit code 2), an embedded server that cannot start (3)."""

    def invoke(self, ctx: click.Context) -> Any:
        from crawlhub.cli._common import ServiceDown
        from crawlhub.connection import BadURL
        from crawlhub.services import NoProject, ServiceError

        try:
            return super().invoke(ctx)
        except (BadURL, NoProject) as exc:
            raise BadInput(str(exc)) from None
        except ServiceError as exc:  # an embedded server that cannot start
            raise ServiceDown(str(exc)) from None


@click.group(cls=Commands)
@click.version_option(package_name="crawlhub", prog_name="crawlhub",
                      message="%(prog)s %(version)s (Scrapy " + __import__("scrapy").__version__ + ")")
def main() -> None:
    """crawlhub: a distributed Scrapy crawl on one Redis frontier."""


for command in (services.group, *watch.COMMANDS, *control.COMMANDS, *quality.COMMANDS, *revisit.COMMANDS, *export.COMMANDS, *ui.COMMANDS, antiblocking.proxies,
                antiblocking.profiles, dlq.group, limits.group, partitions.partitions):
    main.add_command(command)


if __name__ == "__main__":
    main()
