#!/usr/bin/env bash
# Serving throughput end to end: starts `hyperstream serve SERVE_ARGS...` in the background,
# waits for /health, runs scripts/bench_server.py at each concurrency level, then stops the
# server with SIGTERM and checks that it exited 0. Writes to the output folder:
#   bench_server.md (the table), bench_server.json (the numbers; label: the serve arguments),
#   serve.log (the server's output).
#
#   scripts/bench_serve.sh [--port N] [--streams 1,8,32] [--max-tokens 256] [--out DIR]
#                          [--wait S] [--] SERVE_ARGS...
#     --port N        port to serve on (default 8123; 0: any free port)
#     --out DIR       output folder (default $OUT when set, else a new temporary folder)
#     --wait S        seconds the model may take to load (default 900)
#   Environment: HS_BIN, the command that runs hyperstream (default build/hyperstream, else
#   hyperstream on PATH); it is split on spaces and must exec the binary so that SIGTERM
#   reaches the server, e.g. HS_BIN="scripts/run_device_binaries.sh hyperstream".
#
# GPU example (docs/server.md "Measuring throughput"):
#   HS_BIN="scripts/run_device_binaries.sh hyperstream" scripts/bench_serve.sh --streams 1,8,32 \
#     -- --synthetic flash --layers 8 --device cuda:0 --max-seqs 32
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
port=8123
streams=1,8,32
max_tokens=256
out=${OUT:-}
wait_s=900
while [ $# -gt 0 ]; do
  case "$1" in
    --port) port=$2; shift 2 ;;
    --streams) streams=$2; shift 2 ;;
    --max-tokens) max_tokens=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --wait) wait_s=$2; shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
[ -n "$out" ] || out=$(mktemp -d "${TMPDIR:-/tmp}/bench_serve.XXXXXX")
mkdir -p "$out"
if [ -n "${HS_BIN:-}" ]; then
  read -r -a bin <<< "$HS_BIN"
elif [ -x "$root/build/hyperstream" ]; then
  bin=("$root/build/hyperstream")
else
  bin=(hyperstream)
fi
log=$out/serve.log
: > "$log"
die() { echo "bench_serve: $*" >&2; [ -s "$log" ] && tail -n 20 "$log" >&2; exit 1; }

echo "bench_serve: ${bin[*]} serve --port $port $*  (log: $log)" >&2
"${bin[@]}" serve --port "$port" "$@" > "$log" 2>&1 &
pid=$!
stop() {  # SIGTERM, SIGKILL after $1 s (137); the exit status of the server
  kill -TERM "$pid" 2> /dev/null
  local t=$((SECONDS + $1))
  while kill -0 "$pid" 2> /dev/null && [ $SECONDS -lt $t ]; do sleep 0.2; done
  kill -0 "$pid" 2> /dev/null && kill -KILL "$pid"
  wait "$pid"
}
trap 'stop 10' EXIT  # a failure: a loading server ignores SIGTERM until the model is ready

# The server prints its address before it loads the model (so --port 0 works), then /health
# answers 503 until the model is ready. A plain-bash HTTP GET: the device may lack curl.
health() {
  local line
  { exec 3<> "/dev/tcp/127.0.0.1/$1"; } 2> /dev/null || return 1
  printf 'GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
  IFS= read -r -t 5 line <&3
  exec 3>&-
  [[ $line == "HTTP/1."?" 200"* ]]
}
deadline=$((SECONDS + wait_s))
real_port=""
until [ -n "$real_port" ] && health "$real_port"; do
  kill -0 "$pid" 2> /dev/null || { wait "$pid"; die "the server exited ($?) before it was ready"; }
  [ $SECONDS -lt $deadline ] || die "the server was not ready after $wait_s s"
  [ -n "$real_port" ] || real_port=$(sed -n 's|.*listening on http://[^ ]*:\([0-9][0-9]*\).*|\1|p' "$log" | head -1)
  sleep 0.5
done
echo "bench_serve: $(grep -m1 'ready:' "$log" | sed 's/.*ready: //')" >&2

python3 "$root/scripts/bench_server.py" --url "http://127.0.0.1:$real_port" --streams "$streams" \
  --max-tokens "$max_tokens" --json "$out/bench_server.json" --label "serve $*" \
  --server-log "$log" | tee "$out/bench_server.md"
bench_rc=${PIPESTATUS[0]}

trap - EXIT
stop 120
rc=$?
[ $rc -eq 0 ] || die "the server exited with status $rc after SIGTERM"
grep -q "hyperstream serve: stopped" "$log" || die "the server did not log its clean stop"
[ "$bench_rc" -eq 0 ] || die "bench_server.py failed (status $bench_rc)"
echo "bench_serve: server stopped cleanly; results in $out" >&2
