#!/usr/bin/env bash
# Makes the Swarm managed plugin from our image: its rootfs is the image's filesystem (docker create
# + docker export), plus this directory's entrypoint.sh and the clusters file; config.json beside it.
# Then `docker plugin create NAME DIR` (docs/deploy.md, "Docker Swarm").
#
#   deploy/swarm/make-plugin.sh [IMAGE] [DIR] [CLUSTERS_FILE]
#     IMAGE          default csi-event-driver:<package.json version> (build it first: docker build -t ... .)
#     DIR            default ./run/swarm-plugin (replaced)
#     CLUSTERS_FILE  default deploy/clusters.json, carried at /etc/csi/clusters.json
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
version="$(sed -n 's/^  "version": "\(.*\)",$/\1/p' "$root/package.json" | head -1)"
image="${1:-csi-event-driver:$version}"
dir="${2:-$root/run/swarm-plugin}"
clusters="${3:-$root/deploy/clusters.json}"

rm -rf "$dir"
mkdir -p "$dir/rootfs"
id="$(docker create "$image")"
trap 'docker rm -f "$id" >/dev/null' EXIT
docker export "$id" | tar -x -C "$dir/rootfs"
install -m 755 "$here/entrypoint.sh" "$dir/rootfs/usr/local/bin/csi-plugin-entrypoint"
install -D -m 644 "$clusters" "$dir/rootfs/etc/csi/clusters.json"
cp "$here/config.json" "$dir/config.json"
echo "$dir"
