"""Local sites the tests serve: server.py (http/https server, proxy), shop.py (the shop `make demo` crawls too), quotes.py, spiders.py."""
