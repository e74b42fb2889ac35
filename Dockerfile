# syntax=docker/dockerfile:1
# joiner controller image: multi-stage, slim, non-root, and fine with a read-only root filesystem
# (nothing is written at run time; Python does not write bytecode).

FROM python:3.11-slim-bookworm AS build
WORKDIR /src
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY pyproject.toml README.md ./
COPY api ./api
COPY controller ./controller
RUN python -m venv /opt/joiner \
    && /opt/joiner/bin/pip install --no-compile . \
    && find /opt/joiner -name '__pycache__' -prune -exec rm -rf {} +

FROM python:3.11-slim-bookworm
LABEL org.opencontainers.image.title="joiner" \
      org.opencontainers.image.description="A node provisioner for GPU clusters" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/joiner/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /opt/joiner /opt/joiner
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["joiner", "run"]
CMD ["--provider", "kwok"]
