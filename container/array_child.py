#!/usr/bin/env python3
"""granary's reference wrapper for a processing container run as a child of an array window.

A feeder window submitted as one array job (GRANARY_ARRAY_WINDOWS) gives every child the same
environment: GRANARY_WINDOW_CLAIM (s3://bucket/key of the window claim) and ATTEMPT. Batch adds
AWS_BATCH_JOB_ARRAY_INDEX, the child's index (AWS Batch user guide, "Array jobs"). The child's
granule is entry AWS_BATCH_JOB_ARRAY_INDEX of the claim's "granules" list. This wrapper reads it,
exports GRANULE_ID (and keeps ATTEMPT), and runs the container's own command, so a container
written for single jobs (GRANULE_ID, ATTEMPT) runs unchanged as an array's child:

    ENTRYPOINT ["python3", "/granary/array_child.py"]
    CMD ["/usr/local/bin/process-granule"]

Without GRANARY_WINDOW_CLAIM (a single job) the command runs as it is. The job role needs
s3:GetObject on the claims (the template's JobRole grants claims/windows/*). Exit codes: the
command's own; 64 when the environment is not a window child's, 65 when the claim has no granule
at the index, 66 when the claim cannot be read (after boto3's retries). Each is a non-zero exit:
the job monitor dead-letters the granule with the reason this wrapper prints.
"""

import json
import os
import sys


def fail(code, message):
    print(f"array_child: {message}", file=sys.stderr)
    sys.exit(code)


def window_granule(uri, index):
    if not uri.startswith("s3://") or "/" not in uri[5:]:
        fail(64, f"GRANARY_WINDOW_CLAIM {uri!r} is not s3://bucket/key")
    bucket, key = uri[5:].split("/", 1)
    try:
        import boto3
        from botocore.config import Config

        s3 = boto3.client("s3", config=Config(retries={"max_attempts": 10, "mode": "standard"}))
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        claim = json.loads(body)
    except Exception as e:  # the claim could not be read: say why, exit non-zero
        fail(66, f"reading window claim {uri}: {e}")
    granules = claim.get("granules")
    if not isinstance(granules, list) or not 0 <= index < len(granules):
        count = len(granules) if isinstance(granules, list) else 0
        fail(65, f"window claim {uri} has {count} granules, none at index {index}")
    return granules[index]


def main(argv):
    if len(argv) < 2:
        fail(64, "usage: array_child.py COMMAND [ARGS...]")
    env = dict(os.environ)
    uri = env.get("GRANARY_WINDOW_CLAIM")
    if uri:
        raw = env.get("AWS_BATCH_JOB_ARRAY_INDEX")
        if raw is None or not raw.isdigit():
            fail(64, f"GRANARY_WINDOW_CLAIM is set but AWS_BATCH_JOB_ARRAY_INDEX is {raw!r}")
        env["GRANULE_ID"] = window_granule(uri, int(raw))
        print(f"array_child: child {raw} of {uri} processes {env['GRANULE_ID']}", file=sys.stderr)
    elif "GRANULE_ID" not in env:
        fail(64, "neither GRANARY_WINDOW_CLAIM nor GRANULE_ID is set")
    sys.stdout.flush()
    try:
        os.execvpe(argv[1], argv[1:], env)
    except OSError as e:
        fail(127, f"running {argv[1]}: {e}")


if __name__ == "__main__":
    main(sys.argv)
