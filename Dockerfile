# The mnemo bot image: `docker compose up` (see README "Docker") or
#   docker build -t mnemo . && docker run -e TELEGRAM_BOT_TOKEN=... -e OPENAI_API_KEY=... mnemo
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Sources first, config last: editing config.yaml does not reinstall the package.
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY memory ./memory
COPY plugins ./plugins
RUN pip install ".[postgres,webhooks]"
COPY config.yaml ./config.yaml

# An unprivileged user owning only the data directory (SOUL.md, USER.md, SQLite, notes).
RUN useradd --create-home --uid 10001 mnemo && mkdir -p /app/data && chown mnemo:mnemo /app/data
USER mnemo

# Inside a container the health endpoint is on and reachable from the network.
ENV MNEMO_CONFIG=/app/config.yaml \
    MNEMO_HEALTH_ENABLED=true \
    MNEMO_HEALTH_LISTEN=0.0.0.0
VOLUME ["/app/data"]
# 8443: Telegram webhook (when TELEGRAM_WEBHOOK_URL is set); 9464: /healthz and /metrics.
EXPOSE 8443 9464

HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9464/healthz', timeout=3)"]

CMD ["mnemo", "run"]
