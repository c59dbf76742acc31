//! The ingest queue under crashes: one batch (four objects: one altered in transit, one whose
//! processing is reclaimed by Spot on its first attempt, one whose processing fails; a callback)
//! runs through the dispatcher, and each processing job's end reaches the job monitor as Batch's
//! event. Each pass (a dispatcher tick, then the monitor's deliveries) dies at one of its
//! external calls in turn — the call never made, or made and its answer lost — and then the
//! schedule fires again and SQS redelivers what the dead monitor held (clean passes) until
//! nothing moves. Processing claims keep the real lease: a quiet world with a claim still in its
//! lease (a SubmitJob answer lost) lets the lease run out, as fifteen minutes would, and the next
//! tick takes the claim over and finds the job by name — ListJobs lags as Batch's may, so it is
//! listed only once that time has passed. A recovery may also run doubled: two ticks at once,
//! each event delivered twice at once. Audited after each run: every job ended where it should, both indexes list
//! each job exactly as its record says, no processing attempt was submitted twice, the failed
//! processing job is on the failure DLQ, every completed job's files are in the bucket and it
//! was announced, the batch's queueing was confirmed, and the batch reported the right jobs.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

mod platform;

use bytes::Bytes;
use granary::adapters::memory::{
    job_state_change, Ending, MemoryEventBus, MemoryJobRunner, MemoryMinter, MemoryQueue,
    MemoryRemote, MemoryStore,
};
use granary::adapters::tap::faults::{CrashPoint, Faults, Interleave};
use granary::adapters::tap::Tap;
use granary::config::{Config, Function};
use granary::domain::batch_event::JobStatus;
use granary::domain::ingest::batch::BatchState;
use granary::domain::ingest::deposit::MintFix;
use granary::domain::ingest::index::BatchId;
use granary::domain::ingest::job::{BatchGroup, JobState};
use granary::domain::ingest::manifest::ManifestKind;
use granary::domain::ingest::record::Submission;
use granary::handlers::ingest::{self, operator, operator::Target, IngestSettings, TickSummary};
use granary::handlers::monitor;
use granary::handlers::Ctx;
use granary::ports::{ObjectStore, OutgoingMessage, PutCondition, Queue};
use platform::crashes::{self, CrashRun, Crashes};
use platform::leases;
use std::collections::BTreeSet;
use std::sync::Arc;

struct World {
    store: Arc<MemoryStore>,
    jobs: Arc<MemoryJobRunner>,
    remote: Arc<MemoryRemote>,
    bus: Arc<MemoryEventBus>,
    dlq: Arc<MemoryQueue>,
    /// Batch's events, on their way to the job monitor.
    events: Arc<MemoryQueue>,
    /// The identifier service the storing step mints from.
    minter: Arc<MemoryMinter>,
    batch: BatchId,
}

const MAX_ATTEMPTS: u32 = 4;

/// The job monitor on the world's bucket and failure DLQ, its calls through `faults`.
fn monitor_ctx(w: &World, faults: &Arc<Faults>) -> granary::handlers::Ctx {
    Ctx {
        store: w.store.clone(),
        jobs: Arc::new(granary::adapters::unset::UnsetJobRunner),
        retry_queue: Arc::new(MemoryQueue::new("retry")),
        failure_dlq: w.dlq.clone(),
        ..Ctx::in_memory(config_of(Function::JobMonitor))
    }
    .tapped(faults.clone() as Arc<dyn Tap>)
}

/// Function `f`'s configuration in this harness: bucket `bucket`, MAX_ATTEMPTS processing attempts.
fn config_of(f: Function) -> Config {
    Config::for_sections(f.sections(), |k| match k {
        "GRANARY_BUCKET" => Some("bucket".into()),
        "GRANARY_RETRY_QUEUE_URL" => Some("retry".into()),
        "GRANARY_FAILURE_DLQ_URL" => Some("dlq".into()),
        "GRANARY_MAX_RETRIES" => Some((MAX_ATTEMPTS - 1).to_string()),
        "GRANARY_JOB_QUEUE" => Some("q".into()),
        "GRANARY_JOB_DEFINITION" => Some("d".into()),
        // Every batch confirms its queueing: the confirmation's calls are crash points too.
        "GRANARY_INGEST_QUEUED_CONFIRMATION" => Some("*".into()),
        // Objects are minted an identifier: the mint is a crash point too.
        "GRANARY_INGEST_EZID_URL" => Some("https://ezid.example".into()),
        "GRANARY_INGEST_EZID_SHOULDER" => Some("ark:/99999/fk4".into()),
        _ => None,
    })
    .expect("the harness's configuration is valid")
}

