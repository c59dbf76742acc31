#!/usr/bin/env bash
# The local AWS emulator (moto server) for tests, the demo and benchmarks.
#
#   scripts/emulator.sh install          create .venv and install moto (once)
#   scripts/emulator.sh run CMD ARGS...  start moto on a free loopback port, run CMD with
#                                        AWS_ENDPOINT_URL pointing at it, stop moto whatever happens
#
# If AWS_ENDPOINT_URL is already set, `run` uses that endpoint and starts nothing (LocalStack,
# a moto you started yourself, ...).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv"
moto_spec="moto[server]==5.2.5"
stamp="$venv/.moto-5.2.5"

install() {
  if [ -f "$stamp" ]; then return 0; fi
  command -v python3 >/dev/null || { echo "python3 is needed for the emulator (moto)" >&2; exit 1; }
  echo "installing $moto_spec into .venv (about a minute, once)..." >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "$moto_spec"
  touch "$stamp"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

run() {
  export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-testing}"
  export AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-testing}"
  export AWS_REGION="${AWS_REGION:-us-east-1}"
  export AWS_DEFAULT_REGION="$AWS_REGION"
  if [ -n "${AWS_ENDPOINT_URL:-}" ]; then
    echo "using the emulator at $AWS_ENDPOINT_URL" >&2
    exec "$@"
  fi
  install
  local port log
  port=$(free_port)
  mkdir -p "$root/.emulator"
  log="$root/.emulator/moto-$port.log"
  "$venv/bin/moto_server" -H 127.0.0.1 -p "$port" >"$log" 2>&1 &
  moto_pid=$!
  trap 'kill $moto_pid 2>/dev/null || true; wait $moto_pid 2>/dev/null || true' EXIT INT TERM
  local url="http://127.0.0.1:$port"
  for _ in $(seq 1 100); do
    if curl -fsS "$url/moto-api/" >/dev/null 2>&1; then break; fi
    if ! kill -0 $moto_pid 2>/dev/null; then echo "moto failed to start; see $log" >&2; cat "$log" >&2; exit 1; fi
    sleep 0.1
  done
  # Batch jobs and Lambdas without Docker: jobs finish inside SubmitJob.
  curl -fsS -X POST -H 'Content-Type: application/json' \
    -d '{"batch":{"use_docker":false},"lambda":{"use_docker":false}}' "$url/moto-api/config" >/dev/null
  echo "moto server on $url (log: $log)" >&2
  export AWS_ENDPOINT_URL="$url"
  set +e
  "$@"
  local rc=$?
  set -e
  return $rc
}

case "${1:-}" in
  install) install ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 install | run CMD [ARGS...]" >&2; exit 2 ;;
esac
