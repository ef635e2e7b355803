#!/bin/sh
# As the official image's build: protected mode off (the server is reached from other containers).
[ "${1:-}" = redis-server ] && shift && set -- redis-server --protected-mode no "$@"
exec "$@"
