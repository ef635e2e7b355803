#!/usr/bin/env bash
# promtool, the Prometheus project's checker, for test/metrics.test.ts (`promtool check metrics` on
# every service's /metrics). Debian ships it inside the `prometheus` package; only that one binary
# is taken: the package is downloaded (not installed: no Prometheus server, no service, no user)
# and `usr/bin/promtool` is extracted into DEST/bin (default: .tools/ of this checkout).
# Idempotent; run by .ci/run, and by the test itself when it runs as root and finds no promtool.
set -euo pipefail
dest="${1:-$(cd "$(dirname "$0")/.." && pwd)/.tools}"
if [ -x "$dest/bin/promtool" ]; then exit 0; fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp" # apt's download user (_apt) writes there
download() { (cd "$tmp" && apt-get download -q prometheus >/dev/null 2>&1); }
download || { apt-get update -q >/dev/null && download; }
dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/root"
mkdir -p "$dest/bin"
install -m 755 "$tmp/root/usr/bin/promtool" "$dest/bin/promtool"
"$dest/bin/promtool" --version | head -1