fn md5_hex(body: &[u8]) -> String {
    use md5::{Digest, Md5};
    format!("{:x}", Md5::digest(body))
}

fn ingest_ctx(w: &World, faults: Option<Arc<Faults>>) -> Ctx {
    // Every port the dispatcher calls, the depositor's server (downloads, callbacks) and the
    // notification bus included, passes through the faults: any call may be the crash point.
    let ctx = Ctx {
        store: w.store.clone(),
        jobs: w.jobs.clone(),
        failure_dlq: w.dlq.clone(),
        remote: w.remote.clone(),
        bus: w.bus.clone(),
        minter: Some(w.minter.clone()),
        ..Ctx::in_memory(config_of(Function::IngestDispatcher))
    };
    match faults {
        None => ctx,
        Some(f) => ctx.with_faults(&f),
    }
}

async fn world() -> World {
    submitted(world_unsubmitted().await, None).await.0
}

/// The world before its batch is submitted: the manifest in the bucket, the depositor's files
/// on its server.
async fn world_unsubmitted() -> World {
    let store = Arc::new(MemoryStore::new());
    let remote = Arc::new(MemoryRemote::default());
    let mut text = String::from("#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileName | mrt:localIdentifier\n");
    for n in 0..4 {
        let url = format!("http://archive/{n}.dat");
        let body = format!("object {n}");
        let served = if n == 1 {
            body.to_uppercase()
        } else {
            body.clone()
        };
        remote.serve(&url, Bytes::from(served));
        text.push_str(&format!(
            "{url} | md5 | {} | | {n}.dat | o{n}\n",
            md5_hex(body.as_bytes())
        ));
    }
    store
        .put(
            "ingest/manifests/m",
            Bytes::from(text),
            PutCondition::Overwrite,
        )
        .await
        .unwrap();
    World {
        store,
        // ListJobs lags, as Batch promises no read-after-write for it: a job whose SubmitJob
        // answer was lost is found by its name only once time has passed (`time_passes`).
        jobs: Arc::new(MemoryJobRunner::new(JobStatus::Running).listing_lags()),
        remote,
        bus: Arc::new(MemoryEventBus::default()),
        dlq: Arc::new(MemoryQueue::new("dlq")),
        events: Arc::new(MemoryQueue::new("events")),
        minter: Arc::new(MemoryMinter::default()),
        // Named once the submission has made the batch (`submitted`).
        batch: BatchId::parse("placeholder").unwrap(),
    }
}

/// The batch's submission message, as the ingest-submit Lambda receives it from SQS.
fn submission_event() -> aws_lambda_events::event::sqs::SqsEvent {
    let body = serde_json::to_string(&Submission {
        collection: "maps".into(),
        manifest_url: "s3://bucket/ingest/manifests/m".into(),
        kind: ManifestKind::Files,
        priority: 5,
        callback: Some("http://depositor/cb".into()),
        profile: None,
        submitter: "t".into(),
        deposit: Default::default(),
    })
    .unwrap();
    let mut m = aws_lambda_events::event::sqs::SqsMessage::default();
    m.message_id = Some("submission-1".into());
    m.body = Some(body);
    m.attributes
        .insert("SentTimestamp".into(), "1767225600000".into());
    let mut event = aws_lambda_events::event::sqs::SqsEvent::default();
    event.records = vec![m];
    event
}

