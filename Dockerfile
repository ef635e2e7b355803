# syntax=docker/dockerfile:1
#
# One image for every service of the CSI driver (journal, controller, node-agent).
# The services run straight from their TypeScript sources through tsx; the default
# CMD starts the journal and docker-compose.yml overrides `command` per service.
# The node-agent needs the block/filesystem tools below (losetup, mkfs.*, resize
# tools, mount/umount) and must run privileged; the other services ignore them.
FROM node:20-bookworm-slim

RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      ca-certificates util-linux e2fsprogs xfsprogs mount \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app

# Dependencies first, so this layer is cached until a manifest or the lockfile changes.
# Plain `npm ci` (not --omit=dev): tsx is a root devDependency and is needed at runtime.
# Do not set NODE_ENV=production before this step, or npm would skip devDependencies.
COPY package.json package-lock.json ./
COPY packages/contracts/package.json packages/contracts/
COPY packages/runtime/package.json packages/runtime/
COPY services/journal/package.json services/journal/
COPY services/controller/package.json services/controller/
COPY services/node-agent/package.json services/node-agent/
COPY packages/cli/package.json packages/cli/
RUN npm ci --no-audit --no-fund && npm cache clean --force

COPY tsconfig*.json ./
COPY packages/ packages/
COPY services/ services/

# Default locations used by docker-compose.yml: CSI sockets and the pool images.
RUN mkdir -p /csi /var/lib/csi/pools

CMD ["node", "--import", "tsx", "services/journal/src/main.ts"]
