#!/usr/bin/env python3
"""Checks athena/ with real engines.

  athena_check.py parse                 every athena/**/*.sql must parse as Athena SQL (sqlglot)
  athena_check.py run LOGS_DIR INVENTORY_CSV ITEMS_DIR
                                        DuckDB runs the views and reports (transpiled from Athena)
                                        over a local copy of the logs, of the S3 Inventory
                                        reports of logs/ and of the item history and records; prints
                                        {report: rows} as JSON, the reports over the inventory
                                        under "from_inventory", the item steps view's rows under
                                        "item_steps"

  athena_check.py audit LOGS_DIR INVENTORIES_DIR PRODUCTS_CSV MAX_RETRIES TEMPLATE
                                        DuckDB runs athena/audit/audit_lists.sql over the logs,
                                        the inventories' Parquet files and a listing of the
                                        products (as INVENTORY_CSV); prints its rows as JSON

LOGS_DIR holds the logs as outcome=…/platform=…/acquisition_date=…/<file>.json, one JSON object per
file, as granary writes them under logs/ (the test copies them out of the emulator). INVENTORY_CSV
holds the rows S3 Inventory reports would hold (bucket, key, size, last_modified_date, dt), one
report per dt. ITEMS_DIR holds history/ as granary writes it (date=…/state=…/ objects: one
JSON entry each, or a window's entries as JSON lines) and items/ (one record each: a record holds
the history entries no move has written out yet, up to eight).
"""
import json
import pathlib
import re
import sys

import sqlglot

ROOT = pathlib.Path(__file__).resolve().parent.parent / "athena"


def parse_all():
    # The parser must be able to fail, or passing means nothing.
    try:
        sqlglot.parse("SELEC granule_id FROM", read="athena", error_level=sqlglot.ErrorLevel.RAISE)
        sys.exit("sqlglot accepted a broken statement; cannot trust it")
    except sqlglot.errors.ParseError:
        pass
    failed = 0
    files = sorted(ROOT.rglob("*.sql"))
    for path in files:
        try:
            statements = [s for s in sqlglot.parse(path.read_text(), read="athena",
                                                   error_level=sqlglot.ErrorLevel.RAISE) if s]
            if not statements:
                raise ValueError("no statement")
            print(f"ok    {path.relative_to(ROOT)} ({len(statements)} statement)")
        except Exception as e:  # noqa: BLE001 - report every file's failure
            failed += 1
            print(f"FAIL  {path.relative_to(ROOT)}: {e}")
    if failed or not files:
        sys.exit(f"{failed} of {len(files)} files failed to parse")


# Athena (Trino) unnests an array of rows into a column per field, named by the alias list
# (Trino docs, "UNNEST"); DuckDB's UNNEST gives one struct column, and expands it only when asked
# (`recursive := true`). sqlglot keeps Athena's form, so it is rewritten to DuckDB's here.
ROWS_UNNEST = re.compile(r"CROSS JOIN UNNEST\((\w+)\) AS (\w+)\(")


def to_duckdb(sql):
    out = []
    for s in sqlglot.transpile(sql, read="athena", write="duckdb"):
        if s.strip():
            out.append(ROWS_UNNEST.sub(
                r"CROSS JOIN LATERAL (SELECT UNNEST(\1, recursive := true)) AS \2(", s))
    return out


