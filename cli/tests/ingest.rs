//! `granary ingest …` as an operator runs it, against the emulator: the binary with only the
//! variables each command needs, the depositor's files over real HTTP (the loopback archive).
//! A held collection holds the new batch until released; every object fails (two digests that
//! cannot match, one unreadable line), so the batch reports failed without a processing job
//! (the emulators run none); resume, update-report, report and delete follow, and a missing
//! variable is named.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use granary::adapters::aws::AwsClients;
use granary_tests::http_source;
mod common;

use serde_json::Value;

fn md5_hex(body: &[u8]) -> String {
    use md5::{Digest, Md5};
    format!("{:x}", Md5::digest(body))
}

// The archive server runs on this runtime while the test's thread waits for the binary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_submits_holds_releases_reports_resumes_and_deletes_a_batch() {
    assert!(
        std::env::var_os("AWS_ENDPOINT_URL").is_some(),
        "needs an AWS endpoint: run `make test`, or set AWS_ENDPOINT_URL"
    );
    let clients = AwsClients::from_env().await;
    let tag = std::process::id();
    let bucket = common::bucket(&clients, format!("gt-ingest-cli-{tag}")).await;
    let mut urls = Vec::new();
    for name in ["retry", "dlq"] {
        let url = clients
            .sqs
            .create_queue()
            .queue_name(format!("gt-ingest-cli-{name}-{tag}"))
            .send()
            .await
            .unwrap()
            .queue_url
            .unwrap();
        urls.push(url);
    }
    let server = http_source::start().await;
    let mut manifest = String::from(
        "#%checkm_0.7\n#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileName | mrt:localIdentifier\n",
    );
    for name in ["a.tif", "b.tif"] {
        let body = format!("scan {name}");
        // Served altered: the digest the manifest gives cannot match.
        server
            .archive
            .put(name, body.to_uppercase().as_bytes(), vec![]);
        manifest.push_str(&format!(
            "{}{name} | md5 | {} | | {name} | {name}\n",
            server.index_url,
            md5_hex(body.as_bytes())
        ));
    }
    manifest.push_str("not a url | | | | x | x\n");
    let dir = std::env::temp_dir().join(format!("granary-ingest-cli-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("maps.checkm");
    std::fs::write(&file, manifest).unwrap();

    // Everything but `tick` reads and writes records in the bucket: the bucket is all it needs.
    let bucket_only = [("GRANARY_BUCKET", bucket.as_str())];
    // `tick` is the dispatcher's pass: Batch and the failure DLQ too (no call reaches Batch here).
    let dispatcher = [
        ("GRANARY_BUCKET", bucket.as_str()),
        ("GRANARY_JOB_QUEUE", "granary-ingest-cli"),
        ("GRANARY_JOB_DEFINITION", "granary-ingest-cli"),
        ("GRANARY_RETRY_QUEUE_URL", urls[0].as_str()),
        ("GRANARY_FAILURE_DLQ_URL", urls[1].as_str()),
    ];

    let (code, _, err) = common::granary(
        &bucket_only,
        &[
            "ingest",
            "hold",
            "--collection",
            "maps",
            "--reason",
            "audit",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let submitted = common::json(
        &bucket_only,
        &[
            "ingest",
            "submit",
            file.to_str().unwrap(),
            "--collection",
            "maps",
            "--erc-what",
            "Map of the coast",
            "--mode",
            "update",
        ],
    );
    let batch = submitted["id"].as_str().unwrap().to_owned();
    assert_eq!(submitted["state"], "pending");
    assert_eq!(submitted["submission"]["erc_what"], "Map of the coast");
    assert_eq!(submitted["submission"]["submission_mode"], "update");

    // The tick as a person reads it: what moved, in words, and whether a step failed.
    let (code, out, err) = common::granary(&dispatcher, &["ingest", "tick", "--until-quiet"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("passes of the dispatcher, the last changing nothing"),
        "{out}"
    );
    assert!(out.contains("1  batches held"), "{out}");
    assert!(
        out.contains("no step failed") && !out.contains("TickSummary"),
        "{out}"
    );
    let status = common::json(&bucket_only, &["ingest", "status", &batch]);
    assert_eq!(status[0]["batch"]["state"], "held", "{status}");

    let (code, _, err) =
        common::granary(&bucket_only, &["ingest", "release", "--collection", "maps"]);
    assert_eq!(code, 0, "{err}");
    let passes = common::json(&dispatcher, &["ingest", "tick", "--until-quiet"]);
    assert!(passes.as_array().is_some_and(|p| p.len() > 1), "{passes}");
    let status = common::json(&bucket_only, &["ingest", "status", &batch]);
    assert_eq!(status[0]["batch"]["state"], "failed", "{status}");
    assert_eq!(status[0]["jobs"]["failed"], 3, "{status}");

    let reports = common::json(&bucket_only, &["ingest", "report", &batch]);
    let failed = reports[0]["failed"].as_array().unwrap();
    assert_eq!(failed.len(), 3, "{reports}");
    let reasons: Vec<&str> = failed.iter().filter_map(|f| f["reason"].as_str()).collect();
    assert_eq!(
        reasons.iter().filter(|r| r.contains("digest")).count(),
        2,
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("manifest line")),
        "{reasons:?}"
    );

    // Resume: the two downloads restart; the unreadable line cannot (exit 1, said why).
    let (code, out, _) = common::granary(
        &bucket_only,
        &["ingest", "resume", "--batch", &batch, "--json"],
    );
    assert_eq!(code, 1, "{out}");
    let resumed: Value = serde_json::from_str(&out).unwrap();
    let restarted = resumed
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["outcome"]["Ok"] == "downloading")
        .count();
    assert_eq!(restarted, 2, "{resumed}");
    common::json(&dispatcher, &["ingest", "tick", "--until-quiet"]);
    let (code, _, err) = common::granary(&bucket_only, &["ingest", "update-report", &batch]);
    assert_eq!(code, 0, "{err}");
    common::json(&dispatcher, &["ingest", "tick", "--until-quiet"]);
    let reports = common::json(&bucket_only, &["ingest", "report", &batch]);
    assert_eq!(reports.as_array().unwrap().len(), 2, "{reports}");
    assert_eq!(reports[1]["still_failed"].as_array().unwrap().len(), 3);

    // A failed batch is deleted with its jobs.
    let (code, out, err) = common::granary(&bucket_only, &["ingest", "delete", "--batch", &batch]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("deleted"), "{out}");
    let status = common::json(&bucket_only, &["ingest", "status", &batch]);
    assert_eq!(status[0]["batch"]["state"], "deleted", "{status}");

    // What a command lacks is named.
    let (code, _, err) = common::granary(&bucket_only, &["ingest", "tick"]);
    assert_eq!(code, 2);
    assert!(err.contains("GRANARY_JOB_QUEUE is not set"), "{err}");
    let (code, _, err) = common::granary(&[], &["ingest", "status"]);
    assert_eq!(code, 2);
    assert!(err.contains("GRANARY_BUCKET is not set"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