/// The world after the ingest-submit Lambda took the submission, dying at `crash` (then SQS
/// delivers the message again, a visibility timeout later, to a clean invocation). Returns the
/// world and the first invocation's crashes (its calls, whether it died).
async fn submitted(mut w: World, crash: Option<CrashPoint>) -> (World, Crashes) {
    let crashes = Crashes::new(crash.as_slice());
    let faults = crashes.invocation();
    let now = chrono::Utc::now();
    let response = ingest::handle_submissions(
        &ingest_ctx(&w, Some(faults.clone())),
        submission_event(),
        now,
    )
    .await;
    if !crashes.ended(&faults) || !response.batch_item_failures.is_empty() {
        let later = now + chrono::Duration::minutes(6);
        let again =
            ingest::handle_submissions(&ingest_ctx(&w, None), submission_event(), later).await;
        assert!(again.batch_item_failures.is_empty(), "{again:?}");
    }
    let batches: Vec<String> = w
        .store
        .list("ingest/batches/")
        .await
        .unwrap()
        .into_iter()
        .filter_map(|m| {
            Some(
                m.key
                    .strip_prefix("ingest/batches/")?
                    .strip_suffix(".json")?
                    .to_owned(),
            )
        })
        .collect();
    assert_eq!(batches.len(), 1, "one submission, one batch: {batches:?}");
    w.batch = BatchId::parse(&batches[0]).unwrap();
    (w, crashes)
}

/// Batch ends every running processing job — o3's first attempt is reclaimed by Spot, o4's
/// application fails, the rest succeed — and EventBridge queues each end's event for the monitor.
async fn finish_jobs(w: &World) -> usize {
    let mut finished = 0;
    for (request, job) in w.jobs.running() {
        let id = &request.environment["INGEST_JOB_ID"];
        let ending = if *id == w.batch.job(3).to_string() && job.job_name.ends_with("-a1") {
            Ending::SpotReclaimed
        } else if *id == w.batch.job(4).to_string() {
            Ending::Exited(1)
        } else {
            Ending::Succeeded
        };
        let detail = w.jobs.end(&job.job_id, ending).unwrap();
        w.events
            .send(OutgoingMessage::new(job_state_change(&detail).to_string()))
            .await
            .unwrap();
        finished += 1;
    }
    finished
}

/// The monitor handles every visible event; those it handled are deleted (as Lambda does), the
/// others come back once their visibility timeout passes. Whether it handled any.
async fn deliver_events(w: &World, faults: &Arc<Faults>) -> bool {
    let ctx = monitor_ctx(w, faults);
    let mut handled = false;
    for m in w.events.receive(10, 60, 0).await.unwrap() {
        if monitor::handle_message(&ctx, &m.body).await.is_ok() {
            w.events.delete(&m.receipt_handle).await.unwrap();
            handled = true;
        }
    }
    handled
}

/// Passes until quiet, with an operator's hold and release of a job; the pass during which the
/// run's `crash`th external call falls dies there.
async fn run(w: &World, crash: Option<CrashPoint>) -> Crashes {
    let crashes = Crashes::new(crash.as_slice());
    passes(w, &crashes, true, false).await;
    crashes
}

/// Clean passes until quiet, with no operator at work.
async fn settle(w: &World) {
    passes(w, &Crashes::new(&[]), false, false).await;
}

