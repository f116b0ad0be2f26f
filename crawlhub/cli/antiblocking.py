"""``crawlhub proxies`` (health, reset) and ``crawlhub profiles`` (list, check, capture)."""

from __future__ import annotations

import json

import click

from crawlhub.cli._common import connect, settings
from crawlhub.profiles import ProfileError, capture_profiles, load_profiles
from crawlhub.proxies import format_health, proxy_health, reset_state


@click.group("proxies", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def proxies(ctx: click.Context, as_json: bool) -> None:
    """Each proxy's health (ok / cooling until T / dead), success rate, and each domain's pool."""
    if ctx.invoked_subcommand is not None:
        return
    health = proxy_health(connect())
    if as_json:
        click.echo(json.dumps(health, indent=2))
    elif not health["proxies"]:
        click.echo("no proxy has been used yet (PROXY_POOLS, PROXY_FILE)")
    else:
        for line in format_health(health):
            click.echo(line)


@proxies.command("reset")
@click.option("--domain", help="Only this domain's cool-downs, strikes and pool.")
def proxies_reset(domain: str | None) -> None:
    """Forget cool-downs, dead marks, failure counts and escalations (all, or one domain's)."""
    removed = reset_state(connect(), domain)
    click.echo(f"proxy state reset for {domain or 'every domain'} ({removed} keys removed)")


@click.group("profiles")
def profiles() -> None:
    """The browser header profiles (crawlhub/data/browser_profiles.json)."""


@profiles.command("list")
def profiles_list() -> None:
    """Every profile: id, family, OS and User-Agent."""
    for p in load_profiles(settings().get("HEADER_PROFILES_FILE") or None):
        ua = {k.lower(): v for k, v in p.headers}["user-agent"]
        click.echo(f"{p.id:22} {p.family:8} {p.os:8} {ua}")


@profiles.command("check")
@click.argument("path", required=False)
def profiles_check(path: str | None) -> None:
    """Check a profile file (default: the one in use): every set coherent, ids unique."""
    try:
        found = load_profiles(path or settings().get("HEADER_PROFILES_FILE") or None)
    except ProfileError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{len(found)} profiles, all coherent: " + ", ".join(sorted({f'{p.family}/{p.os}' for p in found})))


@profiles.command("capture")
@click.option("--port", default=8765, show_default=True, help="Port on 127.0.0.1 to listen on.")
@click.option("--count", default=1, show_default=True, help="Navigations to capture before stopping.")
def profiles_capture(port: int, count: int) -> None:
    """Print a real browser's navigation headers as a profile entry: open http://127.0.0.1:PORT/ in it."""
    click.echo(f"open http://127.0.0.1:{port}/ in the browser to capture (Ctrl-C to stop)", err=True)
    for entry in capture_profiles(port, count):
        click.echo(json.dumps(entry))
