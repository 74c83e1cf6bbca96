# The mnemo bot image: `docker compose up -d` (docs/DEPLOY.md "Docker", docs/OPERATIONS.md "Docker").
# Nothing here is configuration: config.yaml is mounted at /app/config.yaml (the copy baked
# in is only the defaults) and every setting can also come from the environment.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# 1. Dependencies, in a layer of their own: the versions of constraints.txt (`make lock`),
#    reinstalled only when pyproject.toml or the lock changes, not at every code edit.
COPY pyproject.toml constraints.txt deploy/project_requirements.py /tmp/deps/
RUN python /tmp/deps/project_requirements.py /tmp/deps/pyproject.toml postgres webhooks mcp \
        > /tmp/deps/requirements.txt \
    && pip install -r /tmp/deps/requirements.txt -c /tmp/deps/constraints.txt \
    && rm -rf /tmp/deps

# 2. mnemo itself (its dependencies are all there: --no-deps, and pip check proves it).
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY memory ./memory
COPY plugins ./plugins
RUN pip install --no-deps . && pip check
COPY config.yaml ./config.yaml
COPY deploy/entrypoint.py deploy/healthcheck.py /opt/mnemo/

# An unprivileged user owning only the data directory (SOUL.md, USER.md, SQLite, notes).
RUN useradd --create-home --uid 10001 mnemo && mkdir -p /app/data && chown mnemo:mnemo /app/data
USER mnemo

# Inside a container the health endpoint is on and reachable from the network.
ENV MNEMO_CONFIG=/app/config.yaml \
    MNEMO_HEALTH_ENABLED=true \
    MNEMO_HEALTH_LISTEN=0.0.0.0
VOLUME ["/app/data"]
# 8443: Telegram webhook (when TELEGRAM_WEBHOOK_URL is set); 9464: /healthz and /metrics.
EXPOSE 8443 9464 9465

HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "/opt/mnemo/healthcheck.py"]

# A configuration error (no token...) waits instead of exiting into a restart loop:
# deploy/entrypoint.py says why.
ENTRYPOINT ["python", "/opt/mnemo/entrypoint.py"]
CMD ["mnemo", "run"]
