# syntax=docker/dockerfile:1
#
# The fleet image: fleet-worker, fleet-produce and fleet-lag on Debian slim,
# with the libtorch they were linked against. Targets:
#
#   docker build -t fleet .                          runtime, CPU libtorch
#   docker build -t fleet:cuda \
#     --build-arg TORCH_INDEX_URL=https://pypi.org/simple .
#                                                    runtime, CUDA libtorch (PyPI's
#                                                    torch wheel; needs a host
#                                                    driver for its CUDA release)
#   docker build --target models -t fleet-models:1 . the model repository made by
#                                                    `make setup` (./models), for the
#                                                    Helm chart's initContainer
#
# How libtorch gets in: tch (torch-sys) builds against the torch of a Python
# venv (LIBTORCH_USE_PYTORCH=1, the venv's python first on PATH), and
# crates/fleet-worker/build.rs gives the binary an rpath to that venv's
# torch/lib. The runtime stage therefore keeps torch/lib (and, for CUDA, the
# nvidia/ libraries torch/lib's own rpath points at) at the very same path.

ARG DEBIAN_RELEASE=bookworm
ARG RUST_VERSION=1.95

# ---------------------------------------------------------------- builder
FROM rust:${RUST_VERSION}-${DEBIAN_RELEASE} AS builder
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# cmake + nasm: libjpeg-turbo (vendored by turbojpeg-sys, SIMD required);
# librdkafka and oniguruma build with the C toolchain the image has.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      cmake nasm python3 python3-venv pkg-config libssl-dev zlib1g-dev \
 && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir --progress-bar off \
      --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}" \
 && test -d /opt/venv/lib/python3.11/site-packages/torch/lib \
 && mkdir -p /opt/venv/lib/python3.11/site-packages/nvidia \
             /opt/venv/lib/python3.11/site-packages/torch.libs
ENV LIBTORCH_USE_PYTORCH=1 \
    PATH=/opt/venv/bin:${PATH} \
    CARGO_TARGET_DIR=/build/target
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY crates ./crates
COPY scripts/models ./scripts/models
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/build/target,sharing=locked \
    cargo build --release --locked \
      --bin fleet-worker --bin fleet-produce --bin fleet-lag \
 && mkdir -p /out/bin \
 && cp /build/target/release/fleet-worker /build/target/release/fleet-produce \
       /build/target/release/fleet-lag /out/bin/ \
 && readelf -d /out/bin/fleet-worker | grep -E 'R(UN)?PATH'

# ----------------------------------------------------------------- models
# The model repository (models/<model>/config.toml and versions), for the
# chart's initContainer, which needs sh and cp.
FROM busybox:1.36 AS models
COPY models/ /models/
USER 10001:10001

# ---------------------------------------------------------------- runtime
FROM debian:${DEBIAN_RELEASE}-slim AS runtime
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libgomp1 libssl3 zlib1g \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 fleet \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin fleet
# Same paths as in the builder: the binaries' rpath points here.
COPY --from=builder /opt/venv/lib/python3.11/site-packages/torch/lib /opt/venv/lib/python3.11/site-packages/torch/lib
COPY --from=builder /opt/venv/lib/python3.11/site-packages/torch.libs /opt/venv/lib/python3.11/site-packages/torch.libs
COPY --from=builder /opt/venv/lib/python3.11/site-packages/nvidia /opt/venv/lib/python3.11/site-packages/nvidia
COPY --from=builder /out/bin/ /usr/local/bin/
# Fail the build, not the pod, when a library is missing.
RUN for bin in fleet-worker fleet-produce fleet-lag; do \
      if ldd "/usr/local/bin/$bin" | grep 'not found'; then echo "$bin: missing libraries" >&2; exit 1; fi; \
      "/usr/local/bin/$bin" --help >/dev/null || exit 1; \
    done
ENV HOME=/tmp \
    FLEET_MODEL_REPO=/models
USER 10001:10001
EXPOSE 9464 9466
CMD ["fleet-worker"]
