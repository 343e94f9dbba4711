#!/usr/bin/env bash
# deploy/cluster.sh start|stop|status: one Redis (deploy/redis.conf), three
# Strata replicas sharing it as their KV tier, and HAProxy in front
# (deploy/haproxy.cfg), all on 127.0.0.1. Everything started is recorded
# in $RUN/*.pid and stopped by `stop`, which waits for each process.
#
#   MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf deploy/cluster.sh start
#   curl -H 'x-session-id: s1' localhost:8090/v1/chat/completions -d ...
#   deploy/cluster.sh stop
#
# Environment: MODEL, STRATA (./strata), RUN (/tmp/strata-cluster: pids,
# logs, each replica's disk tier), LB_PORT (8090), REPLICA_PORTS
# ("8091 8092 8093"), REDIS_PORT (6390), SERVE_ARGS (extra flags for
# every replica, e.g. "--parallel 2 --threads 1"), SHARED (1; 0 starts
# the replicas without --cache-redis, for comparison: bench/bench_cluster.py).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
MODEL=${MODEL:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}
STRATA=${STRATA:-$ROOT/strata}
RUN=${RUN:-/tmp/strata-cluster}
LB_PORT=${LB_PORT:-8090}
REPLICA_PORTS=(${REPLICA_PORTS:-8091 8092 8093})
REDIS_PORT=${REDIS_PORT:-6390}
HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)

# Waits (bounded) until a URL answers 200, or fails.
wait_http() {
  for _ in $(seq 1 300); do
    curl -sf -o /dev/null "$1" && return 0
    sleep 0.1
  done
  echo "cluster: $1 did not come up; see $RUN/*.log" >&2
  return 1
}

start() {
  mkdir -p "$RUN"
  redis-server "$HERE/redis.conf" --port "$REDIS_PORT" --dir "$RUN" >"$RUN/redis.log" 2>&1 &
  echo $! >"$RUN/redis.pid"
  for _ in $(seq 1 100); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
  local i=0 shared=(--cache-redis "redis://127.0.0.1:$REDIS_PORT")
  [ "${SHARED:-1}" = 0 ] && shared=()
  for p in "${REPLICA_PORTS[@]}"; do
    i=$((i + 1))
    # shellcheck disable=SC2086
    "$STRATA" serve -m "$MODEL" --port "$p" --cache-dir "$RUN/kv-$i" \
      "${shared[@]}" ${SERVE_ARGS:-} >"$RUN/replica-$i.log" 2>&1 &
    echo $! >"$RUN/replica-$i.pid"
  done
  for p in "${REPLICA_PORTS[@]}"; do wait_http "http://127.0.0.1:$p/health"; done
  STRATA_LB_PORT=$LB_PORT STRATA_PORT_A=${REPLICA_PORTS[0]} STRATA_PORT_B=${REPLICA_PORTS[1]} \
    STRATA_PORT_C=${REPLICA_PORTS[2]} "$HAPROXY" -db -f "$HERE/haproxy.cfg" >"$RUN/haproxy.log" 2>&1 &
  echo $! >"$RUN/haproxy.pid"
  wait_http "http://127.0.0.1:$LB_PORT/health"
  echo "cluster: http://127.0.0.1:$LB_PORT -> replicas ${REPLICA_PORTS[*]}, redis 127.0.0.1:$REDIS_PORT; logs in $RUN"
}

# SIGTERM each recorded process (HAProxy first, Redis last, so replicas
# drain their writes into it), then waits for it (SIGKILL after 30 s).
stop() {
  for f in "$RUN"/haproxy.pid "$RUN"/replica-*.pid "$RUN"/redis.pid; do
    [ -f "$f" ] || continue
    local pid
    pid=$(cat "$f")
    if kill -TERM "$pid" 2>/dev/null; then
      for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
  done
  echo "cluster: stopped"
}

status() {
  for f in "$RUN"/*.pid; do
    [ -f "$f" ] || continue
    local pid
    pid=$(cat "$f")
    if kill -0 "$pid" 2>/dev/null; then echo "$(basename "$f" .pid): running ($pid)"; else echo "$(basename "$f" .pid): gone"; fi
  done
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
