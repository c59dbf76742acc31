#!/usr/bin/env python3
"""The original's way of reading a feeder window, timed beside `granary-bench window`.

The original feeder is Python: it opens the inventory on S3 with pyarrow and reads rows
[start, start + N) of the id column. This script does that the way pyarrow is meant to be used
(the footer once, then only the row groups that hold the window, only the id column), against
the same emulator and the same files as `granary-bench window --file`, and counts what it asks S3
for: every read pyarrow makes on the S3 file is one ranged GET, so a wrapper counts reads and bytes.

    scripts/emulator.sh run /path/to/venv/bin/python bench/pyarrow_window.py \
        --rows 1000 --reps 5 FILE...

It needs pyarrow in the interpreter that runs it (granary does not install it: the venv is the
benchmark's, e.g. `python3 -m venv /tmp/pa && /tmp/pa/bin/pip install pyarrow`).
"""

import argparse
import io
import json
import os
import statistics
import sys
import time

started = time.perf_counter()
import pyarrow  # noqa: E402  (the import is part of what a cold Lambda pays)
import pyarrow.fs  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

IMPORT_SECS = time.perf_counter() - started


class CountingFile(io.RawIOBase):
    """A read-only view of an S3 object that counts pyarrow's reads (each one ranged GET)."""

    def __init__(self, native):
        self.native = native
        self.gets = 0
        self.bytes = 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def seek(self, offset, whence=io.SEEK_SET):
        return self.native.seek(offset, whence)

    def tell(self):
        return self.native.tell()

    def size(self):
        return self.native.size()

    def read(self, n=-1):
        data = self.native.read(n)
        self.gets += 1
        self.bytes += len(data)
        return data

    def readinto(self, buffer):
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def window(parquet, column, start, rows):
    """Rows [start, start + rows) of `column`: only the row groups that hold them."""
    meta = parquet.metadata
    groups, first = [], None
    offset = 0
    for i in range(meta.num_row_groups):
        n = meta.row_group(i).num_rows
        if offset + n > start and offset < start + rows:
            groups.append(i)
            first = offset if first is None else first
        offset += n
    table = parquet.read_row_groups(groups, columns=[column])
    ids = table.column(column).slice(start - first, rows).to_pylist()
    return ids


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--column", default="granule_id")
    parser.add_argument("--bucket", default="granary-bench-pyarrow")
    args = parser.parse_args()

    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    if not endpoint:
        sys.exit("AWS_ENDPOINT_URL is not set: run under scripts/emulator.sh run")
    scheme, _, host = endpoint.partition("://")
    s3 = pyarrow.fs.S3FileSystem(
        endpoint_override=host,
        scheme=scheme,
        region=os.environ.get("AWS_REGION", "us-east-1"),
        access_key=os.environ.get("AWS_ACCESS_KEY_ID", "testing"),
        secret_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "testing"),
        allow_bucket_creation=True,
    )
    s3.create_dir(args.bucket)
    print(f"pyarrow {pyarrow.__version__}, import {IMPORT_SECS * 1000:.0f} ms", file=sys.stderr)
    for path in args.files:
        key = f"{args.bucket}/{os.path.basename(path)}"
        pyarrow.fs.copy_files(path, key, destination_filesystem=s3)
        total = pq.ParquetFile(path).metadata.num_rows
        for name, start in [
            ("start", 0),
            ("middle", total // 2),
            ("end", max(total - args.rows, 0)),
        ]:
            times, gets, fetched = [], 0, 0
            for _ in range(args.reps):
                t = time.perf_counter()
                with s3.open_input_file(key) as native:
                    counting = CountingFile(native)
                    parquet = pq.ParquetFile(counting)
                    ids = window(parquet, args.column, start, args.rows)
                times.append((time.perf_counter() - t) * 1000)
                gets, fetched = counting.gets, counting.bytes
                if len(ids) != min(args.rows, total - start):
                    sys.exit(f"{path}: read {len(ids)} ids at {start}, wanted {args.rows}")
            print(
                json.dumps(
                    {
                        "file": os.path.basename(path),
                        "rows_total": total,
                        "row_groups": pq.ParquetFile(path).metadata.num_row_groups,
                        "window": name,
                        "gets": gets,
                        "bytes": fetched,
                        "median_ms": round(statistics.median(times), 1),
                        "import_ms": round(IMPORT_SECS * 1000),
                    }
                )
            )


if __name__ == "__main__":
    main()
