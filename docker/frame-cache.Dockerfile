# syntax=docker/dockerfile:1
# The frame-cache service: `evr1 serve frame-cache` on CPU (PyAV wheels bundle FFmpeg).
#   docker build -f docker/frame-cache.Dockerfile -t ghcr.io/easyvideor1/frame-cache:0.1.0 .

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
RUN pip install --constraint requirements/cpu-vlm.lock --constraint requirements/cpu-extra.lock ".[serve]"

FROM python:3.11.13-slim-bookworm
RUN groupadd --system --gid 10001 evr1 \
 && useradd --system --uid 10001 --gid 10001 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin evr1
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 HOME=/tmp
USER 10001:10001
EXPOSE 8001
ENTRYPOINT ["evr1"]
# Standalone default: a throwaway local store; the chart passes an s3:// store and a redis:// queue.
CMD ["serve", "frame-cache", "--host", "0.0.0.0", "--port", "8001", "--store", "/tmp/frames"]
