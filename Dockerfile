# The scorer worker image: the README's install step (pip install .). The rule packs ship
# inside the package; mount your own and set SCORER_RULES_DIR to load them beside them.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY stream ./stream
COPY rules ./rules
RUN pip install --no-cache-dir .
ENV SCORER_WEB_HOST=0.0.0.0 \
    SCORER_WEB_PORT=6066 \
    SCORER_DATA_DIR=/app/data
EXPOSE 6066
CMD ["scorer", "worker"]
