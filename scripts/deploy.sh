#!/usr/bin/env bash
# `make deploy`: builds the Lambdas and deploys infra/template.yaml into your AWS account with the
# AWS SAM CLI. Every default is in infra/samconfig.toml; it asks only for what has none.
#
#   scripts/deploy.sh               the checks, the questions, sam build, sam deploy, next steps
#   scripts/deploy.sh --check       the checks only
#   scripts/deploy.sh --questions   the questions it would ask, one a line, and nothing else
#   scripts/deploy.sh -- ARGS...    ARGS passed on to `sam deploy`
#
# The checks, made before anything is built: the AWS SAM CLI (`scripts/infra.sh install` puts it
# in .venv-sam), cargo-lambda and zig (`scripts/package.sh install`), credentials for the target
# account (AWS_PROFILE, environment, SSO), and no AWS_ENDPOINT_URL (that would point SAM at an
# emulator; `make test` deploys there itself).
#
# The answers are kept in .granary-deploy.env, so the next deploy asks nothing. Each can also be
# given in the environment: GRANARY_DEPLOY_SubnetIds, GRANARY_DEPLOY_SecurityGroupIds,
# GRANARY_DEPLOY_ContainerImage.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
answers_file="$root/.granary-deploy.env"
# The template's parameters with no default (infra/model/tests/template_rules.rs checks this list
# against the template).
questions=(SubnetIds SecurityGroupIds ContainerImage)
declare -A prompt=(
  [SubnetIds]="Subnets for the Spot compute environment (comma-separated subnet ids)"
  [SecurityGroupIds]="Security groups for the Spot compute environment (comma-separated ids)"
  [ContainerImage]="The processing container image (ECR URI)"
)

if [ "${1:-}" = "--questions" ]; then
  for q in "${questions[@]}"; do echo "$q: ${prompt[$q]}"; done
  exit 0
fi

export PATH="$root/.venv-sam/bin:$root/.venv-package/bin:$PATH"
missing=0
need() {
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "missing: $1 — $2" >&2
    missing=1
  fi
}
need sam "the AWS SAM CLI: run \`scripts/infra.sh install\` (or pip install aws-sam-cli)"
need cargo-lambda "run \`scripts/package.sh install\` once (cargo-lambda and zig into .venv-package)"
need python-zig "run \`scripts/package.sh install\` once"
if [ -n "${AWS_ENDPOINT_URL:-}" ]; then
  echo "AWS_ENDPOINT_URL is set ($AWS_ENDPOINT_URL): unset it to deploy to AWS" >&2
  missing=1
fi
python=$(command -v python3)
[ -x "$root/.venv/bin/python" ] && python="$root/.venv/bin/python"
if [ "$missing" = 0 ]; then
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
[ "${1:-}" = "--" ] && shift

# The answers: the environment's, then the last deploy's, then asked.
declare -A answer=()
if [ -f "$answers_file" ]; then
  while IFS='=' read -r k v; do
    [ -n "$k" ] && answer[$k]=$v
  done <"$answers_file"
fi
for q in "${questions[@]}"; do
  from_env="GRANARY_DEPLOY_$q"
  if [ -n "${!from_env:-}" ]; then
    answer[$q]=${!from_env}
  fi
  while [ -z "${answer[$q]:-}" ]; do
    read -r -p "${prompt[$q]}: " answer[$q]
  done
done
: >"$answers_file"
for q in "${questions[@]}"; do echo "$q=${answer[$q]}" >>"$answers_file"; done
echo "answers kept in $answers_file" >&2

# samconfig.toml's overrides with the answers after them: a --parameter-overrides on the command
# line replaces the file's, it does not add to it.
overrides=$("$python" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["default"]["deploy"]["parameters"].get("parameter_overrides", ""))' "$root/infra/samconfig.toml")
for q in "${questions[@]}"; do overrides="$overrides $q=${answer[$q]}"; done

cd "$root/infra"
sam build --config-file samconfig.toml
sam deploy --config-file samconfig.toml --parameter-overrides "$overrides" "$@"
stack=$("$python" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["default"]["global"]["parameters"]["stack_name"])' samconfig.toml)
"$python" "$root/scripts/next_steps.py" "$stack"
