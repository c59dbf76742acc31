#!/usr/bin/env bash
# LocalStack (the free core, on the host: no Docker) for `make test-localstack`.
#
#   scripts/localstack.sh install          .venv-localstack with LocalStack core, once (Python 3.13)
#   scripts/localstack.sh run CMD ARGS...  start LocalStack on a free loopback port, run CMD with
#                                          AWS_ENDPOINT_URL pointing at it, stop it whatever happens
#
# What it takes (measured here; see docs/testing.md): `localstack-core[runtime]` (plain
# localstack-core installs no server) with cbor2<6, pyopenssl<25, cryptography<45; the hypercorn
# gateway (GATEWAY_SERVER=hypercorn), which binds only the GATEWAY_LISTEN address (the default
# twisted server listens on every interface) — checked after start, and LocalStack is stopped if
# anything of it listens beyond loopback; analytics off (DISABLE_EVENTS=1), or it hangs on SIGTERM.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv-localstack"
version=2026.3.0
stamp="$venv/.localstack-$version"

python313() {
  if command -v python3.13 >/dev/null 2>&1 && python3.13 --version >/dev/null 2>&1; then
    command -v python3.13
    return
  fi
  # pyenv installs versions it does not put on PATH globally.
  local p
  for p in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.13*/bin/python3.13; do
    if [ -x "$p" ]; then echo "$p"; return; fi
  done
  echo "LocalStack $version needs Python 3.13 (python3.13 not found)" >&2
  exit 1
}

install() {
  if [ -f "$stamp" ]; then return 0; fi
  echo "installing LocalStack core $version into .venv-localstack (about a minute, once)..." >&2
  "$(python313)" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    "localstack-core[runtime]==$version" "cbor2<6" "pyopenssl<25" "cryptography<45"
  touch "$stamp"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# Every listening socket of LocalStack's process tree that is not on loopback.
exposed() {
  local pids
  pids=$(pgrep -P "$1" 2>/dev/null | tr '\n' ' ')
  ss -ltnpH 2>/dev/null | while read -r _ _ _ local _ process; do
    for p in $1 $pids; do
      case "$process" in
        *"pid=$p,"*)
          case "$local" in 127.0.0.1:* | "[::1]:"*) ;; *) echo "$local" ;; esac ;;
      esac
    done
  done
}

# SIGTERM first; a LocalStack that has run CloudFormation and EventBridge does not always finish
# its shutdown, so after ten seconds its process group is killed.
stop() {
  [ -n "${ls_pid:-}" ] || return 0
  kill -TERM -- "-$ls_pid" 2>/dev/null || kill -TERM "$ls_pid" 2>/dev/null || return 0
  for _ in $(seq 1 50); do
    kill -0 "$ls_pid" 2>/dev/null || { wait "$ls_pid" 2>/dev/null || true; return 0; }
    sleep 0.2
  done
  echo "LocalStack did not stop within 10 s of SIGTERM: killed" >&2
  kill -KILL -- "-$ls_pid" 2>/dev/null || kill -KILL "$ls_pid" 2>/dev/null || true
  wait "$ls_pid" 2>/dev/null || true
}

run() {
  export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-test}"
  export AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-test}"
  export AWS_REGION="${AWS_REGION:-us-east-1}"
  export AWS_DEFAULT_REGION="$AWS_REGION"
  install
  local port log
  port=$(free_port)
  mkdir -p "$root/.emulator"
  log="$root/.emulator/localstack-$port.log"
  # Its own process group (setsid), so stopping it stops whatever it started.
  OVERRIDE_IN_DOCKER=0 GATEWAY_SERVER=hypercorn GATEWAY_LISTEN="127.0.0.1:$port" \
    LOCALSTACK_HOST="127.0.0.1:$port" DNS_ADDRESS=0 DISABLE_EVENTS=1 SKIP_SSL_CERT_DOWNLOAD=1 \
    setsid "$venv/bin/python" -m localstack.runtime.main >"$log" 2>&1 &
  ls_pid=$!
  trap stop EXIT INT TERM
  local url="http://127.0.0.1:$port"
  for _ in $(seq 1 300); do
    if curl -fsS "$url/_localstack/health" >/dev/null 2>&1; then break; fi
    if ! kill -0 $ls_pid 2>/dev/null; then echo "LocalStack failed to start; see $log" >&2; tail -20 "$log" >&2; exit 1; fi
    sleep 0.2
  done
  curl -fsS "$url/_localstack/health" >/dev/null || { echo "LocalStack did not become healthy; see $log" >&2; exit 1; }
  local open
  open=$(exposed "$ls_pid")
  if [ -n "$open" ]; then
    echo "LocalStack listens beyond loopback ($open): stopped" >&2
    exit 1
  fi
  echo "LocalStack $version on $url, loopback only (log: $log)" >&2
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
