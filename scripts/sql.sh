#!/usr/bin/env bash
# SQL engines for checking athena/: sqlglot (Athena-dialect parser, transpiler) and DuckDB.
#
#   scripts/sql.sh install     create .venv-sql with both (once)
#   scripts/sql.sh parse       parse every athena/**/*.sql as Athena SQL
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv-sql"
stamp="$venv/.installed-sqlglot-30.30.0-duckdb-2.0.0"

install() {
  if [ -f "$stamp" ]; then return 0; fi
  echo "installing sqlglot and duckdb into .venv-sql (once)..." >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "sqlglot==30.30.0" "duckdb==2.0.0"
  touch "$stamp"
}

case "${1:-}" in
  install) install ;;
  parse) install; "$venv/bin/python" "$root/scripts/athena_check.py" parse ;;
  *) echo "usage: $0 install|parse" >&2; exit 2 ;;
esac
