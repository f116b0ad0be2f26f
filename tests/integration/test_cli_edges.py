"""The edges of what a user types (issue #28): `crawlhub export` destinations and formats, the CLI outside a
project, `scrapy genspider`'s templates, exit codes as docs/cli.md lists them. Every test is written from the
user's side: the command as typed, its output and exit code, and the state of the file, device or key after."""


from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import threading
import time

import pytest

from tests.harness import ROOT, SCRAPY, cli, start_ui
from tests.unit.test_cli_edges import documented_codes

ITEMS = 300




def check_code(command: str, done: subprocess.CompletedProcess, expected: int) -> None:
    """``done`` exited ``expected``, one of the codes docs/cli.md lists for ``command``, with no traceback."""
    assert done.returncode == expected, f"crawlhub {command} exited {done.returncode}, not {expected}:\n{done.stderr[-2000:]}"
    assert expected in documented_codes()[command], f"docs/cli.md does not list {expected} for crawlhub {command}"
    assert "Traceback" not in done.stderr, done.stderr[-3000:]


def stored_products(mongo_db, count: int = ITEMS) -> None:
    mongo_db.products.insert_many([{"id": str(n), "name": f"item {n}", "price": f"{n}.00", "spiders": ["scrapeme"]}
                                   for n in range(count)])


def test_export_streams_to_fifos_and_symlinks_and_replaces_only_regular_files(env, mongo_db, tmp_path):
    stored_products(mongo_db)

    def read_all(path, into: list) -> threading.Thread:
        def run():
            with open(path, "rb") as pipe:
                into.append(pipe.read())

        reader = threading.Thread(target=run, daemon=True)
        reader.start()
        return reader

    fifo = tmp_path / "items"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = read_all(fifo, got)
    done = cli(env, "export", "scrapeme", "-o", str(fifo))
    reader.join(30)
    check_code("export", done, 0)
    assert len(got[0].decode().splitlines()) == ITEMS and json.loads(got[0].splitlines()[0])["id"] == "0"
    assert stat.S_ISFIFO(os.stat(fifo).st_mode), "the FIFO is still a FIFO, not a file put in its place"
    assert not list(tmp_path.glob("*.part"))

    link = tmp_path / "through.csv"
    link.symlink_to(fifo)
    got = []
    reader = read_all(fifo, got)
    check_code("export", cli(env, "export", "scrapeme", "-o", str(link), "--fields", "id,name"), 0)
    reader.join(30)
    rows = got[0].decode().splitlines()
    assert rows[0] == "id,name" and len(rows) == ITEMS + 1, "CSV from the link's extension, through the pipe"
    assert link.is_symlink() and stat.S_ISFIFO(os.stat(fifo).st_mode)

    # a symlink to the process's own standard output (a pipe here): every item reaches the pipe
    to_stdout = tmp_path / "stdout.jsonl"
    to_stdout.symlink_to("/proc/self/fd/1")
    done = cli(env, "export", "scrapeme", "-o", str(to_stdout))
    check_code("export", done, 0)
    assert len(done.stdout.splitlines()) == ITEMS and to_stdout.is_symlink()
    assert len(cli(env, "export", "scrapeme", "-o", "-").stdout.splitlines()) == ITEMS

    # a regular file is replaced whole, once complete; a symlink to one keeps the link and replaces its target
    target = tmp_path / "kept.jsonl"
    target.write_text("old\n")
    alias = tmp_path / "alias.jsonl"
    alias.symlink_to(target)
    check_code("export", cli(env, "export", "scrapeme", "-o", str(alias)), 0)
    assert alias.is_symlink() and len(target.read_text().splitlines()) == ITEMS
    # Scrapy's FILE:FORMAT
    check_code("export", cli(env, "export", "scrapeme", "-o", f"{tmp_path / 'items.txt'}:csv"), 0)
    assert (tmp_path / "items.txt").read_text().startswith("id,name,price")


