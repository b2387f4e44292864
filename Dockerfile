# The gateway (`companion run`) as a non-root user, the database on a volume.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    COMPANION_DB_PATH=/data/companion.db

RUN useradd --create-home --uid 10001 companion \
    && mkdir -p /data /keys && chown companion:companion /data /keys

WORKDIR /app
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY core ./core
COPY adapters ./adapters
COPY migrations ./migrations
# EXTRAS=postgres adds the PostgreSQL driver (docs/compose.postgres.yml builds it so).
ARG EXTRAS=
RUN pip install ".${EXTRAS:+[$EXTRAS]}"

USER companion
VOLUME ["/data"]
# /keys: where a volume of its own holds COMPANION_KEY_DIR on PostgreSQL (never inside a database backup).
# The HTTP service listens on 127.0.0.1:8765 inside the container (COMPANION_HTTP_*; docs/operations.md).
EXPOSE 8765
# GET /livez with the standard library (no curl in the image); healthy when COMPANION_HTTP_PORT=off.
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 CMD ["python", "-m", "bot.healthcheck"]
CMD ["companion", "run"]
