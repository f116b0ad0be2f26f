"""Local sites the tests serve (the shop lives in crawlhub.sites; the demo uses it too)."""
