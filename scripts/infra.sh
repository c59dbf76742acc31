#!/usr/bin/env bash
# Infrastructure checks and emulator deployment for infra/template.yaml.
#
#   scripts/infra.sh install           .venv-infra with cfn-lint, checkov, aws-sam-translator (once)
#   scripts/infra.sh lint              cfn-lint and checkov must both be clean
#   scripts/infra.sh deploy OUT.json   deploy to the emulator at AWS_ENDPOINT_URL, outputs to OUT.json
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv-infra"
stamp="$venv/.installed-1"
template="$root/infra/template.yaml"

install() {
  if [ -f "$stamp" ]; then return 0; fi
  echo "installing cfn-lint, checkov and aws-sam-translator into .venv-infra (once)..." >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    "cfn-lint==1.58.0" "checkov==3.3.30" "aws-sam-translator==1.115.0" boto3 pyyaml
  touch "$stamp"
}

lint() {
  install
  echo "cfn-lint $template" >&2
  "$venv/bin/cfn-lint" "$template"
  echo "checkov $template" >&2
  # --skip-download: no calls to checkov's cloud service; skipped checks are justified in the template.
  "$venv/bin/checkov" --quiet --compact --skip-download --framework cloudformation -f "$template"
}

deploy() {
  install
  local out="$1"
  "$venv/bin/python" "$root/infra/emulator_deploy.py" --stack-name "granary-$(date +%s)-$$" --outputs "$out"
}

case "${1:-}" in
  install) install ;;
  lint) lint ;;
  deploy) shift; deploy "$@" ;;
  *) echo "usage: $0 install | lint | deploy OUT.json" >&2; exit 2 ;;
esac
