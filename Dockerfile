# syntax=docker/dockerfile:1
# Loom on the CPU: serves config/default.yaml (the demo model) on port 3000.
#
#   docker build -t loom .
#   docker run --rm -p 3000:3000 loom
#
# The native runtime is compiled for the CPU of the machine that builds the image (-march=native,
# with AVX-512 when that machine has it). Build the image on the CPU family it will serve on, or
# pass --build-arg LOOM_NATIVE_ISA=avx2 for the AVX2 + FMA + F16C kernels with AVX-512 off (the
# variant for serving CPUs without AVX-512). core/test/deploy/dockerfiles.test.ts keeps the RUN
# steps below equal to the README's and CI's commands.

ARG NODE_VERSION=20

FROM node:${NODE_VERSION}-bookworm AS build
# node-gyp's toolchain (the bookworm image ships it already; listed so the build says what it needs).
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
# Unset: the build machine's vector units; avx2: AVX-512 off. A build argument is in RUN's
# environment only when given, where scripts/build.mjs reads it.
ARG LOOM_NATIVE_ISA
COPY . .
# The README's install command: dependencies, then the native addon (postinstall).
RUN npm ci
# Dev dependencies stay: the server runs TypeScript through tsx, a devDependency of the root, and
# `npm prune --omit=dev` would remove it (dockerfiles.test.ts fails if a prune is added while it is).

FROM node:${NODE_VERSION}-bookworm-slim
# The listening port, whatever the config says: EXPOSE and HEALTHCHECK use it.
ENV PORT=3000
WORKDIR /app
COPY --from=build --chown=1000:1000 /app /app
# Config volume (mount a config there and set LOOM_CONFIG) and the adapter cache: the demo
# config's cache_dir (../.loom-cache/adapters) resolves through the link into the volume.
RUN mkdir -p /etc/loom /var/cache/loom \
 && chown 1000:1000 /etc/loom /var/cache/loom \
 && ln -s /var/cache/loom /app/.loom-cache
VOLUME ["/etc/loom", "/var/cache/loom"]
# The node image's unprivileged user, by number so Kubernetes' runAsNonRoot can check it.
USER 1000:1000
EXPOSE 3000
# /health answers 503 while the model loads: the start period covers loading a large model.
HEALTHCHECK --interval=30s --timeout=5s --start-period=300s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 3000) + '/health').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# `npm run serve` without npm in between, so SIGTERM reaches the server and it drains: the config
# is --config, else $LOOM_CONFIG, else config/default.yaml; $PORT overrides server.port.
CMD ["node", "--import", "tsx", "core/src/cli/main.ts", "serve"]
