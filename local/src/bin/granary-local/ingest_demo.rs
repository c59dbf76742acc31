//! `granary-local demo --ingest`: one batch through the ingest queue on the emulator's S3,
//! EventBridge and SQS — a checkm manifest of objects, two of them altered in transit, a capacity
//! that makes jobs wait in provisioning, a few processing jobs reclaimed by Spot on their first
//! attempt — printed tick by tick, then its report. The depositor's server is in memory
//! (granary's `MemoryRemote`) and so is the job runner, whose processing jobs end one tick after
//! they are submitted; each end goes to the job monitor as Batch's event would.

use anyhow::{Context, Result};
use bytes::Bytes;
use granary::adapters::aws::{AwsClients, EventBridgeBus, S3Store};
use granary::adapters::memory::{job_state_change, Ending, MemoryJobRunner, MemoryRemote};
use granary::config::{Config, Function};
use granary::domain::batch_event::JobStatus;
use granary::domain::ingest::batch::BatchState;
use granary::domain::ingest::index::BatchId;
use granary::domain::ingest::manifest::ManifestKind;
use granary::domain::ingest::record::{BatchRecord, Submission};
use granary::handlers::ingest::batches::BatchReport;
use granary::handlers::ingest::{self, operator, IngestSettings};
use granary::handlers::{monitor, Ctx};
use granary::ports::{ObjectStore, PutCondition};
use std::process::ExitCode;
use std::sync::Arc;

fn md5_hex(body: &[u8]) -> String {
    use md5::{Digest, Md5};
    format!("{:x}", Md5::digest(body))
}

pub async fn run(clients: &AwsClients, objects: usize, json: bool) -> Result<ExitCode> {
    let bucket = format!(
        "granary-ingest-demo-{}",
        chrono::Utc::now().format("%H%M%S")
    );
    clients
        .s3
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .context("creating the demo bucket")?;
    let store: Arc<dyn ObjectStore> = Arc::new(S3Store::new(clients.s3.clone(), &bucket));
    let remote = Arc::new(MemoryRemote::default());
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
    let (manifest, total) = serve_sample_objects(&remote, objects);
    let settings = IngestSettings {
        // About a quarter of the batch at once: the rest waits in provisioning.
        capacity_bytes: (total / 4).max(1),
        ..IngestSettings::default()
    };
    let (monitor_ctx, ctx) =
        demo_contexts(clients, &bucket, &store, &jobs, remote, settings).await?;
    let batch = submit_manifest(&ctx, &store, &bucket, manifest).await?;
    if !json {
        eprintln!(
            "bucket {bucket}: batch {} of {objects} objects ({total} bytes), capacity {} bytes",
            batch.id, ctx.config.ingest.capacity_bytes
        );
    }
    run_ticks(&ctx, &monitor_ctx, &jobs, &batch.id, json).await?;
    let reports = operator::reports(&ctx, &batch.id).await?;
    // Second attempts: the processing jobs Spot reclaimed, which the job monitor sent round again.
    let retried = jobs
        .submitted()
        .iter()
        .filter(|r| r.job_name.ends_with("-a2"))
        .count();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "bucket": bucket, "batch": batch.id, "reports": reports,
                "processing_retried_after_spot": retried,
            }))?
        );
    } else if let Some(r) = reports.last() {
        print_report(r, retried, &batch.id);
    }
    Ok(ExitCode::SUCCESS)
}

/// Puts `objects` sample map sheets on the depositor's server: the checkm manifest that lists
/// them, and their total size.
fn serve_sample_objects(remote: &MemoryRemote, objects: usize) -> (String, u64) {
    let mut manifest = String::from(
        "#%checkm_0.7\n#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileName | mrt:localIdentifier\n",
    );
    let mut total = 0u64;
    for n in 0..objects {
        let url = format!("https://depositor.example/scans/map-{n:04}.tif");
        let body = format!("map sheet {n} ").repeat(200 + n * 13);
        total += body.len() as u64;
        let digest = md5_hex(body.as_bytes());
        // Two objects arrive altered: their digests cannot match.
        let served = if n % 25 == 11 {
            body.replace('m', "M")
        } else {
            body.clone()
        };
        remote.serve(&url, Bytes::from(served));
        manifest.push_str(&format!(
            "{url} | md5 | {digest} | {} | map-{n:04}.tif | sheet-{n:04}\n",
            body.len()
        ));
    }
    (manifest, total)
}