/// Passes until quiet, dying at each planned crash in turn (their calls counted across the
/// passes: a later one falls inside the recovery from an earlier one). `doubled`: once the
/// first crash is reached, every pass of the recovery runs two dispatcher ticks at once and
/// delivers each event to two monitors at once, their calls interleaved one by one.
async fn passes(w: &World, crashes: &Crashes, hold_and_release: bool, doubled: bool) {
    // An operator holds the batch's fourth job at the first pass and releases it at the third,
    // each command's calls in that pass (a command that failed is run again at the next pass).
    let held = Target::Job(w.batch.job(4));
    let (mut hold_done, mut release_done) = (!hold_and_release, !hold_and_release);
    for pass in 0..100 {
        // A dead invocation's messages are visible again by the next pass.
        w.events.expire_visibility();
        let faults = crashes.invocation();
        let now = chrono::Utc::now();
        let tapped = ingest_ctx(w, Some(faults.clone()));
        if doubled && crashes.reached() > 0 {
            // An operator does not double: the commands run once, without faults.
            let clean = ingest_ctx(w, None);
            if !hold_done {
                hold_done = operator::hold(&clean, &held, "check it", "ops", now)
                    .await
                    .is_ok();
            } else if pass >= 2 && !release_done {
                release_done = operator::release(&clean, &held, now).await.is_ok();
            }
            let moved = doubled_pass(w, now).await;
            let finished = finish_jobs(w).await;
            if !moved && finished == 0 && release_done && !time_passes(w).await {
                return;
            }
            continue;
        }
        if !hold_done {
            hold_done = operator::hold(&tapped, &held, "check it", "ops", now)
                .await
                .is_ok();
        } else if pass >= 2 && !release_done {
            release_done = operator::release(&tapped, &held, now).await.is_ok();
        }
        let result = ingest::tick(&tapped, now).await;
        let delivered = if faults.crashed() {
            false
        } else {
            deliver_events(w, &faults).await
        };
        if !crashes.ended(&faults) {
            continue;
        }
        let s = result.unwrap_or_else(|e| panic!("a clean pass failed: {e}"));
        let finished = finish_jobs(w).await;
        if s == TickSummary::default()
            && finished == 0
            && !delivered
            && release_done
            && !time_passes(w).await
        {
            return;
        }
    }
    panic!("the ingest queue did not settle");
}

/// Time passes for a quiet world: ListJobs catches up and the claims' leases run out together,
/// as fifteen minutes would do both (catching up apart from the leases would hide a takeover
/// within the lease), mint claims run out, and an operator resolves unknown mints. Whether
/// anything was left to move.
async fn time_passes(w: &World) -> bool {
    let listed = w.jobs.catch_up_listing();
    let aged = let_claim_leases_run_out(w).await;
    listed
        || aged
        || let_mint_claims_run_out(w).await
        || resolve_unknown_mints(w).await
        || update_report_after_resolving(w).await
}

/// One pass of a doubled recovery: two dispatcher ticks at once (an operator's `granary ingest
/// tick` beside the schedule's), then each visible event delivered to two monitors at once (SQS
/// delivers at least once), calls interleaved one by one. A run that fails (a conditional write
/// lost to its twin) is not fatal: the schedule fires again, the message comes back. Whether
/// anything moved or failed.
async fn doubled_pass(w: &World, now: chrono::DateTime<chrono::Utc>) -> bool {
    let interleaved = |ctx: Ctx| ctx.tapped(Arc::new(Interleave) as Arc<dyn Tap>);
    let tick = || async { ingest::tick(&interleaved(ingest_ctx(w, None)), now).await };
    let (a, b) = tokio::join!(tick(), tick());
    let mut moved = [a, b]
        .iter()
        .any(|r| r.as_ref().map_or(true, |s| *s != TickSummary::default()));
    let clean = Crashes::new(&[]).invocation();
    for m in w.events.receive(10, 60, 0).await.unwrap() {
        let handle = || async {
            monitor::handle_message(&interleaved(monitor_ctx(w, &clean)), &m.body).await
        };
        let (a, b) = tokio::join!(handle(), handle());
        if a.is_ok() || b.is_ok() {
            w.events.delete(&m.receipt_handle).await.unwrap();
        }
        moved = true;
    }
    moved
}

/// Time passes for a quiet world with a job waiting on a mint claimed by a pass that died (a
/// crash between the claim and the identifier's write): its claim is made as old as the lease,
/// so the next pass knows no pass can still be minting and fails the job "minting outcome
/// unknown". Whether any was.
async fn let_mint_claims_run_out(w: &World) -> bool {
    let lease = std::time::Duration::from_secs(granary::config::DEFAULT_CLAIM_LEASE_SECS);
    let prefix = format!("{}jobs/", IngestSettings::default().prefix);
    leases::age_leases(
        w.store.as_ref(),
        &prefix,
        "mint_claimed_at",
        lease,
        |v, _| v["identifier"].is_null() && v["state"] == "storing",
    )
    .await
}

