//! Array-job windows against the emulator, through the real SDK: the feeder submits a window as
//! one SubmitJob with `arrayProperties.size`, Batch's DescribeJobs answers for each child
//! `<parent>:<index>` with the parent's environment and the child's index, the reference
//! container wrapper (`container/array_child.py`) run with a child's environment names the
//! child's granule from the window claim in S3, and the job monitor handles a child's end as
//! DescribeJobs gives it.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use granary::domain::window::WindowClaim;
use granary::handlers::monitor::{self, MonitorOutcome};
use granary::repositories::read_json;
use granary_tests::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The emulator's Python (it has boto3, which the wrapper uses).
fn python() -> PathBuf {
    let p = std::env::var_os("GRANARY_EMULATOR_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".venv/bin/python"));
    assert!(
        p.exists(),
        "{} is missing: run `scripts/emulator.sh install` (make test does)",
        p.display()
    );
    p
}

/// A job's container environment as DescribeJobs gives it.
fn environment_of(detail: &serde_json::Value) -> Vec<(String, String)> {
    detail["container"]["environment"]
        .as_array()
        .expect("the child's environment")
        .iter()
        .map(|kv| {
            (
                kv["name"].as_str().unwrap().to_owned(),
                kv["value"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Runs the wrapper as Batch would start child `index`: the job's environment plus
/// AWS_BATCH_JOB_ARRAY_INDEX; the command prints the granule and attempt it was given.
fn run_child(environment: &[(String, String)], index: Option<u32>) -> (i32, String, String) {
    let mut cmd = Command::new(python());
    cmd.arg(root().join("container/array_child.py"))
        .args(["sh", "-c", "printf '%s %s' \"$GRANULE_ID\" \"$ATTEMPT\""])
        .env_remove("GRANULE_ID")
        .env_remove("GRANARY_WINDOW_CLAIM")
        .env_remove("AWS_BATCH_JOB_ARRAY_INDEX");
    for (k, v) in environment {
        cmd.env(k, v);
    }
    if let Some(i) = index {
        cmd.env("AWS_BATCH_JOB_ARRAY_INDEX", i.to_string());
    }
    let out = cmd.output().expect("running container/array_child.py");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_window_is_one_array_job_whose_children_read_their_granules_from_the_claim() {
    let s = stack("array", 2, &[("GRANARY_ARRAY_WINDOWS", "on")]).await;
    let granules = ids(25, "AR");
    put_inventory(
        s.ctx.store.as_ref(),
        "inventories/2024-01.parquet",
        &granules,
        &small_layout(),
    )
    .await;
    let out = feed(&s.ctx, 25).await;
    assert_eq!((out.submitted, out.stopped.clone()), (25, None), "{out:?}");
    let jobs = all_jobs(&s).await;
    let parents: Vec<&(String, String)> = jobs.iter().filter(|(_, id)| !id.contains(':')).collect();
    assert_eq!(parents.len(), 1, "one SubmitJob for the window: {jobs:?}");

    let key = granary::domain::layout::claims::window_key(
        &s.ctx.config.layout.claim_prefix,
        "inventories/2024-01.parquet",
        0,
    );
    let claim = read_json::<WindowClaim>(s.ctx.store.as_ref(), &key)
        .await
        .unwrap()
        .expect("the window claim")
        .value;
    assert!(claim.array);
    let parent = claim.array_job_id.clone().expect("the array recorded");
    assert_eq!(parents[0].1, parent);

    // DescribeJobs of the parent and of each child, by id.
    let mut ids: Vec<String> = vec![parent.clone()];
    ids.extend((0..25).map(|i| format!("{parent}:{i}")));
    let described = s.ctx.jobs.describe_many(&ids).await.unwrap();
    assert_eq!(described.len(), 26, "the parent and its 25 children");
    let of = |id: &str| {
        described
            .iter()
            .find(|d| d.summary.job_id == id)
            .unwrap_or_else(|| panic!("{id} not described"))
    };
    assert_eq!(of(&parent).detail["arrayProperties"]["size"], 25);

    // Each child, started as Batch starts it, processes its own granule.
    for i in [0u32, 13, 24] {
        let child = of(&format!("{parent}:{i}"));
        // AWS's JobDetail of a child has `arrayProperties.index` (the published children 04,
        // 05 and 11 do); moto 5.2.5 leaves it out. Either way the job id ends `:index`, which
        // the monitor reads when the field is missing.
        let index = child.detail["arrayProperties"]["index"].as_u64();
        assert!(
            index.is_none_or(|n| n == u64::from(i)),
            "{:?}",
            child.detail
        );
        assert_eq!(
            granary::domain::job_end::child_index(&child.summary.job_id),
            Some(i)
        );
        let env = environment_of(&child.detail);
        let (code, stdout, stderr) = run_child(&env, Some(i));
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(stdout, format!("{} 1", granules[i as usize]), "{stderr}");
    }
    // A child whose index the claim does not have, and one without an index, exit non-zero
    // with the reason.
    let env: Vec<(String, String)> = vec![(
        "GRANARY_WINDOW_CLAIM".into(),
        format!("s3://{}/{key}", s.ctx.config.layout.bucket),
    )];
    let (code, _, stderr) = run_child(&env, Some(25));
    assert_eq!(code, 65, "{stderr}");
    assert!(stderr.contains("none at index 25"), "{stderr}");
    let (code, _, stderr) = run_child(&env, None);
    assert_eq!(code, 64, "{stderr}");
    // A claim that does not exist is the setup's failure (65); S3 not answering is the cloud's
    // (66, which the job definition's RetryStrategy retries).
    let missing = vec![(
        "GRANARY_WINDOW_CLAIM".to_owned(),
        format!(
            "s3://{}/claims/windows/none.json",
            s.ctx.config.layout.bucket
        ),
    )];
    let (code, _, stderr) = run_child(&missing, Some(0));
    assert_eq!(code, 65, "{stderr}");
    let mut unreachable = env.clone();
    unreachable.push(("AWS_ENDPOINT_URL".into(), "http://127.0.0.1:9".into()));
    unreachable.push(("AWS_MAX_ATTEMPTS".into(), "1".into()));
    let (code, _, stderr) = run_child(&unreachable, Some(0));
    assert_eq!(code, 66, "{stderr}");

    // The emulator's Batch ends a job as it is submitted (moto): the monitor handles a child's
    // end from DescribeJobs as its event, the granule read from the claim.
    if s.stack.batch {
        let child = of(&format!("{parent}:7")).clone();
        assert!(child.summary.status.is_terminal(), "{:?}", child.summary);
        let outcome = monitor::described_job(&s.ctx, child, "test", None)
            .await
            .unwrap();
        assert!(
            matches!(
                outcome,
                Some(MonitorOutcome::Succeeded { .. } | MonitorOutcome::Routed { .. })
            ),
            "{outcome:?}"
        );
        let logged = keys(s.ctx.store.as_ref(), &s.ctx.config.layout.log_prefix).await;
        assert_eq!(logged.len(), 1, "{logged:?}");
        assert!(logged[0].contains(&granules[7]), "{logged:?}");
        // The parent's own description routes nothing.
        let parent_description = of(&parent).clone();
        let outcome = monitor::described_job(&s.ctx, parent_description, "test", None)
            .await
            .unwrap();
        assert_eq!(outcome, None);
    }
}

/// Retries gathered into arrays (`GRANARY_ARRAY_RETRIES`), through the real SDK: three retries
/// the requeuer parked go as one SubmitJob with `arrayProperties.size` 3 at the feeder's next
/// run; the reference wrapper, started as a child of that array, reads its granule and its own
/// attempt from the window claim (the array's `ATTEMPT` is only the lowest); the monitor logs a
/// child's end at that attempt.
#[tokio::test]
async fn parked_retries_go_as_one_array_whose_children_read_their_own_attempts() {
    use granary::handlers::requeuer::{self, RequeueOutcome};
    let s = stack(
        "arrayretries",
        2,
        &[
            ("GRANARY_ARRAY_WINDOWS", "on"),
            ("GRANARY_ARRAY_RETRIES", "on"),
        ],
    )
    .await;
    let granules = ids(3, "RT");
    let attempts = [1u32, 2, 1];
    for (g, attempt) in granules.iter().zip(attempts) {
        let message = serde_json::json!({"granule_id": g, "attempt": attempt}).to_string();
        let out = requeuer::handle_message(&s.ctx, &message).await.unwrap();
        assert_eq!(
            out,
            RequeueOutcome::Parked {
                attempt: attempt + 1
            }
        );
    }
    assert!(all_jobs(&s).await.is_empty(), "parked: nothing submitted");
    let out = feed(&s.ctx, 1).await;
    assert_eq!(out.retries_submitted, 3, "{out:?}");
    let jobs = all_jobs(&s).await;
    let parents: Vec<&(String, String)> = jobs.iter().filter(|(_, id)| !id.contains(':')).collect();
    assert_eq!(
        parents.len(),
        1,
        "one SubmitJob for the three retries: {jobs:?}"
    );

    let key = granary::domain::layout::claims::window_key(
        &s.ctx.config.layout.claim_prefix,
        granary::domain::window::RETRY_WINDOWS,
        0,
    );
    let claim = read_json::<WindowClaim>(s.ctx.store.as_ref(), &key)
        .await
        .unwrap()
        .expect("the window of retries")
        .value;
    assert!(claim.array && claim.is_retries());
    let parent = claim.array_job_id.clone().expect("the array recorded");
    assert_eq!(parents[0].1, parent);
    let ids: Vec<String> = (0..3).map(|i| format!("{parent}:{i}")).collect();
    let described = s.ctx.jobs.describe_many(&ids).await.unwrap();
    for (i, entry) in claim.entries().enumerate() {
        let child = described
            .iter()
            .find(|d| d.summary.job_id == ids[i])
            .unwrap_or_else(|| panic!("{} not described", ids[i]));
        let env = environment_of(&child.detail);
        assert!(
            env.contains(&("ATTEMPT".to_owned(), "2".to_owned())),
            "{env:?}"
        );
        let (code, stdout, stderr) = run_child(&env, Some(i as u32));
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(
            stdout,
            format!("{} {}", entry.granule_id, entry.attempt),
            "{stderr}"
        );
    }
    // The attempts the wrapper printed are the retries' own: 2, 3, 2 in the requeuer's order
    // of granule ids.
    let mut printed: Vec<(String, u32)> = claim
        .entries()
        .map(|e| (e.granule_id.to_string(), e.attempt))
        .collect();
    printed.sort();
    let mut want: Vec<(String, u32)> = granules
        .iter()
        .cloned()
        .zip(attempts.iter().map(|a| a + 1))
        .collect();
    want.sort();
    assert_eq!(printed, want);

    // moto ends a job as it is submitted: the monitor handles child 1's end at its attempt.
    if s.stack.batch {
        let child = described
            .iter()
            .find(|d| d.summary.job_id == ids[1])
            .unwrap()
            .clone();
        let entry = claim.entry(1).unwrap();
        let outcome = monitor::described_job(&s.ctx, child, "test", None)
            .await
            .unwrap();
        assert!(outcome.is_some(), "{outcome:?}");
        let logged = keys(s.ctx.store.as_ref(), &s.ctx.config.layout.log_prefix).await;
        assert_eq!(logged.len(), 1, "{logged:?}");
        assert!(
            logged[0].contains(&format!(
                "granule_id={}/attempt={}.json",
                entry.granule_id, entry.attempt
            )),
            "{logged:?}"
        );
    }
}
