"""``crawlhub services up|down|status``: the embedded local Redis and MongoDB-wire servers."""

from __future__ import annotations

import click

from crawlhub import services
from crawlhub.cli._common import settings
from crawlhub.config import redact_url


@click.group("services")
def group() -> None:
    """The embedded local Redis and MongoDB-wire servers (.crawlhub/)."""


def _services() -> list[services.Service]:
    current = settings()
    return services.services(services.home_dir(current.get("CRAWLHUB_HOME")), current)


@group.command("up")
def up() -> None:
    """Start the embedded servers (no-op for those already running)."""
    found = _services()
    for service in found:
        url = service.ensure()
        click.echo(f"{service.name:6} up   {url}  (data: {service.dir})")
    click.echo(f"seed a crawl: {services.seed_command(found[0].url(), 'SPIDER:start_urls')}")


@group.command("down")
def down() -> None:
    """Stop the embedded servers; their data stays."""
    for service in _services():
        click.echo(f"{service.name:6} {'stopped' if service.stop() else 'was not running'}")


@group.command("status")
def status() -> None:
    """Show whether the embedded servers run, where, and the URLs in use."""
    for service in _services():
        s = service.status()
        click.echo(f"{s['service']:6} {'running' if s['running'] else 'stopped':8} {s['url'] or '-'}  (data: {s['data']})")
    current = settings()
    click.echo(f"REDIS_URL = {redact_url(current.get('REDIS_URL')) or '(unset: embedded)'}")
    click.echo(f"MONGO_URI = {redact_url(current.get('MONGO_URI')) or '(unset: embedded)'}")