/// An operator meets a job failed "minting outcome unknown" (a crash between its mint claim and
/// the identifier's write) and says what the identifier service holds for it — the identifier
/// minted for the job, found by its `granary.job` metadata, or none — then asks the batch for
/// an update report if it had reported. Whether any was.
async fn resolve_unknown_mints(w: &World) -> bool {
    let ingest_ctx = ingest_ctx(w, None);
    let now = chrono::Utc::now();
    let mut resolved = false;
    for n in 1..=4 {
        let jid = w.batch.job(n);
        let Some(job) = ingest_ctx.ingest().job(&jid).await.unwrap() else {
            continue;
        };
        let job = job.value;
        if job.state != JobState::Failed
            || !job
                .reason
                .starts_with(granary::domain::ingest::deposit::MINT_UNKNOWN)
        {
            continue;
        }
        let fix = match w.minter.minted_for(jid.as_str()).first() {
            Some(id) => MintFix::Identifier(id.clone()),
            None => MintFix::MintAgain,
        };
        let r = operator::resume_with_mint(&ingest_ctx, &jid, &fix, now)
            .await
            .unwrap();
        assert!(r.outcome.is_ok(), "{r:?}");
        resolved = true;
    }
    resolved
}

/// A batch that reported while a job's mint was unresolved: once the resumed job has ended, the
/// operator asks for its update report (as after any resume). Whether it was asked.
async fn update_report_after_resolving(w: &World) -> bool {
    let ingest_ctx = ingest_ctx(w, None);
    let batch = ingest_ctx
        .ingest()
        .batch(&w.batch)
        .await
        .unwrap()
        .unwrap()
        .value;
    let report = operator::reports(&ingest_ctx, &w.batch).await.unwrap();
    let latest = report.last();
    let stale = latest.is_some_and(|r| r.completed.len() < 2) && batch.state == BatchState::Failed;
    if stale {
        operator::update_report(&ingest_ctx, &w.batch, chrono::Utc::now())
            .await
            .unwrap();
    }
    stale
}

/// Time passes for a quiet world with a processing claim still in its lease (its SubmitJob
/// answer was lost, or its owner died): every such claim is made as old as the real lease
/// (`GRANARY_CLAIM_LEASE_SECS`'s default), as fifteen minutes would make it, so the next tick takes it
/// over and looks the job up by name. Whether any was.
async fn let_claim_leases_run_out(w: &World) -> bool {
    let lease = std::time::Duration::from_secs(granary::config::DEFAULT_CLAIM_LEASE_SECS);
    let prefix = format!("{}claims/", IngestSettings::default().prefix);
    leases::age_leases(w.store.as_ref(), &prefix, "claimed_at", lease, |v, _| {
        v["job_id"].is_null()
    })
    .await
}