/// The job monitor's context (the emulator's AWS, with its own retry queue and DLQ) and the
/// ingest handlers' (the same, with the demo's store, depositor, job runner and settings).
async fn demo_contexts(
    clients: &AwsClients,
    bucket: &str,
    store: &Arc<dyn ObjectStore>,
    jobs: &Arc<MemoryJobRunner>,
    remote: Arc<MemoryRemote>,
    settings: IngestSettings,
) -> Result<(Ctx, Ctx)> {
    let (retry_url, _) =
        granary_local::stack::queue(clients, &format!("{bucket}-retry"), &[]).await?;
    let (dlq_url, _) = granary_local::stack::queue(clients, &format!("{bucket}-dlq"), &[]).await?;
    // The monitor's sections: it never submits, so it needs no job queue.
    let config = Config::for_sections(Function::JobMonitor.sections(), |k| match k {
        "GRANARY_BUCKET" => Some(bucket.to_owned()),
        "GRANARY_RETRY_QUEUE_URL" => Some(retry_url.clone()),
        "GRANARY_FAILURE_DLQ_URL" => Some(dlq_url.clone()),
        _ => None,
    })?;
    let monitor_ctx = Ctx::aws(config.clone(), clients)?;
    let ctx = Ctx {
        store: store.clone(),
        jobs: jobs.clone(),
        remote,
        bus: Arc::new(EventBridgeBus::new(clients.events.clone(), "default")),
        config: Config {
            ingest: settings,
            ..config
        },
        ..monitor_ctx.clone()
    };
    Ok((monitor_ctx, ctx))
}

/// Stores the manifest in the bucket and submits it as the "maps" collection's batch.
async fn submit_manifest(
    ctx: &Ctx,
    store: &Arc<dyn ObjectStore>,
    bucket: &str,
    manifest: String,
) -> Result<BatchRecord> {
    let key = ctx.ingest().keys.manifest("maps.checkm");
    store
        .put(&key, Bytes::from(manifest), PutCondition::Overwrite)
        .await?;
    Ok(ingest::submit(
        ctx,
        Submission {
            collection: "maps".into(),
            manifest_url: format!("s3://{bucket}/{key}"),
            kind: ManifestKind::Files,
            priority: 5,
            callback: None,
            profile: None,
            submitter: "demo".into(),
            deposit: Default::default(),
        },
        chrono::Utc::now(),
    )
    .await?)
}

/// Ticks the ingest queue (at most 200 times) until the batch ends, ending the running
/// processing jobs after each tick and printing the batch's jobs by state (unless `json`).
async fn run_ticks(
    ctx: &Ctx,
    monitor_ctx: &Ctx,
    jobs: &MemoryJobRunner,
    batch: &BatchId,
    json: bool,
) -> Result<()> {
    for tick in 1..=200 {
        ingest::tick(ctx, chrono::Utc::now()).await?;
        end_running_jobs(jobs, monitor_ctx).await?;
        let status = operator::status(ctx, Some(batch)).await?;
        let Some(now) = status.first() else { break };
        if !json {
            let counts: Vec<String> = now.jobs.iter().map(|(s, n)| format!("{s} {n}")).collect();
            println!(
                "tick {tick:>3}  batch {:<16} {}",
                now.batch.state.to_string(),
                counts.join(", ")
            );
        }
        if matches!(
            now.batch.state,
            BatchState::Completed | BatchState::Failed | BatchState::Deleted
        ) {
            break;
        }
    }
    Ok(())
}

/// Ends every running processing job and hands its end to the job monitor, as Batch's event
/// would.
async fn end_running_jobs(jobs: &MemoryJobRunner, monitor_ctx: &Ctx) -> Result<()> {
    for (request, job) in jobs.running() {
        // One object in ten (job ids ending in 5) loses its Spot instance on the first attempt.
        let reclaimed =
            request.environment["INGEST_JOB_ID"].ends_with('5') && job.job_name.ends_with("-a1");
        let ending = if reclaimed {
            Ending::SpotReclaimed
        } else {
            Ending::Succeeded
        };
        if let Some(detail) = jobs.end(&job.job_id, ending) {
            let event = job_state_change(&detail).to_string();
            monitor::handle_message(monitor_ctx, &event).await?;
        }
    }
    Ok(())
}

/// The batch's latest report for a reader, and what the Spot reclaims cost.
fn print_report(r: &BatchReport, retried: usize, batch: &BatchId) {
    println!(
        "\nreport {}: {} completed, {} failed",
        r.number,
        r.completed.len(),
        r.failed.len()
    );
    for f in &r.failed {
        println!("  {}: {}", f.job, f.reason);
    }
    println!(
        "{retried} processing jobs reclaimed by Spot were classified by the job monitor and run again (attempt 2)."
    );
    println!(
        "\n`granary ingest resume --batch {batch}` would restart the failed jobs at downloading."
    );
}
