# One image for every service of the CSI driver (journal, controller, node-agent) and csictl.
# Stage `build` compiles the TypeScript (npm run build: every workspace's src/ into its dist/);
# the final stage holds only what runs: the compiled dist/ directories, the package.json files,
# the CSI proto (read at run time) and the production dependencies (npm ci --omit=dev: no tsx,
# no typescript). The default CMD starts the journal; docker-compose.yml and the manifests set
# `command` per service (node services/<name>/dist/main.js, node tools/csictl/dist/main.js).
# test/deploy.test.ts checks this file; test/image.test.ts replays its final stage (docs/building.md);
# `npm run e2e` builds it with a real Docker engine and runs the compose file and the Swarm plugin
# from it (docs/deploy.md, "The end-to-end run").
# No `# syntax=` line: it would make BuildKit fetch a frontend image from Docker Hub for every build,
# and nothing here needs a newer frontend than the engine's own (a build works offline).
#
# Node: the 24 LTS line, as package.json's engines say (npm ci --engine-strict refuses any other);
# node:24 follows the line's patch releases, CI tests the release .ci/with-node pins, and
# test/node-line.test.ts keeps the three on one line (docs/building.md, "Which Node").

# The lockfile and every workspace's package.json (npm ci needs them all), for both stages below.
FROM node:24-bookworm-slim AS manifests
WORKDIR /app
COPY package.json package-lock.json ./
COPY packages/contracts/package.json packages/contracts/
COPY packages/runtime/package.json packages/runtime/
COPY services/journal/package.json services/journal/
COPY services/controller/package.json services/controller/
COPY services/node-agent/package.json services/node-agent/
COPY tools/csictl/package.json tools/csictl/
COPY tools/testkit/package.json tools/testkit/

FROM node:24-bookworm-slim AS build
WORKDIR /app
# Dependencies first, so this layer is cached until a manifest or the lockfile changes.
COPY --from=manifests /app ./
RUN npm ci --engine-strict --no-audit --no-fund
COPY tsconfig.base.json tsconfig.build.json ./
COPY packages/ packages/
COPY services/ services/
COPY tools/ tools/
RUN npm run build

FROM node:24-bookworm-slim
# The node-agent needs the block/filesystem tools (losetup, mkfs.*, resize tools, mount/umount)
# and rbd-fuse (it maps RBD images through rbd-fuse + a loop device), and must run privileged;
# the journal needs python3-rbd and python3-rados (Ceph's librbd and librados bindings: its RBD
# pools' helper imports both, and Debian 12's python3-rbd does not pull in python3-rados;
# docs/backends.md); each service ignores the others' tools. rbd-fuse daemonizes and is then
# reparented to the container's PID 1: the deployments give the node-agent's container a reaping
# PID 1 (Kubernetes shareProcessNamespace, Compose and Nomad `init`; docs/deploy.md).
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      ca-certificates util-linux e2fsprogs xfsprogs mount python3-rados python3-rbd rbd-fuse \
 && rm -rf /var/lib/apt/lists/*
# Every backend's runtime needs, checked in the image itself (a missing one fails the build): the
# journal's RBD helper imports rados and rbd; the node-agent runs the rest.
RUN /usr/bin/python3 -c "import rados, rbd" \
 && for t in rbd-fuse losetup blockdev blkid mkfs.ext4 mkfs.xfs resize2fs xfs_growfs mount umount; do command -v "$t" >/dev/null || { echo "the image lacks $t" >&2; exit 1; }; done
WORKDIR /app
ENV NODE_ENV=production
COPY --from=manifests /app ./
RUN npm ci --engine-strict --omit=dev --no-audit --no-fund && npm cache clean --force
COPY --from=build /app/packages/contracts/dist packages/contracts/dist
COPY --from=build /app/packages/contracts/proto packages/contracts/proto
COPY --from=build /app/packages/runtime/dist packages/runtime/dist
COPY --from=build /app/services/journal/dist services/journal/dist
COPY --from=build /app/services/controller/dist services/controller/dist
COPY --from=build /app/services/node-agent/dist services/node-agent/dist
COPY --from=build /app/tools/csictl/dist tools/csictl/dist
COPY --from=build /app/tools/csictl/bin tools/csictl/bin
# Default locations used by docker-compose.yml: CSI sockets and the pool images.
RUN mkdir -p /csi /var/lib/csi/pools

CMD ["node", "services/journal/dist/main.js"]
