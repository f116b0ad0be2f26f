"""`make demo`: several workers on one frontier, crawling the local shop of tests/sites/shop.py."""
