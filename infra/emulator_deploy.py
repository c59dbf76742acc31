"""Deploy infra/template.yaml into an emulator's CloudFormation (moto, LocalStack) and write the
stack outputs as JSON, so tests can drive the deployed queues, rule and bucket.

The SAM transform runs locally (aws-sam-translator), as `sam deploy` would run it in AWS. Emulators
store Lambda code but never run it, so each function's CodeUri is replaced by a small stand-in
package uploaded to an artifacts bucket; `make package` builds the real ones.

An endpoint without some service (LocalStack's free edition has no Batch, Glue or Athena; it
answers 501, "not implemented") gets the rest of the stack: the resources of the missing services
are left out, a `Ref` to the job queue or job definition becomes the ARN granary's in-memory Batch
uses in their place (so the Batch rule's pattern and the functions' environment name it), and
whatever only those resources used (the compute environment's roles and network parameters) goes
too. The outputs file lists what was stood in for.

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
    # A source, so the importer's discovery function exists too (local/tests/lambda_runtime.rs
    # makes the bucket and puts a file there).
    "SourceUrl": "s3://granary-emulator-sources/granules/",
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


# How each optional service is asked whether the endpoint implements it.
PROBES = {
    "batch": lambda: client("batch").describe_compute_environments(),
    "glue": lambda: client("glue").get_databases(),
    "athena": lambda: client("athena").list_work_groups(),
}


def implemented(probe):
    """Only an answer that the API is not implemented means no; any other failure stops the run
    (an endpoint that is down must not read as a missing service)."""
    import botocore.exceptions
    try:
        probe()
        return True
    except botocore.exceptions.ClientError as e:
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        text = str(e).lower()
        if status == 501 or "not implemented" in text or "not yet been emulated" in text:
            return False
        raise


def functions_can_be_created():
    """Whether the endpoint can create a Lambda function at all. LocalStack without Docker (and
    without network to fetch its Lambda runtime) cannot; moto can. Only that answer means no."""
    import botocore.exceptions
    lam = client("lambda")
    name = f"granary-probe-{int(time.time())}"
    trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                     "Principal": {"Service": "lambda.amazonaws.com"}}]}
    role = client("iam").create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
    try:
        lam.create_function(FunctionName=name, Runtime="provided.al2023", Handler="bootstrap",
                            Role=role,
                            Code={"ZipFile": stand_in_package()})
    except botocore.exceptions.ClientError as e:
        text = str(e).lower()
        if "lambda-runtime" in text or "docker" in text:
            return False
        raise
    # LocalStack accepts the call and fails the function as it prepares it.
    state, reason = "Pending", ""
    for _ in range(100):
        config = lam.get_function(FunctionName=name)["Configuration"]
        state, reason = config.get("State", "Active"), config.get("StateReason", "")
        if state != "Pending":
            break
        time.sleep(0.1)
    try:
        lam.delete_function(FunctionName=name)
    except botocore.exceptions.ClientError:
        pass  # a function that failed to be prepared may not be deletable; the emulator is discarded
    if state == "Failed":
        text = reason.lower()
        if "lambda-runtime" in text or "docker" in text:
            return False
        sys.exit(f"the endpoint failed a probe function: {reason}")
    return True


def references(node):
    """Every logical id or parameter a template fragment refers to."""
    found = set()
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "Ref" and isinstance(v, str):
                found.add(v)
            elif k == "Fn::GetAtt":
                found.add(v[0] if isinstance(v, list) else str(v).split(".")[0])
            elif k == "Fn::Sub":
                text = v if isinstance(v, str) else v[0]
                import re
                found.update(m.split(".")[0] for m in re.findall(r"\$\{([^}!]+)\}", text))
                if not isinstance(v, str):
                    found.update(references(v[1]))
            elif k == "DependsOn":
                found.update([v] if isinstance(v, str) else v)
            else:
                found.update(references(v))
    elif isinstance(node, list):
        for item in node:
            found.update(references(item))
    return found


def replace_refs(node, values):
    if isinstance(node, dict):
        if set(node) == {"Ref"} and node["Ref"] in values:
            return values[node["Ref"]]
        return {k: replace_refs(v, values) for k, v in node.items()}
    if isinstance(node, list):
        return [replace_refs(item, values) for item in node]
    return node


def stand_in(template, missing, stack_name):
    """Leaves out the missing services' resources (see the module's doc); returns their ids."""
    region = os.environ.get("AWS_REGION", "us-east-1")
    account = client("sts").get_caller_identity()["Account"]
    resources = template["Resources"]
    prefixes = {"batch": "AWS::Batch::", "glue": "AWS::Glue::", "athena": "AWS::Athena::",
                "lambda": "AWS::Serverless::Function"}
    gone = [r for r, body in resources.items()
            if any(body["Type"].startswith(prefixes[m]) for m in missing)]
    arns = {}
    for r in gone:
        kind = resources[r]["Type"]
        if kind == "AWS::Batch::JobQueue":
            arns[r] = f"arn:aws:batch:{region}:{account}:job-queue/{stack_name}-{r}"
        elif kind == "AWS::Batch::JobDefinition":
            arns[r] = f"arn:aws:batch:{region}:{account}:job-definition/{stack_name}-{r}:1"
    # SAM makes a role `<Function>Role` for a function that names none: it goes with its function,
    # and so does whatever names it (the signing key's policy names the archive task role).
    implicit_roles = [f"{r}Role" for r in gone
                      if resources[r]["Type"] == "AWS::Serverless::Function"
                      and "Role" not in resources[r].get("Properties", {})]
    for r in gone:
        del resources[r]
    gone.extend(implicit_roles)
    template["Resources"] = replace_refs(resources, arns)
    template["Outputs"] = replace_refs(template.get("Outputs", {}), arns)
    template["Globals"] = replace_refs(template.get("Globals", {}), arns)
    # What only the left-out resources used (roles, profiles, outputs, parameters) and what
    # watched them (their alarms and log groups).
    while True:
        used = references({"Resources": template["Resources"], "Outputs": template["Outputs"],
                           "Globals": template["Globals"], "Conditions": template.get("Conditions", {})})
        orphans = [r for r, body in template["Resources"].items()
                   if (body["Type"] in ("AWS::IAM::Role", "AWS::IAM::InstanceProfile") and r not in used)
                   or references(body) & set(gone)]
        outputs = [o for o, body in template["Outputs"].items()
                   if references(body) & set(gone)]
        if not orphans and not outputs:
            break
        for r in orphans:
            del template["Resources"][r]
            gone.append(r)
        for o in outputs:
            del template["Outputs"][o]
    used = references({"Resources": template["Resources"], "Outputs": template["Outputs"],
                       "Globals": template["Globals"], "Conditions": template.get("Conditions", {})})
    for p in [p for p in template.get("Parameters", {}) if p not in used]:
        del template["Parameters"][p]
    print(f"endpoint without {', '.join(missing)}: stood in for {', '.join(sorted(gone))}", file=sys.stderr)
    return sorted(gone)


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

    with open(args.template) as f:
        template = yaml.load(f, Loader=CfnLoader)
    missing = [service for service, probe in PROBES.items() if not implemented(probe)]
    if not functions_can_be_created():
        missing.append("lambda")
    stood_in = stand_in(template, missing, args.stack_name) if missing else []

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
    values = {**EMULATOR_PARAMETERS}
    if "SubnetIds" in template.get("Parameters", {}):
        values.update(emulator_network())
    values = {k: v for k, v in values.items() if k in template.get("Parameters", {})}
    params = [{"ParameterKey": k, "ParameterValue": v} for k, v in values.items()]
    body = json.dumps(cfn_template)
    # CloudFormation takes at most 51,200 bytes inline (CloudFormation quotas); larger templates
    # go through S3, as `sam deploy` sends them.
    if len(body.encode()) > 51_200:
        s3.put_object(Bucket=artifacts, Key="template.json", Body=body.encode())
        source = {"TemplateURL": f"https://{artifacts}.s3.amazonaws.com/template.json"}
    else:
        source = {"TemplateBody": body}
    cfn.create_stack(StackName=args.stack_name, Parameters=params,
                     Capabilities=["CAPABILITY_IAM", "CAPABILITY_AUTO_EXPAND"], **source)
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
    # Each function as CloudFormation made it: its name and the environment the template gave it
    # (local/tests/lambda_runtime.rs runs each binary with exactly that environment).
    functions = {}
    for r in resources:
        if r.get("ResourceType") == "AWS::Lambda::Function":
            config = lam.get_function_configuration(FunctionName=r["PhysicalResourceId"])
            functions[r["LogicalResourceId"]] = {
                "name": r["PhysicalResourceId"],
                "timeout": config.get("Timeout"),
                "environment": config.get("Environment", {}).get("Variables", {}),
            }
    with open(args.outputs, "w") as f:
        json.dump({"stack_name": args.stack_name, "status": status, "outputs": outputs,
                   "functions": functions,
                   "batch": "batch" not in missing, "missing_services": missing, "stood_in": stood_in,
                   "resources": {r.get("LogicalResourceId", "?"): r.get("ResourceType", "?") for r in resources}}, f, indent=2)
    print(f"stack {args.stack_name}: {status}, {len(resources)} resources; outputs in {args.outputs}", file=sys.stderr)


if __name__ == "__main__":
    main()