async fn audit(w: &World) -> Result<(), String> {
    let ingest_ctx = ingest_ctx(w, None);
    let batch = ingest_ctx
        .ingest()
        .batch(&w.batch)
        .await
        .unwrap()
        .unwrap()
        .value;
    // A second report only where an operator resolved a mint after the first.
    let resolved = resolved_mints(w).await;
    let reports_wanted = if resolved > 0 { 1..=2 } else { 1..=1 };
    if batch.state != BatchState::Failed || !reports_wanted.contains(&batch.reports) {
        return Err(format!(
            "batch {} with {} reports ({resolved} mints resolved by an operator)",
            batch.state, batch.reports
        ));
    }
    let reports = operator::reports(&ingest_ctx, &w.batch).await.unwrap();
    let Some(r) = reports.last() else {
        return Err("no report".into());
    };
    if r.completed != vec![w.batch.job(1), w.batch.job(3)] || r.failed.len() != 2 {
        return Err(format!("report {r:?}"));
    }
    let mut names = BTreeSet::new();
    for request in w.jobs.submitted() {
        if !names.insert(request.job_name.clone()) {
            return Err(format!("{} submitted twice", request.job_name));
        }
    }
    // o1 once, o3 twice (Spot), o4 once: o2 never got past downloading.
    if names.len() != 4 {
        return Err(format!("processing jobs {names:?}"));
    }
    // o4's failure is dead-lettered (at least once: a crash between the send and the record
    // sends it again); nothing else is.
    let letters = dead_lettered(w);
    if letters != BTreeSet::from([w.batch.job(4).to_string()]) {
        return Err(format!("dead-lettered {letters:?}"));
    }
    // Announced at least once each (a crash between an announcement and its record's move
    // announces again): the batch's queueing with its four jobs, two completed jobs, the report.
    let events = w.bus.events();
    let of = |kind: &str| events.iter().filter(|e| e.detail_type == kind).count();
    let queued_with_four = events
        .iter()
        .any(|e| e.detail_type == "Ingest Batch Queued" && e.detail["jobs"] == 4);
    if !queued_with_four || of("Ingest Job Completed") < 2 || of("Ingest Batch Reported") < 1 {
        return Err(format!(
            "announcements: queued {} (four jobs: {queued_with_four}), completed {}, reported {}",
            of("Ingest Batch Queued"),
            of("Ingest Job Completed"),
            of("Ingest Batch Reported")
        ));
    }
    for n in 1..=4 {
        let jid = w.batch.job(n);
        let job = ingest_ctx.ingest().job(&jid).await.unwrap().unwrap().value;
        let want = if n == 2 || n == 4 {
            JobState::Failed
        } else {
            JobState::Completed
        };
        if job.state != want {
            return Err(format!("{jid} is {}", job.state));
        }
        // Exactly one job-queue marker and one batch marker, both as the record says.
        let (markers, groups) = indexed(&ingest_ctx, &w.batch, &jid).await;
        if markers != vec![(job.state, job.priority)] {
            return Err(format!("{jid} ({}) is listed as {markers:?}", job.state));
        }
        if groups != vec![BatchGroup::of(job.state).unwrap()] {
            return Err(format!("{jid} is in batch groups {groups:?}"));
        }
        // Minted once — never twice, whatever crashed — and stored under what was minted;
        // objects that never reached storing minted nothing.
        let minted = w.minter.minted_for(jid.as_str());
        if want == JobState::Completed {
            if minted.len() != 1 || job.identifier.as_ref() != minted.first() {
                return Err(format!(
                    "{jid} minted {minted:?} and holds {:?}",
                    job.identifier
                ));
            }
            let manifest = job.storage_manifest.clone().unwrap_or_default();
            let stored = w.store.get(&manifest).await.unwrap();
            let listed = stored.map(|o| {
                granary::domain::ingest::deposit::parse_storage_manifest(&String::from_utf8_lossy(
                    &o.body,
                ))
            });
            match listed {
                Some(Ok(m))
                    if Some(&m.object) == minted.first()
                        && m.job == jid.as_str()
                        && m.files.len() == 3 =>
                {
                    // The object as stored: every file its manifest lists is there, at its
                    // size (its working copies under ingest/objects/ go as it completes).
                    for f in &m.files {
                        let found = w.store.get(&f.key).await.unwrap();
                        if found.map(|o| o.body.len() as u64) != Some(f.size) {
                            return Err(format!("{jid}: stored {} is missing or cut", f.key));
                        }
                    }
                }
                other => return Err(format!("{jid}'s storage manifest {manifest}: {other:?}")),
            }
        } else if !minted.is_empty() {
            return Err(format!("{jid} ({}) minted {minted:?}", job.state));
        }
    }
    Ok(())
}

/// Jobs whose history shows an operator's resolution of an unknown mint.
async fn resolved_mints(w: &World) -> usize {
    let ingest_ctx = ingest_ctx(w, None);
    let mut n = 0;
    for k in 1..=4 {
        let job = ingest_ctx.ingest().job(&w.batch.job(k)).await.unwrap();
        n += usize::from(
            job.is_some_and(|j| j.value.retry_count > 0 && j.value.identifier.is_some()),
        );
    }
    n
}

#[tokio::test]
async fn the_ingest_queue_recovers_from_a_crash_at_every_call() {
    let clean = world().await;
    let calls = run(&clean, None).await.calls();
    audit(&clean)
        .await
        .unwrap_or_else(|e| panic!("without a crash: {e}"));
    assert!(calls > 50, "{calls} calls");
    eprintln!("{calls} external calls in a clean run");
    crashes::at_every_call("ingest queue", calls, |point| async move {
        let w = world().await;
        let crashed = run(&w, Some(point)).await;
        CrashRun {
            reached: crashed.reached() == 1,
            audit: audit(&w).await,
        }
    })
    .await;
}

