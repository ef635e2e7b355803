# A stand-in for redis:7-alpine (npm run e2e): the local Debian base and bookworm's redis-server 7.0,
# started as the official image starts it (protected mode off: other containers reach it).
ARG BASE
FROM ${BASE}
RUN apt-get update && apt-get install -y --no-install-recommends redis-server && rm -rf /var/lib/apt/lists/*
COPY redis-entrypoint.sh /usr/local/bin/redis-entrypoint.sh
WORKDIR /data
ENTRYPOINT ["/usr/local/bin/redis-entrypoint.sh"]
CMD ["redis-server"]