def logs_view(con, logs_dir):
    """granary_logs over a local copy of logs/, as the Athena table declares it."""
    pattern = str(pathlib.Path(logs_dir) / "**" / "*.json")
    # Partition values stay strings, as Athena's projected string partitions are.
    con.execute(
        "CREATE VIEW granary_logs_raw AS SELECT * FROM read_json("
        f"'{pattern}', format='auto', hive_partitioning=true, hive_types_autocast=false, "
        "union_by_name=true)"
    )
    # The Athena table declares the timestamps as strings; DuckDB detects them as timestamps.
    # Turn them back into the RFC 3339 text granary wrote, so substr() means the same thing.
    types = {name: kind for name, kind, *_ in con.execute("DESCRIBE granary_logs_raw").fetchall()}
    as_text = [
        f"strftime({c}, '%Y-%m-%dT%H:%M:%S.%nZ') AS {c}"
        for c in ("logged_at", "routed_at")
        if "TIMESTAMP" in types.get(c, "")
    ]
    # The Athena table declares the job's resource fields whatever a log holds; JSON inference
    # leaves out a field no log has (the simulator's jobs name resourceRequirements, never the
    # older vcpus and memory): add the missing ones as NULL, so the views bind as on Athena.
    job_type = types.get("job", "").lower()
    missing = [f"{field} := NULL::{kind}" for field, kind in (
        ("vcpus", "DOUBLE"), ("memory", "DOUBLE"),
        ("resourceRequirements", "STRUCT(\"type\" VARCHAR, \"value\" VARCHAR)[]"))
        if not re.search(rf"\b{field.lower()}\b", job_type)]
    if missing:
        as_text.append(f"struct_update(job, container := struct_insert(job.container, "
                       f"{', '.join(missing)})) AS job")
    replace = f" REPLACE ({', '.join(as_text)})" if as_text else ""
    # Only a success a re-validation revoked carries `revoked`; the table declares it always.
    extra = ("" if "revoked" in types else
             ", NULL::STRUCT(through_attempt INTEGER, reason VARCHAR, \"at\" VARCHAR) AS revoked")
    con.execute(f"CREATE VIEW granary_logs AS SELECT *{replace}{extra} FROM granary_logs_raw")


