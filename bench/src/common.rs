//! What several benches share: process figures and the emulator stack they run on.

use super::*;

/// User + system CPU seconds this process has used (all threads), from /proc/self/stat.
pub(crate) fn process_cpu_secs() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // Linux reports these in clock ticks of 1/100 s (USER_HZ) on every architecture we build for.
    (ticks(11) + ticks(12)) / 100.0
}

pub(crate) fn snapshot_all(c: &RequestCounts) -> [u64; 8] {
    [
        c.s3_get.load(Ordering::Relaxed),
        c.s3_put.load(Ordering::Relaxed),
        c.s3_list.load(Ordering::Relaxed),
        c.s3_other.load(Ordering::Relaxed),
        c.s3_delete.load(Ordering::Relaxed),
        c.sqs_total(),
        c.batch_calls.load(Ordering::Relaxed),
        c.batch_submits.load(Ordering::Relaxed),
    ]
}

/// A fresh stack on the emulator for one benchmark.
pub(crate) async fn bench_stack(
    tag: &str,
) -> Result<(AwsClients, granary_local::stack::EmulatorStack)> {
    use granary_local::stack::{EmulatorStack, StackOptions};
    let config = load_sdk_config().await;
    let clients = AwsClients::new(&config);
    let iam = aws_sdk_iam::Client::new(&config);
    let stack = EmulatorStack::provision(
        &clients,
        &iam,
        &format!("granary-bench-{tag}{}", std::process::id()),
        StackOptions::default(),
    )
    .await
    .context("provisioning the bench stack (is AWS_ENDPOINT_URL set? use `make bench`)")?;
    Ok((clients, stack))
}

/// What Batch would report for a bench job on the stack's queue, attempt 1.
pub(crate) fn bench_facts(
    stack: &granary_local::stack::EmulatorStack,
    job: &str,
    granule_id: String,
) -> granary_local::events::JobFacts {
    granary_local::events::JobFacts {
        job_id: job.to_owned(),
        job_name: job.to_owned(),
        job_arn: format!("arn:aws:batch:us-east-1:000000000000:job/{job}"),
        job_queue_arn: stack.job_queue_arn.clone(),
        job_definition_arn: stack.job_definition.clone(),
        granule_id,
        attempt: 1,
        retry_strategy: granary_local::events::default_retry_strategy(2),
        created_at_ms: 1_700_000_000_000,
        account: "000000000000".into(),
        region: "us-east-1".into(),
        array: None,
        campaign: None,
    }
}

pub(crate) fn proc_status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}
