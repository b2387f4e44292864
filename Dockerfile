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
CMD ["companion", "run"]
