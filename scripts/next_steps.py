"""After `make deploy`: the stack's outputs, then the first commands an operator runs.

    python scripts/next_steps.py STACK_NAME

Reads the outputs with CloudFormation's DescribeStacks (AWS_ENDPOINT_URL, if set, points it at an
emulator: local/tests/deploy_scripts.rs runs it against the stack `make test` deploys).
"""
import sys

import boto3

# What the granary CLI reads (the same GRANARY_* variables as the Lambdas), from which output.
CLI_VARIABLES = [
    ("GRANARY_BUCKET", "DataBucketName"),
    ("GRANARY_JOB_QUEUE", "JobQueueArn"),
    ("GRANARY_JOB_DEFINITION", "JobDefinitionArn"),
    ("GRANARY_RETRY_QUEUE_URL", "RetryQueueUrl"),
    ("GRANARY_FAILURE_DLQ_URL", "FailureDlqUrl"),
]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: next_steps.py STACK_NAME")
    stack_name = sys.argv[1]
    stacks = boto3.client("cloudformation").describe_stacks(StackName=stack_name)["Stacks"]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}
    missing = [key for _, key in CLI_VARIABLES if key not in outputs]
    if missing:
        sys.exit(f"stack {stack_name} has no output {', '.join(missing)}: is it granary's?")
    width = max(len(k) for k in outputs)
    print(f"\nstack {stack_name}: {stacks[0]['StackStatus']}")
    for key in sorted(outputs):
        print(f"  {key:<{width}}  {outputs[key]}")
    bucket = outputs["DataBucketName"]
    print("\nnext:")
    print("  # the granary CLI reads the stack from these (docs/operations.md)")
    for var, key in CLI_VARIABLES:
        print(f"  export {var}={outputs[key]}")
    print("  # an inventory, in the layout the feeder reads best")
    print(f"  granary inventory convert my-granule-ids.txt --out s3://{bucket}/inventories/0001.parquet")
    print("  granary plan      # rows, forecast duration and cost, before the first run")
    print("  granary status    # what is left and when it will finish, once it runs")


if __name__ == "__main__":
    main()