def tables(logs_dir, inventory_csv, items_dir):
    """The four tables the Athena DDL declares, over local copies of what granary wrote."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(
        "CREATE TABLE granary_logs_inventory AS SELECT * FROM read_csv("
        f"'{inventory_csv}', header=true, columns={{'bucket': 'VARCHAR', 'key': 'VARCHAR', "
        "'size': 'BIGINT', 'last_modified_date': 'TIMESTAMP', 'dt': 'VARCHAR'})"
    )
    logs_view(con, logs_dir)
    # Only the patterns some file matches: DuckDB refuses a glob that matches nothing, where
    # Athena reads an empty prefix as no rows (a campaign whose records never moved after their
    # window's creation writes no single-entry objects at all).
    root = pathlib.Path(items_dir) / "history"
    history = [str(root / "**" / f"*.{ext}") for ext in ("json", "jsonl")
               if any(root.rglob(f"*.{ext}"))]
    # The columns the views read, as the Athena table declares them (the whole record is not
    # needed, and inferring its schema over every file costs more memory than it is worth).
    columns = ("{'item_id': 'VARCHAR', 'seq': 'INTEGER', 'from': 'VARCHAR', 'to': 'VARCHAR', "
               "'reason': 'VARCHAR', 'attempt': 'INTEGER', 'at': 'VARCHAR', 'by': 'VARCHAR'}")
    if history:
        con.execute(
            "CREATE VIEW granary_item_history AS SELECT * FROM read_json("
            f"{history}, format='newline_delimited', columns={columns}, hive_partitioning=true, "
            "hive_types_autocast=false)"
        )
    else:
        con.execute(
            "CREATE VIEW granary_item_history AS SELECT NULL::VARCHAR AS item_id, "
            "NULL::INTEGER AS seq, NULL::VARCHAR AS \"from\", NULL::VARCHAR AS \"to\", "
            "NULL::VARCHAR AS reason, NULL::INTEGER AS attempt, NULL::VARCHAR AS \"at\", "
            "NULL::VARCHAR AS \"by\", NULL::VARCHAR AS date, NULL::VARCHAR AS state WHERE false"
        )
    # The records, with the columns the transitions view reads (as ddl/granary_item_records.sql).
    entry = ("STRUCT(item_id VARCHAR, seq INTEGER, \"from\" VARCHAR, \"to\" VARCHAR, "
             "reason VARCHAR, attempt INTEGER, \"at\" VARCHAR, \"by\" VARCHAR)")
    record_columns = (
        "{'id': 'VARCHAR', 'seq': 'INTEGER', 'previous_state': 'VARCHAR', 'state': 'VARCHAR', "
        "'reason': 'VARCHAR', 'download': 'INTEGER', 'processing': 'INTEGER', "
        "'last_updated': 'VARCHAR', 'updated_by': 'VARCHAR', "
        "'history_batch': 'STRUCT(keys VARCHAR[], through_seq INTEGER)', "
        f"'earlier_steps': '{entry}[]'}}"
    )
    records = str(pathlib.Path(items_dir) / "items" / "*.json")
    con.execute(
        "CREATE VIEW granary_item_records AS SELECT * FROM read_json("
        f"'{records}', format='auto', columns={record_columns})"
    )
    return con


def run(logs_dir, inventory_csv, items_dir):
    import duckdb

    con = tables(logs_dir, inventory_csv, items_dir)
    # Views build on each other: create them in whatever order succeeds.
    pending = sorted((ROOT / "views").glob("*.sql"))
    while pending:
        failed = []
        for view in pending:
            try:
                for statement in to_duckdb(view.read_text()):
                    con.execute(statement)
            except duckdb.CatalogException:
                failed.append(view)
        if len(failed) == len(pending):
            sys.exit(f"views that cannot be created: {[v.name for v in failed]}")
        pending = failed
    out = {"from_inventory": {}}
    for report in sorted((ROOT / "reports").glob("*.sql")):
        sql = report.read_text()
        if "granary_ingest_catalog" in sql:
            continue  # the ingest catalog's reports run in `catalog` mode
        (statement,) = to_duckdb(sql)
        cursor = con.execute(statement)
        names = [d[0] for d in cursor.description]
        rows = [dict(zip(names, row)) for row in cursor.fetchall()]
        if "granary_job_logs" in sql or "granary_logs_inventory" in sql:
            out["from_inventory"][report.stem] = rows
        else:
            out[report.stem] = rows
    steps = con.execute(
        "SELECT id, name, type, step_complete, ended_in FROM granary_item_steps ORDER BY id"
    )
    names = [d[0] for d in steps.description]
    out["item_steps"] = [dict(zip(names, row)) for row in steps.fetchall()]
    print(json.dumps(out, default=str, indent=1))


def audit(logs_dir, inventories_dir, products_csv, max_retries, template):
    """athena/audit/audit_lists.sql on DuckDB: the lists `granary audit` writes, as JSON rows."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    logs_view(con, logs_dir)
    con.execute("CREATE VIEW granary_inventories AS SELECT * FROM read_parquet("
                f"'{pathlib.Path(inventories_dir) / '*.parquet'}')")
    con.execute(
        "CREATE TABLE granary_products_inventory AS SELECT * FROM read_csv("
        f"'{products_csv}', header=true, columns={{'bucket': 'VARCHAR', 'key': 'VARCHAR', "
        "'size': 'BIGINT', 'last_modified_date': 'TIMESTAMP', 'dt': 'VARCHAR'})"
    )
    prefix, suffix = template.split("{id}")
    sql = ((ROOT / "audit" / "audit_lists.sql").read_text()
           .replace("${MAX_RETRIES}", str(int(max_retries)))
           .replace("${PRODUCT_PREFIX}", prefix)
           .replace("${PRODUCT_SUFFIX}", suffix))
    (statement,) = to_duckdb(sql)
    print(json.dumps([list(row) for row in con.execute(statement).fetchall()]))


