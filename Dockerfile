# crawlhub worker image. Build from the repository root:
#   docker build -t crawlhub-worker:0.1.0 .                              # plain pages only
#   docker build --build-arg WITH_CHROMIUM=true -t crawlhub-worker:0.1.0-browser .   # + Debian's Chromium
# Run one worker: docker run --rm -e CRAWLHUB_SPIDER=scrapeme -e REDIS_URL=... -e MONGO_URI=... crawlhub-worker:0.1.0
# Every crawlhub setting can be given as an environment variable (README, "Configuration").
FROM python:3.11.7-slim-bookworm

ARG WITH_CHROMIUM=false
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/home/crawlhub

# Chromium (Debian's) only when the image must render JavaScript (spiders with use_browser / browser_needs)
RUN if [ "$WITH_CHROMIUM" = "true" ]; then \
      apt-get update && apt-get install -y --no-install-recommends chromium fonts-liberation \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
    && useradd --create-home --uid 10001 crawlhub

WORKDIR /opt/crawlhub
COPY requirements.txt ./
RUN pip install -r requirements.txt
COPY scrapy.cfg pyproject.toml ./
COPY crawlhub ./crawlhub
COPY spiders ./spiders
RUN pip install --no-deps . && chown -R crawlhub /opt/crawlhub

USER crawlhub
# the worker writes nothing but its logs (stdout); the embedded servers are never used in a container
ENV CRAWLHUB_HOME=/home/crawlhub/.crawlhub \
    CRAWLHUB_SPIDER=scrapeme

# healthy while this container's worker sends heartbeats to Redis
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 \
    CMD ["sh", "-c", "crawlhub health \"$CRAWLHUB_SPIDER\""]

# exec: scrapy replaces the shell as PID 1 and gets SIGTERM itself; on it the worker
# stops leasing, finishes or gives back its requests, flushes its items, and exits
CMD ["sh", "-c", "exec scrapy crawl \"$CRAWLHUB_SPIDER\""]
