#!/usr/bin/env bash
# A second nats-server beside the system's (Debian bookworm's 2.9.10, /usr/sbin/nats-server): the
# binary of Debian trixie's `nats-server` package (2.10.x), to run the tests against it with
# NATS_SERVER_BIN=<the printed path> (tools/testkit/src/local-servers.ts, findBinary;
# docs/operations.md, "Which nats-server").
#
# Only Debian's archive is used, and every step is checked: the suite's InRelease is verified with
# gpgv against the machine's Debian archive keyring, the Packages index against the SHA256 that
# InRelease lists for it, and the .deb against the SHA256 the index lists for it. The package is
# not installed (no service, no user, nothing replaced): `usr/sbin/nats-server` is extracted with
# dpkg-deb -x into DEST (default ~/.cache/csi-event-driver/nats-server-<suite>), outside the
# repository. Prints the binary's path on stdout (progress goes to stderr).
#
# Idempotent: a binary already in DEST is reused without touching the network; --refresh fetches
# the suite's current package again. Run by .ci/run.
#
#   bash scripts/install-nats-server.sh [--refresh] [DEST]
#   NATS_DEB_SUITE (default trixie), NATS_DEB_MIRROR (default http://deb.debian.org/debian)
set -euo pipefail
refresh=0
if [ "${1:-}" = "--refresh" ]; then
  refresh=1
  shift
fi
suite="${NATS_DEB_SUITE:-trixie}"
mirror="${NATS_DEB_MIRROR:-http://deb.debian.org/debian}"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
arch="$(dpkg --print-architecture)"
dest="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/csi-event-driver/nats-server-$suite}"
bin="$dest/nats-server"
say() { echo "install-nats-server: $*" >&2; }
fail() {
  say "$*"
  exit 1
}

if [ "$refresh" = 0 ] && [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
for tool in curl gpgv xz dpkg-deb sha256sum; do
  command -v "$tool" >/dev/null || fail "$tool is needed (apt-get install curl gpgv xz-utils dpkg coreutils)"
done
[ -r "$keyring" ] || fail "$keyring missing (apt-get install debian-archive-keyring)"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
get() { curl -fsS --retry 3 --max-time 300 -o "$2" "$mirror/$1" || fail "could not download $mirror/$1"; }
# sha256 <file> <expected>
sha256() { echo "$2  $1" | sha256sum -c --quiet - >/dev/null 2>&1 || fail "$1: SHA256 is not the one Debian's index lists ($2)"; }

index="main/binary-$arch/Packages.xz"
get "dists/$suite/InRelease" "$tmp/InRelease"
gpgv --keyring "$keyring" --output "$tmp/Release" "$tmp/InRelease" 2>"$tmp/gpgv.log" ||
  fail "dists/$suite/InRelease: bad signature: $(cat "$tmp/gpgv.log")"
# The SHA256 section of the (now verified) Release: " <hash> <size> <path>" lines.
index_sha="$(awk -v f="$index" '/^SHA256:/{s=1; next} /^[^ ]/{s=0} s && $3==f {print $1}' "$tmp/Release")"
[ -n "$index_sha" ] || fail "dists/$suite/Release lists no $index"
get "dists/$suite/$index" "$tmp/Packages.xz"
sha256 "$tmp/Packages.xz" "$index_sha"

# The nats-server stanza of the (now verified) index.
xz -dc "$tmp/Packages.xz" | awk '/^Package: /{p=($2=="nats-server")} p' >"$tmp/stanza"
field() { sed -n "s/^$1: //p" "$tmp/stanza" | head -1; }
version="$(field Version)"
file="$(field Filename)"
deb_sha="$(field SHA256)"
[ -n "$version" ] && [ -n "$file" ] && [ -n "$deb_sha" ] || fail "$suite main $arch has no nats-server package"
say "Debian $suite: nats-server $version ($file)"
get "$file" "$tmp/nats-server.deb"
sha256 "$tmp/nats-server.deb" "$deb_sha"

dpkg-deb -x "$tmp/nats-server.deb" "$tmp/root"
[ -x "$tmp/root/usr/sbin/nats-server" ] || fail "$file holds no usr/sbin/nats-server"
mkdir -p "$dest"
install -m 755 "$tmp/root/usr/sbin/nats-server" "$bin.new"
mv -f "$bin.new" "$bin"
echo "$version" >"$dest/deb-version"
say "$("$bin" --version)"
echo "$bin"
