"""Deploy infra/template.yaml into an emulator's CloudFormation (moto, LocalStack) and write the
stack outputs as JSON, so tests can drive the deployed queues, rule and bucket.

The SAM transform runs locally (aws-sam-translator), as `sam deploy` would run it in AWS. Emulators
store Lambda code but never run it, so each function's CodeUri is replaced by a small stand-in
package uploaded to an artifacts bucket; `make package` builds the real ones.

Usage: python infra/emulator_deploy.py --stack-name NAME --outputs FILE   (AWS_ENDPOINT_URL set)
"""

import argparse
import io
import json
import os
import sys
import time
import zipfile

import boto3
import yaml
from samtranslator.public.translator import ManagedPolicyLoader
from samtranslator.translator.transform import transform

# The emulator's deployment parameters; the network is created on the emulator first.
EMULATOR_PARAMETERS = {
    "ContainerImage": "public.ecr.aws/docker/library/busybox:latest",
    # moto splits list parameters only when they are passed, not from their defaults.
    "InstanceTypes": "c6i,c7i,c6a",
}


def emulator_network():
    """A VPC, subnet and security group on the emulator for the Spot compute environment."""
    ec2 = client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.42.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.42.1.0/24")["Subnet"]["SubnetId"]
    sg = ec2.create_security_group(GroupName=f"granary-{vpc}", Description="granary batch", VpcId=vpc)["GroupId"]
    return {"SubnetIds": subnet, "SecurityGroupIds": sg}


class CfnLoader(yaml.SafeLoader):
    """YAML loader that keeps CloudFormation short-form tags (!Ref, !Sub, ...) as intrinsics."""


def _intrinsic(loader, tag_suffix, node):
    name = "Ref" if tag_suffix == "Ref" else f"Fn::{tag_suffix}"
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
        if tag_suffix == "GetAtt":
            value = value.split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return {name: value}


CfnLoader.add_multi_constructor("!", _intrinsic)


def client(service):
    return boto3.client(service, endpoint_url=os.environ["AWS_ENDPOINT_URL"],
                        region_name=os.environ.get("AWS_REGION", "us-east-1"))


def stand_in_package():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("bootstrap", "#!/bin/sh\necho 'emulator stand-in: build the real package with make package' >&2\nexit 1\n")
    return buf.getvalue()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--template", default=os.path.join(os.path.dirname(__file__), "template.yaml"))
    ap.add_argument("--stack-name", required=True)
    ap.add_argument("--outputs", required=True, help="where to write the stack outputs (JSON)")
    ap.add_argument("--timeout", type=float, default=120)
    args = ap.parse_args()
    # The SAM translator reads the region from the default boto session.
    os.environ.setdefault("AWS_DEFAULT_REGION", os.environ.get("AWS_REGION", "us-east-1"))
    if not os.environ.get("AWS_ENDPOINT_URL"):
        sys.exit("AWS_ENDPOINT_URL is not set: this deploys to an emulator only (use `sam deploy --guided` for AWS)")

    try:
        client("batch").describe_compute_environments()
    except Exception as e:  # LocalStack's free edition has no Batch: the template cannot deploy there
        with open(args.outputs, "w") as f:
            json.dump({"skipped": f"the endpoint has no AWS Batch ({type(e).__name__})"}, f)
        print("SKIP: no AWS Batch at this endpoint; template not deployed", file=sys.stderr)
        return

    with open(args.template) as f:
        template = yaml.load(f, Loader=CfnLoader)

    s3 = client("s3")
    artifacts = f"{args.stack_name.lower()}-artifacts"
    s3.create_bucket(Bucket=artifacts)
    package = stand_in_package()
    for name, res in template["Resources"].items():
        if res["Type"] == "AWS::Serverless::Function":
            key = f"{name}.zip"
            s3.put_object(Bucket=artifacts, Key=key, Body=package)
            res["Properties"]["CodeUri"] = {"Bucket": artifacts, "Key": key}

    cfn_template = transform(template, {}, ManagedPolicyLoader(client("iam")))
    cfn = client("cloudformation")
    values = {**EMULATOR_PARAMETERS, **emulator_network()}
    params = [{"ParameterKey": k, "ParameterValue": v} for k, v in values.items()]
    cfn.create_stack(StackName=args.stack_name, TemplateBody=json.dumps(cfn_template),
                     Parameters=params, Capabilities=["CAPABILITY_IAM", "CAPABILITY_AUTO_EXPAND"])
    deadline = time.time() + args.timeout
    while True:
        stack = cfn.describe_stacks(StackName=args.stack_name)["Stacks"][0]
        status = stack["StackStatus"]
        if status == "CREATE_COMPLETE":
            break
        if status.endswith("FAILED") or status.startswith("ROLLBACK") or time.time() > deadline:
            events = cfn.describe_stack_events(StackName=args.stack_name)["StackEvents"]
            for e in events[:20]:
                print(e.get("LogicalResourceId"), e.get("ResourceStatus"), e.get("ResourceStatusReason", ""), file=sys.stderr)
            sys.exit(f"stack {args.stack_name} ended {status}")
        time.sleep(0.5)
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    resources = cfn.describe_stack_resources(StackName=args.stack_name)["StackResources"]
    # moto matches every PutEvents against pattern-less (schedule) rules, ignoring their state, and
    # cannot deliver to a Lambda target; emulators never fire schedules anyway (granary's local
    # runtime runs the feeder). So on the emulator the schedule keeps its rule but loses its target.
    events = client("events")
    for r in resources:
        if r.get("ResourceType") == "AWS::Events::Rule" and r.get("LogicalResourceId", "").endswith("Schedule"):
            rule = r["PhysicalResourceId"]
            ids = [t["Id"] for t in events.list_targets_by_rule(Rule=rule).get("Targets", [])]
            if ids:
                events.remove_targets(Rule=rule, Ids=ids)
            events.disable_rule(Name=rule)
            print(f"emulator: schedule rule {rule} disabled, Lambda target removed", file=sys.stderr)
    # Likewise the SQS event source mappings: an emulator would hand the messages to a Lambda it
    # cannot run (moto's stand-in "succeeds" and deletes them). Disabled, the queues keep their
    # messages for granary's local runner, which calls the real handlers.
    lam = client("lambda")
    for r in resources:
        if r.get("ResourceType") == "AWS::Lambda::EventSourceMapping":
            lam.update_event_source_mapping(UUID=r["PhysicalResourceId"], Enabled=False)
            print(f"emulator: event source mapping {r['LogicalResourceId']} disabled", file=sys.stderr)
    with open(args.outputs, "w") as f:
        json.dump({"stack_name": args.stack_name, "status": status, "outputs": outputs,
                   "resources": {r.get("LogicalResourceId", "?"): r.get("ResourceType", "?") for r in resources}}, f, indent=2)
    print(f"stack {args.stack_name}: {status}, {len(resources)} resources; outputs in {args.outputs}", file=sys.stderr)


if __name__ == "__main__":
    main()
