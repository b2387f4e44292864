# The gateway (`companion run`) as a non-root user, the database on a volume.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    COMPANION_DB_PATH=/data/companion.db

RUN useradd --create-home --uid 10001 companion \
    && mkdir -p /data && chown companion:companion /data

WORKDIR /app
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY core ./core
COPY adapters ./adapters
COPY migrations ./migrations
RUN pip install .

USER companion
VOLUME ["/data"]
# The HTTP service listens on 127.0.0.1:8765 inside the container (COMPANION_HTTP_*; docs/operations.md).
EXPOSE 8765
# GET /livez with the standard library (no curl in the image); healthy when COMPANION_HTTP_PORT=off.
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 CMD ["python", "-m", "bot.healthcheck"]
CMD ["companion", "run"]
