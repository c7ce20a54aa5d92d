# syntax=docker/dockerfile:1
# The reward service: `evr1 serve reward` on CPU. Build from the repository root:
#   docker build -f docker/reward.Dockerfile -t ghcr.io/easyvideor1/reward:0.1.0 .
# Python packages are pinned by the project's lock files (the versions CI tests).

FROM python:3.11.13-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY requirements/cpu-vlm.lock requirements/cpu-extra.lock requirements/
COPY pyproject.toml README.md ./
COPY python python
COPY services services
COPY operators operators
RUN pip install --constraint requirements/cpu-vlm.lock --constraint requirements/cpu-extra.lock ".[rewards,serve]"

FROM python:3.11.13-slim-bookworm
# bubblewrap: the code sandbox; chromium: HTML rendering scorer; cairo + fonts: SVG scorer.
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap chromium fonts-dejavu-core libcairo2 \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 evr1 \
 && useradd --system --uid 10001 --gid 10001 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin evr1
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 HOME=/tmp
USER 10001:10001
EXPOSE 8000
ENTRYPOINT ["evr1"]
CMD ["serve", "reward", "--host", "0.0.0.0", "--port", "8000"]
