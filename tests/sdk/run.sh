#!/usr/bin/env bash
# Runs OpenCode's own JavaScript client (tests/sdk/client.mjs) against `rewind serve`: builds the binary,
# starts it on a free port with a temporary data directory and a temporary git repository as its only
# project root, runs node, and stops the server (it must stop on SIGTERM).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

command -v node >/dev/null || { echo "node is not installed (Node 20 or later is needed)" >&2; exit 1; }
cargo build -q -p rewind --manifest-path "$root/Cargo.toml"
bin="${CARGO_TARGET_DIR:-$root/target}/debug/rewind"

(cd "$here" && npm ci --no-audit --no-fund --loglevel=error)

work="$(mktemp -d)"
server=""
cleanup() {
  if [ -n "$server" ] && kill -0 "$server" 2>/dev/null; then kill -KILL "$server" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

repo="$work/repo"
mkdir -p "$repo"
git -C "$repo" init -q
printf 'a0\n' > "$repo/a.txt"
git -C "$repo" add -A
git -C "$repo" -c user.name=sdk -c user.email=sdk@rewind.invalid commit -qm initial

(cd "$repo" && exec "$bin" serve --port 0 --data-dir "$work/data" --project-root "$repo") \
  > "$work/server.out" 2> "$work/server.err" &
server=$!
url=""
for _ in $(seq 1 300); do
  url="$(grep -o 'http://[0-9.:]*' "$work/server.out" | head -n1 || true)"
  [ -n "$url" ] && break
  kill -0 "$server" 2>/dev/null || { cat "$work/server.err" >&2; echo "rewind serve exited" >&2; exit 1; }
  sleep 0.1
done
[ -n "$url" ] || { cat "$work/server.err" >&2; echo "rewind serve did not start" >&2; exit 1; }

status=0
REWIND_URL="$url" REWIND_REPO="$repo" REWIND_BIN="$bin" REWIND_DATA="$work/data" node "$here/client.mjs" || status=$?

kill -TERM "$server"
for _ in $(seq 1 100); do kill -0 "$server" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$server" 2>/dev/null; then
  echo "rewind serve did not stop within 10 s of SIGTERM" >&2
  status=1
fi
wait "$server" 2>/dev/null || true
server=""
if [ "$status" -ne 0 ]; then
  echo "--- server log ---" >&2
  cat "$work/server.err" >&2
fi
exit "$status"
