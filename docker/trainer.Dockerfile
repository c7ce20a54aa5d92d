# syntax=docker/dockerfile:1
# The trainer image of the RayJob: Ray + torch (FSDP) + vLLM on CUDA. KubeRay starts
# `ray start` in it; the job runs `evr1 train /etc/easyvideor1/run.yaml distributed.mode=distributed`.
#   docker build -f docker/trainer.Dockerfile -t ghcr.io/easyvideor1/trainer:0.1.0 .

FROM nvidia/cuda:12.9.1-base-ubuntu24.04 AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY requirements/cpu-extra.lock requirements/
COPY pyproject.toml README.md ./
COPY python python
COPY services services
COPY operators operators
# The GPU stack first, pinned; then the project with the rest of the lock as constraints.
RUN pip install vllm==0.32.0 torch==2.13.0 "ray[default,serve]==2.60.0"
RUN pip install --constraint requirements/cpu-extra.lock ".[train,serve,rewards]"

FROM nvidia/cuda:12.9.1-base-ubuntu24.04
ENV DEBIAN_FRONTEND=noninteractive
# bubblewrap, chromium, cairo, fonts: in-process reward scoring when worker.reward.url is unset.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 ca-certificates bubblewrap chromium \
      fonts-dejavu-core libcairo2 \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 evr1 \
 && useradd --system --uid 10001 --gid 10001 --home-dir /tmp --no-create-home --shell /bin/bash evr1
COPY --from=build /opt/venv /opt/venv
# KubeRay starts `ray start` (and its init and submitter containers) through `bash -l`, whose
# /etc/profile resets PATH: login shells get the venv back from profile.d.
RUN echo 'export PATH=/opt/venv/bin:$PATH' > /etc/profile.d/evr1-venv.sh
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 HOME=/tmp \
    RAY_USAGE_STATS_ENABLED=0
USER 10001:10001
EXPOSE 8265 6379 10001
ENTRYPOINT ["evr1"]
CMD ["train", "/etc/easyvideor1/run.yaml", "distributed.mode=distributed"]
