#!/usr/bin/env python3
"""granary's reference wrapper for a processing container run as a child of an array window.

A feeder window submitted as one array job (GRANARY_ARRAY_WINDOWS) gives every child the same
environment: GRANARY_WINDOW_CLAIM (s3://bucket/key of the window claim) and ATTEMPT. Batch adds
AWS_BATCH_JOB_ARRAY_INDEX, the child's index (AWS Batch user guide, "Array jobs"). The child's
granule is entry AWS_BATCH_JOB_ARRAY_INDEX of the claim's "granules" list, and its attempt the same
entry of the claim's "attempts" list when it has one (a window of retries), else ATTEMPT. This
wrapper reads them, exports GRANULE_ID and ATTEMPT, and runs the container's own command, so a container
written for single jobs (GRANULE_ID, ATTEMPT) runs unchanged as an array's child:

    ENTRYPOINT ["python3", "/granary/array_child.py"]
    CMD ["/usr/local/bin/process-granule"]

Without GRANARY_WINDOW_CLAIM (a single job) the command runs as it is. The image needs
python3 and boto3; the job role needs s3:GetObject on the claims (the template's JobRole grants
claims/windows/*; without s3:ListBucket a missing claim reads as AccessDenied). Exit codes: the
command's own; 64 when the environment is not a window child's, 65 when the claim is missing or has no
granule at the index, 66 when S3 would not answer (after boto3's retries, 10 calls unless
AWS_MAX_ATTEMPTS says otherwise), which the template's
RetryStrategy retries as the cloud's failure. 64 and 65 are failures of the setup: the job
monitor dead-letters the granule (the reason printed here is in the job's log stream).
"""

import json
import os
import sys

WRONG_ENVIRONMENT = 64
NO_GRANULE = 65
CLAIM_UNREADABLE = 66


def fail(code, message):
    print(f"array_child: {message}", file=sys.stderr)
    sys.exit(code)


def window_granule(uri, index):
    if not uri.startswith("s3://") or "/" not in uri[5:]:
        fail(WRONG_ENVIRONMENT, f"GRANARY_WINDOW_CLAIM {uri!r} is not s3://bucket/key")
    bucket, key = uri[5:].split("/", 1)
    # An image without boto3 is a setup failure, not S3's: it fails here, not as "unreadable".
    import boto3
    from botocore.config import Config

    from botocore.exceptions import ClientError

    # 10 calls unless AWS_MAX_ATTEMPTS says otherwise (boto3's own variable).
    attempts = int(os.environ.get("AWS_MAX_ATTEMPTS", "10"))
    try:
        s3 = boto3.client(
            "s3", config=Config(retries={"total_max_attempts": attempts, "mode": "standard"})
        )
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as e:
        code = e.response.get("Error", {}).get("Code", "")
        # No such claim (or, without s3:ListBucket, AccessDenied for one): retrying cannot help.
        if code in ("NoSuchKey", "NoSuchBucket", "AccessDenied", "404", "403"):
            fail(NO_GRANULE, f"window claim {uri} cannot be read ({code}): {e}")
        fail(CLAIM_UNREADABLE, f"reading window claim {uri}: {e}")
    except Exception as e:  # S3 would not answer: the cloud's failure, retried by Batch
        fail(CLAIM_UNREADABLE, f"reading window claim {uri}: {e}")
    try:
        claim = json.loads(body)
    except ValueError as e:
        fail(NO_GRANULE, f"window claim {uri} is not JSON: {e}")
    granules = claim.get("granules") if isinstance(claim, dict) else None
    if not isinstance(granules, list) or not 0 <= index < len(granules):
        count = len(granules) if isinstance(granules, list) else 0
        fail(NO_GRANULE, f"window claim {uri} has {count} granules, none at index {index}")
    # A window of retries lists each granule's attempt; a window of first attempts has none.
    attempts = claim.get("attempts")
    attempt = None
    if isinstance(attempts, list) and attempts:
        if index >= len(attempts) or not isinstance(attempts[index], int):
            fail(NO_GRANULE, f"window claim {uri} lists no attempt at index {index}")
        attempt = str(attempts[index])
    return granules[index], attempt


def main(argv):
    if len(argv) < 2:
        fail(WRONG_ENVIRONMENT, "usage: array_child.py COMMAND [ARGS...]")
    env = dict(os.environ)
    uri = env.get("GRANARY_WINDOW_CLAIM")
    if uri:
        raw = env.get("AWS_BATCH_JOB_ARRAY_INDEX")
        if raw is None or not (raw.isascii() and raw.isdigit()):
            fail(
                WRONG_ENVIRONMENT,
                f"GRANARY_WINDOW_CLAIM is set but AWS_BATCH_JOB_ARRAY_INDEX is {raw!r}",
            )
        env["GRANULE_ID"], attempt = window_granule(uri, int(raw))
        if attempt is not None:
            env["ATTEMPT"] = attempt
        print(
            f"array_child: child {raw} of {uri} processes {env['GRANULE_ID']}"
            f" (attempt {env.get('ATTEMPT', '?')})",
            file=sys.stderr,
        )
    elif "GRANULE_ID" not in env:
        fail(WRONG_ENVIRONMENT, "neither GRANARY_WINDOW_CLAIM nor GRANULE_ID is set")
    sys.stdout.flush()
    try:
        os.execvpe(argv[1], argv[1:], env)
    except OSError as e:
        fail(127, f"running {argv[1]}: {e}")


if __name__ == "__main__":
    main(sys.argv)
