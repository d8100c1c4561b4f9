# The scorer worker image. Same install step as the README: pip install the project.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY stream ./stream
COPY rules ./rules
RUN pip install --no-cache-dir -e .
ENV SCORER_RULES_DIR=/app/rules SCORER_WEB_HOST=0.0.0.0
EXPOSE 6066
CMD ["scorer", "worker"]
