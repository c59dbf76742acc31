#!/usr/bin/env bash
# `make deploy`: builds the Lambdas and deploys infra/template.yaml into your AWS account with the
# AWS SAM CLI. Checks first, and says what is missing, before building anything:
#   - the AWS SAM CLI (`sam`; `pip install aws-sam-cli`, or AWS's installer);
#   - cargo-lambda and zig (SAM's rust-cargolambda build calls them; `make package` installs them
#     into .venv-package, which this script puts on PATH);
#   - credentials for the target account (the default chain: AWS_PROFILE, env vars, SSO);
#   - no AWS_ENDPOINT_URL (that would point SAM at an emulator; `make test` deploys there itself).
# `scripts/deploy.sh --check` stops after the checks. Anything else is passed to `sam deploy`
# (default: --guided, which asks for the parameters without defaults: SubnetIds,
# SecurityGroupIds, ContainerImage, and saves the answers in infra/samconfig.toml).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export PATH="$root/.venv-package/bin:$PATH"
missing=0
need() {
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "missing: $1 — $2" >&2
    missing=1
  fi
}
need sam "the AWS SAM CLI (pip install aws-sam-cli)"
need cargo-lambda "run \`make package\` once (installs cargo-lambda and zig into .venv-package)"
need zig "run \`make package\` once"
if [ -n "${AWS_ENDPOINT_URL:-}" ]; then
  echo "AWS_ENDPOINT_URL is set ($AWS_ENDPOINT_URL): unset it to deploy to AWS" >&2
  missing=1
fi
if [ "$missing" = 0 ]; then
  python=$(command -v python3)
  [ -x "$root/.venv/bin/python" ] && python="$root/.venv/bin/python"
  if ! identity=$("$python" -c 'import boto3; i = boto3.client("sts").get_caller_identity(); print(i["Account"], i["Arn"])' 2>&1); then
    echo "no usable AWS credentials: $(printf '%s\n' "$identity" | tail -n 1)" >&2
    missing=1
  else
    echo "deploying as ${identity#* } into account ${identity%% *} (${AWS_REGION:-${AWS_DEFAULT_REGION:-the profile region}})" >&2
  fi
fi
if [ "$missing" != 0 ]; then
  echo "make deploy: fix the above first (docs/deploy.md)" >&2
  exit 1
fi
if [ "${1:-}" = "--check" ]; then
  echo "ready to deploy" >&2
  exit 0
fi
cd "$root/infra"
sam build --beta-features
if [ $# -eq 0 ]; then
  set -- --guided
fi
sam deploy "$@"