/// A crash inside the recovery: the passes die at a first call and then again at a later one,
/// 1, 2, 3, 5, 8, … calls after it, so the tick and the deliveries that take the dead one's work
/// over die too. First crashes spread the same way over the clean run's calls.
#[tokio::test]
async fn the_ingest_queue_recovers_from_a_crash_inside_its_recovery() {
    let clean = world().await;
    let calls = run(&clean, None).await.calls();
    let runs = crashes::inside_the_recovery("ingest queue", calls, 100, |planned| async move {
        let w = world().await;
        let crashes = Crashes::new(&planned);
        passes(&w, &crashes, true, false).await;
        CrashRun {
            reached: crashes.reached() == 2,
            audit: audit(&w).await,
        }
    })
    .await;
    eprintln!("{runs} runs with a second crash inside the recovery");
}

/// The recovery doubled: the passes die at each call of a clean run in turn, and every pass
/// after the crash runs two dispatcher ticks at once and delivers each event to two monitors at
/// once. The same audit: each job ends where it should, indexes agree with records, no
/// processing attempt submitted twice, each object minted once, one report.
#[tokio::test]
async fn the_ingest_queue_recovers_from_a_crash_at_every_call_with_its_recovery_doubled() {
    let clean = world().await;
    let calls = run(&clean, None).await.calls();
    crashes::at_every_call(
        "ingest queue, recovery doubled",
        calls,
        |point| async move {
            let w = world().await;
            let crashes = Crashes::new(&[point]);
            passes(&w, &crashes, true, true).await;
            CrashRun {
                reached: crashes.reached() == 1,
                audit: audit(&w).await,
            }
        },
    )
    .await;
}

/// The ingest-submit Lambda dies at each of its calls; SQS delivers the submission again; the
/// batch then runs as without the crash: one batch, every job where it should end.
#[tokio::test]
async fn a_submission_survives_a_crash_at_every_call_of_ingest_submit() {
    let calls = submitted(world_unsubmitted().await, None).await.1.calls();
    crashes::at_every_call("ingest submit", calls, |point| async move {
        let (w, crashed) = submitted(world_unsubmitted().await, Some(point)).await;
        run(&w, None).await;
        CrashRun {
            reached: crashed.reached() == 1,
            audit: audit(&w).await,
        }
    })
    .await;
}

/// The ingest jobs the failure DLQ holds a notice for.
fn dead_lettered(w: &World) -> BTreeSet<String> {
    w.dlq
        .messages()
        .iter()
        .map(|m| {
            serde_json::from_str::<granary::contracts::ingest::IngestNotice>(&m.body)
                .map(|n| n.ingest_job.to_string())
                .unwrap_or_else(|e| format!("unreadable: {e}"))
        })
        .collect()
}

/// Where both indexes list a job: its job-queue markers (state, priority) and its batch groups.
async fn indexed(
    ingest_ctx: &Ctx,
    batch: &BatchId,
    jid: &granary::domain::ingest::index::JobId,
) -> (Vec<(JobState, u8)>, Vec<BatchGroup>) {
    let mut markers = Vec::new();
    for state in JobState::ALL {
        for (p, id) in ingest_ctx.ingest().listed(state).await.unwrap() {
            if id == *jid {
                markers.push((state, p));
            }
        }
    }
    let mut groups = Vec::new();
    for g in BatchGroup::ALL {
        if ingest_ctx
            .ingest()
            .batch_jobs(batch, g)
            .await
            .unwrap()
            .contains(jid)
        {
            groups.push(g);
        }
    }
    (markers, groups)
}

