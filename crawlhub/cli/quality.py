"""``crawlhub quality SPIDER``: the quality figures of the current cycle against the baseline, the open events,
the broken pages and the change alerts, as the workers counted and judged them (crawlhub.extensions.quality).

Exit 4 while an event is open or the cycle's score is below QUALITY_SCORE_MIN (usable in cron and CI)."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from crawlhub.cli._common import check_spider, connect
from crawlhub.quality import percent, quality_report, when

UNHEALTHY = 4  # exit status while an event is open or the score is below its floor (docs/cli.md)


def render(report: dict[str, Any], broken: bool) -> list[str]:
    spider, fig = report["spider"], report["figures"]
    lines = [f"{spider}: cycle {report['cycle']['id'] or '-'} since {when(report['cycle']['started'])}; "
             f"baseline {report['baseline_cycle']['id'] if report['baseline_cycle'] else 'none (first cycle)'}",
             f"score {fig['score']:g}/100" + (f" (floor {report['score_min']:g}: BELOW)" if report["score_below_min"]
                                              else f" (floor {report['score_min']:g})" if report["score_min"] else "")
             + f"; pages {fig['pages']} ({fig['broken_pages']} broken), items {fig['items']}, valid "
               f"{percent(fig['valid_share'])}, quarantined {fig['quarantined']}, dead letters {fig['dlq']}"]
    for pattern, p in fig["patterns"].items():
        base = f" (baseline {p['baseline_per_page']:g})" if p["baseline_per_page"] is not None else ""
        lines.append(f"  pages like {pattern}: {p['pages']} pages, {p['per_page']:g} items/page{base}")
    for name, c in fig["coverage"].items():
        extra = "".join(f", {k} {percent(c[k])}" for k in ("baseline", "floor") if c[k] is not None)
        lines.append(f"  coverage {name}: {percent(c['share'])}{extra}")
    for title, key in (("quarantined", "quarantined_by_reason"), ("dead letters", "dlq_by_reason")):
        if fig[key]:
            lines.append(f"  {title} by reason: " + ", ".join(f"{r} x{n}" for r, n in
                                                             sorted(fig[key].items(), key=lambda kv: -kv[1])))
    if not report["events"]:
        lines.append(f"{spider}: no open event")
    for event in report["events"]:
        if event.get("kind", "extraction") == "extraction":
            pages = [b for b in report["broken"] if b["pattern"] == event["pattern"]]
            lines.append(f"BROKEN since {when(event['since'])}: pages like {event['pattern']}: {event['why']} "
                         f"({len(pages)} page(s) broken, e.g. {event['example']}); their items are kept, not marked "
                         "gone")
        else:
            lines.append(f"EVENT since {when(event['since'])}: {event['what']}: {event['why']}"
                         + (f" (e.g. {', '.join(event['examples'])})" if event.get("examples") else ""))
    if broken:
        for page in report["broken"]:
            lines.append(f"  {page['url']}  since {when(page['since'])}: {page['why']}")
    for event in report["closed"][:5]:
        lines.append(f"closed {when(event['closed'])}: {event.get('what', 'extraction broken')} "
                     f"({event.get('subject', event.get('pattern'))}, since {when(event['since'])})")
    for alert in report["alerts"][:10]:
        lines.append(f"change alert {when(alert['since'])}: {alert['subject']}: {alert['why']} ({alert['url']})")
    return lines


@click.command()
@click.argument("spider", callback=check_spider)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--broken", is_flag=True, help="List every broken page (else the count per pattern).")
def quality(spider: str, as_json: bool, broken: bool) -> None:
    """SPIDER's data quality: the cycle's figures and score against the baseline cycle, open events, broken
    pages, change alerts. Exit 4 while an event is open or the score is below QUALITY_SCORE_MIN."""
    report = quality_report(connect(), spider)
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        click.echo("\n".join(render(report, broken)))
    if not report["healthy"]:
        sys.exit(UNHEALTHY)
