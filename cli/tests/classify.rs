//! `granary classify` as an operator runs it: a file in, the route and the reason out.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use std::io::Write;
use std::process::{Command, Stdio};

fn event(
    status: &str,
    status_reason: &str,
    exit_code: Option<i64>,
    batch_attempts: u32,
    attempts: usize,
) -> String {
    let container = match exit_code {
        Some(c) => serde_json::json!({"exitCode": c, "logStreamName": "s"}),
        None => serde_json::json!({"logStreamName": "s"}),
    };
    let attempt = serde_json::json!({"container": container, "statusReason": status_reason});
    serde_json::json!({
        "detail-type": "Batch Job State Change", "source": "aws.batch",
        "detail": {
            "jobName": "g-a1-x", "jobId": "j-1", "jobQueue": "arn:q", "status": status,
            "statusReason": status_reason, "attempts": vec![attempt; attempts],
            "retryStrategy": {"attempts": batch_attempts, "evaluateOnExit": [
                {"onStatusReason": "Host EC2*", "action": "retry"}, {"onReason": "*", "action": "exit"}]},
            "container": {"environment": [{"name": "GRANULE_ID", "value": "HLS.S30.T01GBH.2022226T214921.v2.0"}, {"name": "ATTEMPT", "value": "1"}]}
        }
    })
    .to_string()
}

fn classify(input: &str, json: bool) -> (i32, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_granary"));
    cmd.args(["classify", "-"]);
    if json {
        cmd.arg("--json");
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[test]
fn routes_and_reasons() {
    let spot = "Host EC2 (instance i-0123456789abcdef0) terminated.";
    // FAILED is final: with a Batch attempt left and a RETRY rule matching, the job still failed
    // (Batch does not retry a timed-out or terminated job), so granary routes it.
    let (code, out) = classify(&event("FAILED", spot, None, 2, 1), true);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["route"], "retry_queue");
    assert_eq!(v["granule_id"], "HLS.S30.T01GBH.2022226T214921.v2.0");
    assert!(
        v["batch_rules"]
            .as_str()
            .unwrap()
            .contains("evaluateOnExit rule 0 says RETRY"),
        "{out}"
    );

    let (_, out) = classify(&event("FAILED", spot, None, 2, 2), true);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["route"].as_str(), v["classification"].as_str()),
        (Some("retry_queue"), Some("RETRYABLE"))
    );

    let (_, out) = classify(
        &event(
            "FAILED",
            "Essential container in task exited",
            Some(3),
            2,
            1,
        ),
        false,
    );
    assert!(out.contains("application exited with code 3"), "{out}");
    assert!(out.contains("failure DLQ"), "{out}");
    assert!(
        out.contains("1 of 2 Batch attempts used; evaluateOnExit rule 1 says exit"),
        "{out}"
    );
}

#[test]
fn bad_input_is_a_clear_error() {
    let (code, out) = classify("{not json", false);
    assert_eq!(code, 2);
    assert!(out.contains("the event is not JSON"), "{out}");
    let (code, out) = classify(
        r#"{"detail-type":"x","source":"aws.ec2","detail":{}}"#,
        false,
    );
    assert_eq!(code, 2);
    assert!(out.contains("the job monitor rejects this event"), "{out}");
}

#[test]
fn events_the_monitor_rejects_exit_non_zero_with_the_reason() {
    let bad_attempt = event(
        "FAILED",
        "Essential container in task exited",
        Some(1),
        1,
        1,
    )
    .replace(r#""value":"1""#, r#""value":"-1""#);
    // granary's own job, carrying its tags badly: rejected outright (exit 2), no route shown.
    let (code, out) = classify(&bad_attempt, true);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("event_without_granule"), "{out}");
    assert!(out.contains("\"-1\" is not a positive integer"), "{out}");
    let bad_id = event("SUCCEEDED", "", Some(0), 1, 1).replace("HLS.S30", "HLS/S30");
    let (code, out) = classify(&bad_id, false);
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("contains '/'"), "{out}");
}

/// A job granary did not submit (no granule in it): how it ended and the route it would take,
/// then why the monitor rejects it — from a published event, exit 1.
#[test]
fn a_foreign_job_is_classified_then_rejected_with_the_reason() {
    let foreign = event(
        "FAILED",
        "Host EC2 (instance i-0abc) terminated.",
        None,
        1,
        1,
    )
    .replace("GRANULE_ID", "SOMETHING_ELSE");
    let (code, out) = classify(&foreign, false);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("classification: Retryable"), "{out}");
    assert!(
        out.contains("send to the retry queue — had it named a granule"),
        "{out}"
    );
    assert!(
        out.contains("the job monitor rejects this event (event_without_granule)"),
        "{out}"
    );
    let (code, out) = classify(&foreign, true);
    assert_eq!(code, 1, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["would_route"], "retry_queue", "{out}");
    assert_eq!(v["rejected"]["kind"], "event_without_granule", "{out}");
    // A published event of someone else's Fargate job (../shared/real-batch-events, 09): its
    // exit code 1 is the application's, non-retryable, as SOURCES.md routes it.
    let corpus = std::env::var_os("GRANARY_REAL_EVENTS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/real-batch-events")
        });
    let published = std::fs::read_to_string(corpus.join("09-fargate-exit1-failed.json"))
        .expect("the published corpus (../shared/real-batch-events)");
    let (code, out) = classify(&published, true);
    assert_eq!(code, 1, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["classification"], "NON_RETRYABLE", "{out}");
    assert_eq!(v["would_route"], "failure_dlq", "{out}");
    assert!(
        v["rejected"]["reason"]
            .as_str()
            .unwrap()
            .contains("GRANULE_ID"),
        "{out}"
    );
}

/// An array window's child names its place in the window claim; its parent is ignored.
#[test]
fn an_array_windows_child_and_parent() {
    let job = |id: &str, array: serde_json::Value, status: &str, exit: i64| {
        serde_json::json!({
            "detail-type": "Batch Job State Change", "source": "aws.batch",
            "detail": {
                "jobName": "w-a-w0-0123456789", "jobId": id, "jobQueue": "arn:q", "status": status,
                "statusReason": "Essential container in task exited",
                "attempts": [{"container": {"exitCode": exit}}],
                "parameters": {"window_claim": "claims/windows/a.parquet/start=000000000000.json",
                               "window_token": "t", "attempt": "1"},
                "arrayProperties": array
            }
        })
        .to_string()
    };
    let (code, out) = classify(
        &job("p:4", serde_json::json!({"index": 4}), "FAILED", 3),
        false,
    );
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("granule 4 of window claim claims/windows/a.parquet/start=000000000000.json"),
        "{out}"
    );
    assert!(out.contains("failure DLQ"), "{out}");
    let (code, out) = classify(&job("p", serde_json::json!({"size": 5}), "FAILED", 3), true);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["route"], "ignored", "{out}");
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .contains("array window's parent"),
        "{out}"
    );
}