/// What a world ended as, read through the records and indexes: the batch's state and reports,
/// each job's state, retry count, markers, batch groups and whether its stored files are all
/// there (or, deleted, all gone), and the jobs dead-lettered. A crashed run must end as the
/// clean one did; besides, no processing job may be submitted twice.
async fn ended(w: &World) -> Result<Vec<String>, String> {
    let ingest_ctx = ingest_ctx(w, None);
    let mut names = BTreeSet::new();
    for request in w.jobs.submitted() {
        if !names.insert(request.job_name.clone()) {
            return Err(format!("{} submitted twice", request.job_name));
        }
    }
    let batch = ingest_ctx
        .ingest()
        .batch(&w.batch)
        .await
        .unwrap()
        .unwrap()
        .value;
    let mut out = vec![
        format!("batch {} with {} reports", batch.state, batch.reports),
        format!("processing jobs {names:?}"),
    ];
    for n in 1..=4 {
        let jid = w.batch.job(n);
        let Some(job) = ingest_ctx.ingest().job(&jid).await.unwrap() else {
            out.push(format!("{jid}: no record"));
            continue;
        };
        let job = job.value;
        let (markers, groups) = indexed(&ingest_ctx, &w.batch, &jid).await;
        let mut present = 0;
        for f in &job.stored {
            present += usize::from(w.store.get(&f.key).await.unwrap().is_some());
        }
        out.push(format!(
            "{jid}: {} (retries {}), markers {markers:?}, groups {groups:?}, {present} of {} files stored",
            job.state,
            job.retry_count,
            job.stored.len()
        ));
    }
    let letters = dead_lettered(w);
    out.push(format!("dead-lettered {letters:?}"));
    Ok(out)
}

/// The operator's work once the batch has reported: job 4 (failed in processing) resumed, its
/// processing running again and failing again; an update report; job 2 (failed at its download)
/// deleted. Each command's calls pass through one crash point counted across the three; a
/// command that died, or whose answer says it could not be done, is run again without faults,
/// as an operator runs a command again; the platform settles after each. Returns the commands'
/// calls and whether the crash point was reached.
async fn operate(w: &World, crash: Option<CrashPoint>) -> Crashes {
    let crashes = Crashes::new(crash.as_slice());
    for command in 0..3 {
        let faults = crashes.invocation();
        let now = chrono::Utc::now();
        let done = do_command(w, command, &ingest_ctx(w, Some(faults.clone())), now).await;
        if !crashes.ended(&faults) || !done {
            // Run again: it may now say the job or batch has moved on, which is the operator's
            // answer; the end state is what the audit compares.
            do_command(w, command, &ingest_ctx(w, None), now).await;
        }
        settle(w).await;
    }
    crashes
}

/// One operator command; whether it did what it was asked.
async fn do_command(
    w: &World,
    command: u32,
    ingest_ctx: &Ctx,
    now: chrono::DateTime<chrono::Utc>,
) -> bool {
    match command {
        0 => operator::resume(ingest_ctx, &[w.batch.job(4)], now)
            .await
            .is_ok_and(|r| r[0].outcome.is_ok()),
        1 => operator::update_report(ingest_ctx, &w.batch, now)
            .await
            .is_ok(),
        _ => operator::delete_job(ingest_ctx, &w.batch.job(2), false, now)
            .await
            .is_ok(),
    }
}

/// The ingest operator commands (resume, update-report, delete) die at each of their calls and
/// are run again; the batch must end exactly as it does when nothing dies.
#[tokio::test]
async fn the_ingest_operator_commands_recover_from_a_crash_at_every_call() {
    let clean = world().await;
    run(&clean, None).await;
    let calls = operate(&clean, None).await.calls();
    let want = ended(&clean)
        .await
        .unwrap_or_else(|e| panic!("without a crash: {e}"));
    assert!(
        want.iter().any(|l| l.contains(": deleted")) && want[0].contains("2 reports"),
        "the commands did their work: {want:#?}"
    );
    assert!(calls > 10, "{calls} calls");
    let want = &want;
    crashes::at_every_call("ingest operator commands", calls, |point| async move {
        let w = world().await;
        run(&w, None).await;
        let crashed = operate(&w, Some(point)).await;
        let audit = match ended(&w).await {
            Ok(got) if got == *want => Ok(()),
            Ok(got) => Err(format!(
                "{:?}",
                got.iter()
                    .zip(want)
                    .filter(|(g, w)| g != w)
                    .collect::<Vec<_>>()
            )),
            Err(e) => Err(e),
        };
        CrashRun {
            reached: crashed.reached() == 1,
            audit,
        }
    })
    .await;
}
