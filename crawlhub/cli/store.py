"""``crawlhub canonicalize-keys``: stored documents moved to the canonical form of their key's URLs (the logic is in
crawlhub.pipelines.rekey)."""

from __future__ import annotations

import click

from crawlhub.cli._common import BadInput, mongo_database, settings


@click.command("canonicalize-keys")
@click.option("--collection", "collections", multiple=True,
              help="Only this item collection (repeatable) [default: every collection with crawlhub's item key].")
@click.option("--dry-run", is_flag=True, help="Count what would move or merge; change nothing.")
def canonicalize_keys(collections: tuple[str, ...], dry_run: bool) -> None:
    """Move documents stored under a key URL not in its canonical form (/p?b=2&a=1, stored before
    ITEM_KEY_URLS_CANONICAL) to that form (/p?a=1&b=2), merging each into the document already stored there: one
    document per page. Safe to run while workers crawl, and again after a run that stopped."""
    from crawlhub._utils.urls import IgnoredParams
    from crawlhub.pipelines.rekey import canonicalize_keys as rekey
    from crawlhub.pipelines.rekey import key_fields_of

    current = settings()
    with mongo_database(current) as db:
        names = sorted(name for name in db.list_collection_names() if not name.startswith("system."))
        if collections:
            unknown = [name for name in collections if name not in names or not key_fields_of(db[name])]
            if unknown:
                items = [name for name in names if key_fields_of(db[name])]
                raise BadInput(f"--collection {', '.join(map(repr, unknown))}: not an item collection of database "
                               f"{db.name!r} (its item collections: {', '.join(items) or 'none'}); nothing changed")
        tracking = IgnoredParams(current.getlist("URL_TRACKING_PARAMS"))
        reports = [rekey(db, name, apply=not dry_run, changes=current.get("CHANGES_COLLECTION") or "", tracking=tracking)
                   for name in (collections or names)]
    would = "would be " if dry_run else ""
    for report in (r for r in reports if r.key_fields):
        line = (f"{report.collection} (key: {', '.join(report.key_fields)}): {report.found} document(s) under a key "
                f"URL not in its canonical form")
        if report.found:
            line += f"; {report.moved} {would}moved to it, {report.merged} {would}merged into a document under it"
            if report.history:
                line += f"; {report.history} change record(s) re-keyed"
            line += "".join(f"\n  e.g. {stored} -> {canonical}" for stored, canonical in report.examples)
        click.echo(line)
