# sotopia-env's OpenEnv environment server (docs/openenv.md), CPU only.
#   docker build -t sotopia-env-openenv .            (or: openenv build . -t sotopia-env-openenv)
#   docker run -p 8000:8000 sotopia-env-openenv      (SeatClient.from_docker_image("sotopia-env-openenv") does this)
# Arguments after the image name replace the CMD below: e.g. --scenarios game:train --public --host 0.0.0.0 --port 8000
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
FROM ${PYTHON_IMAGE}

ARG TORCH_VERSION=2.13.0
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app/env
# torch from the CPU index first (no CUDA wheels: a tenth of the size), pinned; then the package with its extra
COPY pyproject.toml README.md LICENSE openenv.yaml ./
RUN pip install "torch==${TORCH_VERSION}" --index-url https://download.pytorch.org/whl/cpu
COPY sotopia_env ./sotopia_env
COPY agents ./agents
COPY episodes ./episodes
COPY training ./training
COPY server ./server
COPY cli ./cli
RUN pip install ".[openenv]" && rm -rf build ./*.egg-info \
    && useradd --create-home --uid 1000 sotopia
USER sotopia

EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=3s --start-period=20s --retries=3 \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://localhost:8000/health', timeout=2)"
ENTRYPOINT ["sotopia-env", "openenv"]
CMD ["--scenarios", "verifiable", "--public", "--host", "0.0.0.0", "--port", "8000"]
