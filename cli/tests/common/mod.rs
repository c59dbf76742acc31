//! The `granary` binary as an operator runs it: only the granary variables a test gives it.
#![allow(dead_code)]

use std::process::Command;

/// Runs `granary ARGS` with exactly `vars` of granary's variables set (the AWS ones are kept):
/// exit code, stdout, stderr.
pub fn granary(vars: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
    granary_with_stdin(vars, args, "")
}

/// `granary ARGS` with `stdin` as its standard input.
pub fn granary_with_stdin(
    vars: &[(&str, &str)],
    args: &[&str],
    stdin: &str,
) -> (i32, String, String) {
    use std::io::Write;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_granary"));
    for (k, _) in std::env::vars() {
        if k.starts_with("GRANARY_") {
            cmd.env_remove(k);
        }
    }
    let mut child = cmd
        .args(args)
        .envs(vars.iter().copied())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running granary: {e}"));
    if let Some(mut input) = child.stdin.take() {
        input
            .write_all(stdin.as_bytes())
            .unwrap_or_else(|e| panic!("feeding granary's stdin: {e}"));
    }
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("running granary: {e}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `granary ARGS --json`, which must succeed, its output parsed.
pub fn json(vars: &[(&str, &str)], args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.push("--json");
    let (code, out, err) = granary(vars, &all);
    assert_eq!(code, 0, "granary {args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// Creates `name` in the emulator's S3 (AWS_ENDPOINT_URL) and returns it.
pub async fn bucket(clients: &granary::adapters::aws::AwsClients, name: String) -> String {
    clients
        .s3
        .create_bucket()
        .bucket(&name)
        .send()
        .await
        .unwrap_or_else(|e| {
            panic!("creating bucket {name} in the emulator's S3 (AWS_ENDPOINT_URL): {e}")
        });
    name
}

/// The variables an operator exports for a campaign's stack on the emulator: its bucket, job
/// queue and definition, retry queue and failure DLQ (pass them as [`vars`] gives them).
pub fn stack_vars(c: &granary_local::campaign::Campaign) -> Vec<(&'static str, String)> {
    let stack = c.stack.as_ref().expect("the campaign's stack");
    vec![
        ("GRANARY_BUCKET", c.runtime.ctx.config.layout.bucket.clone()),
        ("GRANARY_JOB_QUEUE", stack.job_queue.clone()),
        ("GRANARY_JOB_DEFINITION", stack.job_definition.clone()),
        ("GRANARY_RETRY_QUEUE_URL", stack.retry_queue_url.clone()),
        ("GRANARY_FAILURE_DLQ_URL", stack.failure_dlq_url.clone()),
    ]
}

/// `owned` as the `(name, value)` pairs [`granary`] takes.
pub fn vars<'a>(owned: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    owned.iter().map(|(k, v)| (*k, v.as_str())).collect()
}
