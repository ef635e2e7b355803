# A stand-in for nats:2.10-alpine (npm run e2e): the local Debian base, Debian trixie's nats-server
# 2.10 (scripts/install-nats-server.sh) and wget for the compose file's healthcheck.
ARG BASE
FROM ${BASE}
RUN apt-get update && apt-get install -y --no-install-recommends wget && rm -rf /var/lib/apt/lists/*
COPY nats-server /usr/local/bin/nats-server
ENTRYPOINT ["nats-server"]
