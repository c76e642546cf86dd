#!/usr/bin/env bash
# A Qdrant server on 127.0.0.1 for the server path (tests, scale-out, benchmarks).
#
#   deploy/qdrant/qdrant.sh start|stop|url
#
# Uses the Qdrant 1.18.1 build beside the checkout (../shared/bin/qdrant-server, or $DREAM_SHARED_BIN)
# when it is there; its storage and log live in $DREAM_QDRANT_HOME (default .cache/qdrant). Without it,
# run the official image of the same line and point QDRANT_URL at it:
#   docker run -d -p 6333:6333 -p 6334:6334 qdrant/qdrant:v1.18.1
#   export QDRANT_URL=http://127.0.0.1:6333
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin_dir="${DREAM_SHARED_BIN:-$root/../shared/bin}"
home="${DREAM_QDRANT_HOME:-$root/.cache/qdrant}"
port="${DREAM_QDRANT_PORT:-6333}"
server="$bin_dir/qdrant-server"

case "${1:-}" in
  start)
    if [ -x "$server" ]; then
      "$server" start "$home" "$port"
    elif [ -n "${QDRANT_URL:-}" ]; then
      curl -sf -m 5 "$QDRANT_URL/readyz" > /dev/null \
        || { echo "qdrant.sh: QDRANT_URL=$QDRANT_URL does not answer /readyz" >&2; exit 1; }
      echo "$QDRANT_URL"
    else
      echo "qdrant.sh: no Qdrant server here ($server is missing). Run the official image:" >&2
      echo "  docker run -d -p 6333:6333 -p 6334:6334 qdrant/qdrant:v1.18.1" >&2
      echo "  export QDRANT_URL=http://127.0.0.1:6333" >&2
      exit 1
    fi ;;
  stop)
    [ -x "$server" ] && "$server" stop "$home" || true ;;
  url)
    if [ -f "$home/qdrant.port" ]; then echo "http://127.0.0.1:$(cat "$home/qdrant.port")"; else echo "${QDRANT_URL:-}"; fi ;;
  *) echo "usage: deploy/qdrant/qdrant.sh start|stop|url" >&2; exit 2 ;;
esac
