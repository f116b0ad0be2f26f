"""Browser wiring without a browser: who gets the handler, where Chromium comes from."""


from __future__ import annotations


def test_browser_tests_fail_without_chromium_unless_skipped_on_purpose(tmp_path):
    """CI must not pass with the browser untested: a missing Chromium fails the browser tests."""
    import os
    import subprocess
    import sys

    from crawlhub.services import redis_server_binary
    from tests.harness import ROOT

    bin_dir = tmp_path / "bin"  # redis-server, and no Chromium anywhere
    bin_dir.mkdir()
    (bin_dir / "redis-server").symlink_to(redis_server_binary())
    env = {k: v for k, v in os.environ.items() if k != "CRAWLHUB_SKIP_BROWSER_TESTS"}
    env.update(PATH=str(bin_dir), PLAYWRIGHT_BROWSERS_PATH=str(tmp_path))
    test = "tests/integration/test_browser.py::test_js_page_needs_the_browser_and_quotes_js_matches_quotes"
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test]
    failed = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1 and "the browser tests cannot run: no Chromium found" in failed.stdout, failed.stdout[-2000:]
    skipped = subprocess.run(args + ["-rs"], cwd=ROOT, env={**env, "CRAWLHUB_SKIP_BROWSER_TESTS": "1"},
                             capture_output=True, text=True, timeout=120)
    assert skipped.returncode == 0 and "1 skipped" in skipped.stdout, skipped.stdout[-2000:]