@pytest.mark.skipif(os.geteuid() != 0, reason="making a character device node (mknod) needs root")
def test_export_to_a_full_device_fails_with_one_line_and_leaves_the_device(env, mongo_db, tmp_path):
    stored_products(mongo_db)
    full = tmp_path / "full"
    os.mknod(full, stat.S_IFCHR | 0o666, os.makedev(1, 7))  # the kernel's "full" device, made in the test's directory
    done = cli(env, "export", "scrapeme", "-o", str(full))
    check_code("export", done, 1)
    assert "No space left on device" in done.stderr and "exported" not in done.stderr
    assert stat.S_ISCHR(os.stat(full).st_mode), "the device is still a device"


def test_export_refuses_bad_destinations_formats_fields_and_spiders_before_writing(env, mongo_db, tmp_path):
    stored_products(mongo_db)
    folder = tmp_path / "out"
    folder.mkdir()
    cases = [
        (["-o", str(folder)], "is a directory"),
        (["-o", str(tmp_path / "nope" / "x.csv")], "does not exist"),
        (["-o", str(tmp_path / "x.parquet")], "unrecognized output format 'parquet'"),
        (["-o", str(tmp_path / "x")], "no extension"),
        (["-o", str(tmp_path / "x.pickle")], "Python-only"),
        (["-o", str(tmp_path / "x.csv"), "--fields", "id,nosuchfield"], "'nosuchfield': no exported item has it"),
        (["-o", str(tmp_path / "y.csv"), "--fields", "id,first_seen"], "--meta"),
    ]
    for args, said in cases:
        done = cli(env, "export", "scrapeme", *args)
        check_code("export", done, 2)
        assert said in done.stderr, (args, done.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"] and not list(folder.iterdir()), "nothing written"

    unknown = cli(env, "export", "nosuch", "-o", str(tmp_path / "n.jsonl"))
    check_code("export", unknown, 2)
    assert "no spider 'nosuch'" in unknown.stderr
    nothing = cli(env, "export", "quotes", "-o", str(tmp_path / "q.jsonl"))
    check_code("export", nothing, 1)
    assert "nothing to export" in nothing.stderr and not (tmp_path / "q.jsonl").exists()


def test_outside_a_project_the_cli_says_so_and_starts_no_server(env, tmp_path):
    away = tmp_path / "elsewhere"
    away.mkdir()
    bare = {k: v for k, v in env.items() if k not in ("REDIS_URL", "MONGO_URI", "CRAWLHUB_HOME", "SCRAPY_SETTINGS_MODULE")}
    bare["PYTHONPATH"] = str(ROOT)

    def run(*args):
        return subprocess.run([sys.executable, "-m", "crawlhub.cli", *args], cwd=away, env=bare, capture_output=True,
                              text=True, timeout=60)

    for args, command in ((["status"], "status"), (["export", "scrapeme"], "export"), (["services", "up"], "services up"),
                          (["seed", "scrapeme", "https://127.0.0.1:1/"], "seed")):
        done = run(*args)
        check_code(command, done, 2)
        assert "no Scrapy project here" in done.stderr and "scrapy.cfg" in done.stderr, done.stderr
    assert list(away.iterdir()) == [], "no .crawlhub/ (and no server) made outside the project"
    version = run("--version")
    assert version.returncode == 0 and re.match(r"crawlhub \d+\.\d+", version.stdout) and "Scrapy 2." in version.stdout


def test_a_steering_command_and_the_health_check_load_neither_the_store_driver_nor_the_ui(env):
    """`crawlhub pause` (the steering commands) and `crawlhub health` (every container's health check, each 30 s)
    import only what they run (crawlhub.cli.COMMANDS), the spider's settings included: not pymongo, the web UI's
    aiohttp, the export's writers or the impersonating download handler (0.35 s of the command's 1.3 s of CPU)."""
    heavy = ("pymongo", "aiohttp", "crawlhub.export", "crawlhub.ui", "crawlhub.cli.export", "crawlhub.impersonate")
    for args, said in ((["pause", "scrapeme"], "scrapeme paused"),
                       (["health", "scrapeme", "--any-host"], "unhealthy: no worker of scrapeme")):
        probe = ("import sys; from crawlhub.cli import main\n"
                 f"try:\n    main({args!r})\nexcept SystemExit:\n    pass\n"
                 f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
        done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr
        assert said in done.stdout + done.stderr, (done.stdout, done.stderr)
        assert done.stdout.strip().splitlines()[-1] == "[]", (args, done.stdout)


def test_genspider_offers_scrapys_templates_and_crawlhubs_typed_one(env, tmp_path):
    listed = subprocess.run([*SCRAPY, "genspider", "--list"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert set(listed.stdout.split()) >= {"basic", "crawl", "csvfeed", "xmlfeed", "crawlhub"}, listed.stdout
    here = {**env, "SCRAPY_SETTINGS_MODULE": "crawlhub.settings", "PYTHONPATH": str(ROOT)}

    def gen(*args):
        return subprocess.run([*SCRAPY, "genspider", "-s", "NEWSPIDER_MODULE=", *args], cwd=tmp_path, env=here,
                              capture_output=True, text=True, timeout=60)

    assert gen("foo", "example.com").returncode == 0 and "scrapy.Spider" in (tmp_path / "foo.py").read_text()
    assert gen("-t", "crawl", "bar", "example.com").returncode == 0 and "CrawlSpider" in (tmp_path / "bar.py").read_text()
    missing = gen("-t", "nosuch", "baz", "example.com")
    assert missing.returncode == 2 and "basic" in missing.stdout and not (tmp_path / "baz.py").exists()

    assert gen("-t", "crawlhub", "books", "books.example").returncode == 0
    import importlib.util

    from itemadapter import ItemAdapter
    from scrapy.http import HtmlResponse

    from crawlhub.items import Page, item_meta

    spec = importlib.util.spec_from_file_location("generated_books", tmp_path / "books.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    from scrapy import Request

    response = HtmlResponse("https://books.example/", body=b"<title>Books</title>", encoding="utf-8",
                            request=Request("https://books.example/"))

    (item,) = [x for x in module.BooksSpider().parse(response) if not isinstance(x, Request)]
    assert not isinstance(item, Page) and type(item).__name__ == "BooksSpiderItem"
    assert ItemAdapter(item).asdict() == {"url": "https://books.example/", "title": "Books",
                                          "source_url": "https://books.example/"}
    assert item_meta(item).collection == "books"


def test_the_ui_refuses_a_short_token_and_comes_with_its_first_state(env, redis_client, tmp_path):
    short = cli({**env, "CRAWLHUB_UI_TOKEN": "abcde"}, "ui", "--port", "1")
    check_code("ui", short, 2)
    assert "at least 16" in short.stderr
    import time

    from tests.harness import http

    # two spiders with state; the one with a live worker is the page's first
    redis_client.lpush("generic:start_urls", "https://127.0.0.1:1/")
    redis_client.hset("scrapeme:workers", "w:1", json.dumps({"worker": "w:1", "state": "running", "started_at": time.time(),
                                                             "last_beat": time.time(), "pages": 7}))
    redis_client.set("scrapeme:partitions", "1")
    ui, base = start_ui(env, tmp_path)
    status, _, body = http(base + "/")
    assert status == 200
    (block,) = re.findall(rb'<script id="initial" type="application/json">(.*?)</script>', body, flags=re.S)
    initial = json.loads(block)
    assert initial["default"] == "scrapeme" and initial["status"]["spider"] == "scrapeme"
    assert initial["status"]["workers_alive"] == 1
    assert json.loads(http(base + "/api/spiders")[2])["default"] == "scrapeme"


# Issue #67's first hour: what a newcomer types, each as typed.

WRITERS = {"export": "-o", "report": "--html"}  # every command that writes a file the user names, and its option


def test_every_command_that_writes_a_file_refuses_an_unwritable_path_in_one_line(env, mongo_db, tmp_path):
    """`crawlhub report scrapeme --html /nonexistent/r.html` was a FileNotFoundError traceback: each path-writing
    command checks its path before reading anything, as export does: one line naming the path and why, exit 2."""
    stored_products(mongo_db)
    folder = tmp_path / "out"
    folder.mkdir()
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    cases = [(str(tmp_path / "nope" / "r.html"), "does not exist"), (str(folder), "is a directory")]
    if os.geteuid() != 0:  # (root writes anywhere)
        cases.append((str(locked / "r.html"), "permission denied"))
    for command, option in WRITERS.items():
        for path, why in cases:
            done = cli(env, command, "scrapeme", option, path)
            check_code(command, done, 2)
            (line,) = done.stderr.strip().splitlines()
            assert path in line and why in line, (command, path, done.stderr)
    assert not list(folder.iterdir()) and not list(locked.iterdir()) and not (tmp_path / "nope").exists()


def test_report_writes_to_a_default_file_and_says_where(env, tmp_path):
    """`report` without --html said "Missing option '--html'" though HTML is its only format: the file is
    SPIDER-report.html in the current folder, and the last line says where it went."""
    here = {**env, "SCRAPY_SETTINGS_MODULE": "crawlhub.settings", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "crawlhub.cli", "report", "scrapeme"], cwd=tmp_path, env=here,
                          capture_output=True, text=True, timeout=60)
    check_code("report", done, 0)
    written = tmp_path / "scrapeme-report.html"
    assert written.read_text().startswith("<!doctype html>") or "<html" in written.read_text()[:500]
    assert f"written to {written}" in done.stdout, done.stdout
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "home") == ["scrapeme-report.html"], "no .part left"
    # -o is the same option; - is standard output (the line about it then goes to stderr)
    to_stdout = cli(env, "report", "scrapeme", "-o", "-")
    check_code("report", to_stdout, 0)
    assert "<svg" in to_stdout.stdout and "written to standard output" in to_stdout.stderr


def first_line_then_close(env, *args: str) -> tuple[int, str, str]:
    """Run `crawlhub ARGS` with standard output a pipe that the reader closes after one line (`| head -1`):
    (exit code, the line, stderr)."""
    proc = subprocess.Popen([sys.executable, "-m", "crawlhub.cli", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    line = proc.stdout.readline()
    proc.stdout.close()
    try:
        code = proc.wait(60)
    finally:
        proc.kill()
    return code, line.decode(), proc.stderr.read().decode()


def test_a_reader_that_closes_the_pipe_ends_a_streaming_command_quietly(env, redis_client, mongo_db):
    """`crawlhub export scrapeme | head -2` ended with "Error: export stopped: ...", exit 1: a closed pipe is the
    reader's choice, so every command that streams to standard output stops quietly with 0 (docs/cli.md). Each
    writes far more than a pipe's buffer (64 KiB), so the writer meets the closed pipe."""
    mongo_db.products.insert_many([{"id": str(n), "name": "x" * 200, "spiders": ["scrapeme"]} for n in range(2000)])
    mongo_db.quarantine.insert_many([{"spider": "scrapeme", "item_type": "Product", "quarantined_at": n,
                                      "source_url": f"http://127.0.0.1:1/{n}", "reasons": [f"missing price {'q' * 100}"]}
                                     for n in range(2000)])
    now = time.time()
    for n in range(2000):
        redis_client.xadd("scrapeme:log", {"t": now + n / 1000, "url": f"http://127.0.0.1:1/{'p' * 100}/{n}",
                                           "domain": "127.0.0.1:1", "worker": "w:1", "status": 200, "ms": 5, "bytes": 9})
        redis_client.rpush("scrapeme:dlq", json.dumps({"url": f"http://127.0.0.1:1/{'d' * 100}/{n}", "spider": "scrapeme",
                                                       "attempts": 3, "status": 503, "error": "", "first_attempt": now,
                                                       "last_attempt": now, "worker": "w:1", "request": "{}"}))
    for command, args in (("export", ("export", "scrapeme")), ("log", ("log", "scrapeme", "-n", "2000")),
                          ("dlq list", ("dlq", "list", "scrapeme", "--limit", "2000")),
                          ("quarantine list", ("quarantine", "list", "scrapeme", "--limit", "2000")),
                          ("status", ("status", "--watch", "--interval", "0.2"))):
        code, line, stderr = first_line_then_close(env, *args)
        assert line.strip(), (command, stderr)
        assert code == 0 and expected_quiet(stderr), (command, code, stderr)
        assert 0 in documented_codes()[command]


def expected_quiet(stderr: str) -> bool:
    return "Error" not in stderr and "Traceback" not in stderr and "Exception ignored" not in stderr


def test_log_refuses_a_status_filter_that_matches_nothing(env, redis_client):
    """`crawlhub log scrapeme --status 7xx` exited 0 with nothing: a filter that can match no attempt is bad input."""
    redis_client.xadd("scrapeme:log", {"t": time.time(), "url": "http://127.0.0.1:1/a", "domain": "127.0.0.1:1",
                                       "worker": "w:1", "status": 404, "ms": 5, "bytes": 9})
    for wrong in ("7xx", "99", "abc", "2000"):
        done = cli(env, "log", "scrapeme", "--status", wrong)
        check_code("log", done, 2)
        (line,) = done.stderr.strip().splitlines()
        assert repr(wrong) in line and "4xx" in line and "error" in line, line
    for right in ("404", "4xx", "4XX"):
        done = cli(env, "log", "scrapeme", "--status", right)
        check_code("log", done, 0)
        assert "http://127.0.0.1:1/a" in done.stdout, (right, done.stdout)


def test_the_ui_prints_its_address_only_once_it_listens(env):
    """`crawlhub ui --port 443` printed "crawlhub ui on http://127.0.0.1:443/" before "cannot listen"."""
    import socket

    taken = socket.create_server(("127.0.0.1", 0))  # this test's own listening socket holds the port
    try:
        port = taken.getsockname()[1]
        done = cli(env, "ui", "--port", str(port))
    finally:
        taken.close()
    check_code("ui", done, 1)
    assert "crawlhub ui on" not in done.stdout + done.stderr and f":{port}/" not in done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert f"cannot listen on 127.0.0.1:{port}" in line, line


def test_schedule_says_why_a_one_shot_spider_has_no_pages(env, mongo_db):
    """`crawlhub schedule` on a spider without `revisit` said "0 pages in the status store" without saying why."""
    done = cli(env, "schedule", "scrapeme")
    check_code("schedule", done, 0)
    assert "does not revisit" in done.stdout and "`revisit`" in done.stdout and "docs/revisit.md" in done.stdout
    # a spider that declares `revisit` (tests/sites/spiders): its schedule, empty before its first fetch
    revisiting = cli({**env, "SPIDER_MODULES": "spiders,tests.sites.spiders"}, "schedule", "t_revisit")
    check_code("schedule", revisiting, 0)
    assert "does not revisit" not in revisiting.stdout and "due now 0" in revisiting.stdout


def test_status_of_every_spider_has_each_ones_items_line(env, redis_client, mongo_db):
    """`crawlhub status` with no spider left out the items line."""
    stored_products(mongo_db, 7)
    redis_client.lpush("scrapeme:start_urls", "https://127.0.0.1:1/")
    redis_client.lpush("quotes:start_urls", "https://127.0.0.1:1/")
    done = cli(env, "status")
    check_code("status", done, 0)
    items = [line for line in done.stdout.splitlines() if line.startswith("items:")]
    assert len(items) == 2 and any("products=7" in line for line in items), done.stdout
    listed = json.loads(cli(env, "status", "--json").stdout)
    assert {row["spider"]: row["items"]["stored"] for row in listed} == {"quotes": {}, "scrapeme": {"products": 7}}
