#!/usr/bin/env bash
# Infrastructure checks and emulator deployment for infra/template.yaml.
#
#   scripts/infra.sh install           .venv-infra with cfn-lint, checkov (once), and .venv-deploy
#                                      with aws-sam-translator and a current boto3 (checkov pins an
#                                      old botocore, whose S3 uploads LocalStack's gateway drops),
#                                      and .venv-sam with the AWS SAM CLI
#   scripts/infra.sh lint              cfn-lint, checkov and `sam validate --lint` must be clean
#   scripts/infra.sh deploy OUT.json   deploy to the emulator at AWS_ENDPOINT_URL, outputs to OUT.json
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv-infra"
stamp="$venv/.installed-1"
template="$root/infra/template.yaml"

deploy_venv="$root/.venv-deploy"
deploy_stamp="$deploy_venv/.installed-1"
# The AWS SAM CLI, for `sam validate --lint` (the checks `sam deploy` makes) and `make deploy`.
sam_venv="$root/.venv-sam"
sam_stamp="$sam_venv/.installed-1"

install() {
  if [ ! -f "$stamp" ]; then
    echo "installing cfn-lint, checkov and aws-sam-translator into .venv-infra (once)..." >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
      "cfn-lint==1.58.0" "checkov==3.3.30" "aws-sam-translator==1.115.0" boto3 pyyaml
    touch "$stamp"
  fi
  if [ ! -f "$deploy_stamp" ]; then
    echo "installing aws-sam-translator and boto3 into .venv-deploy (once)..." >&2
    python3 -m venv "$deploy_venv"
    "$deploy_venv/bin/pip" install --quiet --disable-pip-version-check \
      "aws-sam-translator==1.115.0" "boto3==1.42.*" pyyaml
    touch "$deploy_stamp"
  fi
  if [ ! -f "$sam_stamp" ]; then
    echo "installing the AWS SAM CLI into .venv-sam (once)..." >&2
    python3 -m venv "$sam_venv"
    "$sam_venv/bin/pip" install --quiet --disable-pip-version-check "aws-sam-cli==1.170.0"
    touch "$sam_stamp"
  fi
}

lint() {
  install
  echo "cfn-lint $template" >&2
  "$venv/bin/cfn-lint" "$template"
  echo "checkov $template" >&2
  # --skip-download: no calls to checkov's cloud service; skipped checks are justified in the template.
  "$venv/bin/checkov" --quiet --compact --skip-download --framework cloudformation -f "$template"
  echo "sam validate --lint $template" >&2
  # No AWS call: the SAM transform and cfn-lint run locally (telemetry off).
  (cd "$root/infra" && SAM_CLI_TELEMETRY=0 AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-us-east-1}" \
    "$sam_venv/bin/sam" validate --lint --template template.yaml)
}

deploy() {
  install
  local out="$1"
  "$deploy_venv/bin/python" "$root/infra/emulator_deploy.py" --stack-name "granary-$(date +%s)-$$" --outputs "$out"
}

case "${1:-}" in
  install) install ;;
  lint) lint ;;
  deploy) shift; deploy "$@" ;;
  *) echo "usage: $0 install | lint | deploy OUT.json" >&2; exit 2 ;;
esac
