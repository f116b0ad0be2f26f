"""``crawlhub ui``: the crawl in a browser, live (the app is crawlhub.ui.app)."""

from __future__ import annotations

import logging
import os

import click

from crawlhub.cli._common import BadInput, connect, settings

TOKEN_MIN = 16  # characters of CRAWLHUB_UI_TOKEN, at least


@click.command("ui")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; one that is not loopback needs CRAWLHUB_UI_TOKEN.")
@click.option("--port", default=8050, show_default=True, type=click.IntRange(0, 65535), help="Port to listen on.")
@click.option("--interval", default=2.0, show_default=True, type=click.FloatRange(0.2, 3600),
              help="Seconds between the page's updates.")
def ui(host: str, port: int, interval: float) -> None:
    """A web page that shows every spider's crawl live (frontier, rates, status codes, latency, workers,
    items, proxies, audit log) with pause/resume and requeue of dead letters and bad seeds.
    Reads Redis and MongoDB only; never runs a crawl. The API: docs/cli.md."""
    from crawlhub.config import redact_url
    from crawlhub.connection import get_mongo, redis_location, redis_shown
    from crawlhub.ui.app import Dashboard, is_loopback, listen, serve

    token = os.environ.get("CRAWLHUB_UI_TOKEN", "").strip() or None
    if token is not None and len(token) < TOKEN_MIN:
        raise BadInput(f"CRAWLHUB_UI_TOKEN is {len(token)} characters: a token needs at least {TOKEN_MIN} (one that can "
                       "be guessed guards nothing); make one with: python -c 'import secrets; print(secrets.token_urlsafe(24))'")
    if not is_loopback(host) and not token:
        raise BadInput(f"--host {host} is not a loopback address: anyone who can reach it could pause the crawl. "
                       f"Set CRAWLHUB_UI_TOKEN (a long random string; the page and its API then refuse requests "
                       f"without it) or listen on 127.0.0.1")
    current = settings()
    server = connect()
    try:  # the address is printed once it can be reached, never before "cannot listen"
        sockets = listen(host, port)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    mongo = get_mongo(current, 3000)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    where = f"http://{shown}:{sockets[0].getsockname()[1]}/" + ("?token=$CRAWLHUB_UI_TOKEN" if token else "")
    url, cluster = redis_location(current)
    click.echo(f"crawlhub ui on {where} ({redis_shown(current, url, cluster)}, "
               f"MongoDB {redact_url(current.get('MONGO_URI')) if current.get('MONGO_URI') else 'embedded'}, "
               f"database {current.get('MONGO_DATABASE')}); Ctrl-C to stop", err=True)
    try:
        serve(Dashboard(current, server, mongo, interval), sockets, token)
    finally:
        mongo.close()
