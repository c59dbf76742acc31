#!/usr/bin/env bash
# The real browser `granary report --html` is checked in (cli/tests/report_html.rs): Debian's
# chromium, run headless. `scripts/browser.sh install` installs it when it is missing (apt; as
# root, or through sudo), as `make test` does; `scripts/browser.sh path` prints the binary.
set -euo pipefail
find_browser() {
  for b in "${GRANARY_BROWSER:-}" chromium chromium-browser; do
    if [ -n "$b" ] && command -v "$b" >/dev/null 2>&1; then command -v "$b"; return 0; fi
  done
  return 1
}
case "${1:-}" in
  install)
    if find_browser >/dev/null; then exit 0; fi
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    echo "installing Debian's chromium for the HTML report's test" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null
    find_browser >/dev/null
    ;;
  path)
    find_browser || { echo "no chromium: run scripts/browser.sh install" >&2; exit 1; }
    ;;
  *)
    echo "usage: $0 install|path" >&2
    exit 2
    ;;
esac