def serve(logs_dir, inventory_csv, items_dir, queries_log):
    """Athena's query API over DuckDB, for `granary report --athena` to talk to unchanged."""
    import http.server
    import uuid

    con = tables(logs_dir, inventory_csv, items_dir)
    results = {}

    class Athena(http.server.BaseHTTPRequestHandler):
        def answer(self, status, body):
            data = json.dumps(body, default=str).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/x-amz-json-1.1")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):  # noqa: N802 - http.server's name
            target = self.headers.get("X-Amz-Target", "")
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
            op = target.rsplit(".", 1)[-1]
            if op == "StartQueryExecution":
                sql = request["QueryString"]
                with open(queries_log, "a") as log:
                    log.write(json.dumps({"sql": sql, "work_group": request.get("WorkGroup"),
                                          "database": request.get("QueryExecutionContext", {})
                                          .get("Database")}) + "\n")
                qid = str(uuid.uuid4())
                try:
                    names, rows = [], []
                    for statement in to_duckdb(sql):
                        cursor = con.execute(statement)
                        if cursor.description:
                            names = [d[0] for d in cursor.description]
                            rows = cursor.fetchall()
                    results[qid] = ("SUCCEEDED", "", names, rows)
                except Exception as e:  # noqa: BLE001 - Athena reports it on the query
                    results[qid] = ("FAILED", str(e), [], [])
                return self.answer(200, {"QueryExecutionId": qid})
            qid = request.get("QueryExecutionId")
            if qid not in results:
                return self.answer(400, {"__type": "InvalidRequestException",
                                         "Message": f"no query {qid}"})
            state, why, names, rows = results[qid]
            if op == "GetQueryExecution":
                status = {"State": state}
                if why:
                    status["StateChangeReason"] = why
                return self.answer(200, {"QueryExecution": {"QueryExecutionId": qid,
                                                            "Status": status}})
            if op == "GetQueryResults":
                # As Athena answers a SELECT: the column names are the first row; every cell
                # is text, a NULL an empty Data entry.
                cell = lambda v: {} if v is None else {"VarCharValue": str(v)}  # noqa: E731
                table = ([{"Data": [cell(n) for n in names]}] if names else []) + [
                    {"Data": [cell(v) for v in row]} for row in rows]
                return self.answer(200, {"ResultSet": {
                    "Rows": table,
                    "ResultSetMetadata": {"ColumnInfo": [
                        {"Name": n, "Type": "varchar"} for n in names]}}})
            return self.answer(400, {"__type": "InvalidRequestException",
                                     "Message": f"{op} is not served here"})

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Athena)
    print(f"port {server.server_address[1]}", flush=True)
    server.serve_forever()


def catalog(catalog_dir, collection):
    """The ingest catalog's reports over a local copy of ingest/catalog/ (collection=…/ folders
    of one JSON record per object), for `collection`."""
    import duckdb

    con = duckdb.connect()
    pattern = str(pathlib.Path(catalog_dir) / "**" / "*.json")
    # The columns as the Athena table declares them (timestamps are strings there, as written).
    text = ["job", "batch", "identifier", "local_id", "primary_id", "submission_mode",
            "erc_who", "erc_what", "erc_when", "storage_manifest", "processing_job",
            "recorded_at"]
    columns = ", ".join([f"'{c}': 'VARCHAR'" for c in text] + [
        "'file_count': 'INTEGER'", "'bytes': 'BIGINT'",
        "'files': 'STRUCT(key VARCHAR, sha256 VARCHAR, size BIGINT, name VARCHAR)[]'"])
    con.execute(
        "CREATE VIEW granary_ingest_catalog AS SELECT * FROM read_json("
        f"'{pattern}', format='auto', columns={{{columns}}}, hive_partitioning=true, "
        "hive_types_autocast=false)"
    )
    out = {}
    for report in sorted((ROOT / "reports").glob("*.sql")):
        sql = report.read_text()
        if "granary_ingest_catalog" not in sql:
            continue
        (statement,) = to_duckdb(sql.replace("${COLLECTION}", collection))
        cursor = con.execute(statement)
        names = [d[0] for d in cursor.description]
        out[report.stem] = [dict(zip(names, row)) for row in cursor.fetchall()]
    print(json.dumps(out, default=str, indent=1))


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "parse":
        parse_all()
    elif len(sys.argv) == 5 and sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3], sys.argv[4])
    elif len(sys.argv) == 4 and sys.argv[1] == "catalog":
        catalog(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 7 and sys.argv[1] == "audit":
        audit(*sys.argv[2:7])
    elif len(sys.argv) == 6 and sys.argv[1] == "serve":
        serve(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
    else:
        sys.exit(__doc__)
