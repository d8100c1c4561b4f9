# The scorer worker image: the README's install step (pip install .), the rule packs beside it.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY stream ./stream
RUN pip install --no-cache-dir .
# rule packs (YAML rules and their own checks) are not part of the package: the image
# carries the repository's packs beside it
COPY rules ./rules
ENV SCORER_RULES_DIR=/app/rules \
    SCORER_WEB_HOST=0.0.0.0 \
    SCORER_WEB_PORT=6066 \
    SCORER_DATA_DIR=/app/data
EXPOSE 6066
CMD ["scorer", "worker"]
