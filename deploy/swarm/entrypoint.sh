#!/bin/bash
# The Swarm plugin's PID 1 (deploy/swarm/config.json): the controller and the node-agent of our image,
# each on its own socket under /run/csi, and the plugin mux (services/controller/src/plugin/mux.ts)
# on the one socket Docker talks to, /run/docker/plugins/csi.sock (Identity and Controller calls to
# the controller, Node calls to the node-agent). The first of the three to end ends the plugin
# (Docker then shows it disabled); SIGTERM (docker plugin disable) stops all three, each draining
# its calls. As PID 1 this shell also reaps rbd-fuse's daemonized processes.
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
[ -n "${NODE_ID:-}" ] || unset NODE_ID
cd /app || exit 1
mkdir -p /run/csi /data/staged /data/published
node services/controller/dist/main.js --endpoint unix:///run/csi/csi-controller.sock &
node services/node-agent/dist/main.js --endpoint unix:///run/csi/csi-node.sock &
node services/controller/dist/plugin/main.js --endpoint unix:///run/docker/plugins/csi.sock \
  --controller-endpoint unix:///run/csi/csi-controller.sock --node-endpoint unix:///run/csi/csi-node.sock &
children=$(jobs -p)
stop() {
  kill -TERM $children 2>/dev/null
  wait
  exit "${1:-0}"
}
trap 'stop 0' TERM INT
wait -n
status=$?
echo "csi-plugin: a process ended (status $status); stopping the others" >&2
stop "$status"
