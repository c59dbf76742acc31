//! The recovery sweeper (scheduled): items stuck in DOWNLOADING or PROCESSING past their timeout
//! go to the failed state while attempts remain (and back on their path at once), or give up
//! (IGNORE, ABANDONED) when none remain. Before touching a PROCESSING item it asks Batch about the
//! job: alive, it waits; finished, the job goes through the monitor's own handler (its end was
//! never handled: same classification, log and route as its event). It looks only at the
//! in-flight index, never at every item, and takes items one by one: one item's trouble is logged,
//! counted and retried next sweep, never the end of the sweep. A backfill window's granules have
//! no marker of their own during their first attempt: the window's open marker stands for them,
//! and the sweeper reads the window's claim for their ids (the marker stays the reconciler's).
//!
//! Order of effects, so a crash between two of them strands nothing: the message that moves the
//! item on is sent before the state is written. If the write is lost, the item is still overdue in
//! the index and the next sweep does it again (the receivers tolerate the duplicate: the requeuer
//! claims each attempt once, the import step re-checks the state, a DLQ notice may repeat).

use super::{Ctx, Step};
use crate::budget::Budget;
use crate::contracts::messages::{ItemNotice, Notice, Outcome};
use crate::domain::granule::GranuleId;
use crate::domain::layout::claims::{parse_window_key, window_key};
use crate::domain::lifecycle::decisions;
use crate::domain::lifecycle::ItemState::{self, *};
use crate::domain::window::WindowClaim;
use crate::handlers::HandlerError;
use crate::repositories::read_json;
use crate::repositories::RecordError;
use chrono::{DateTime, Utc};
use serde::Serialize;

const BY: &str = "item-sweeper";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SweepSummary {
    pub examined: u64,
    /// Of those, PROCESSING items named by an open window marker rather than a marker of their
    /// own (a window's first attempts).
    pub window_granules: u64,
    pub within_time: u64,
    /// PROCESSING items past their time whose Batch job is still queued or running.
    pub job_alive: u64,
    /// PROCESSING items whose job Batch reports finished (its event never reached the monitor):
    /// handed to the monitor's handler.
    pub finished_by_batch: u64,
    pub retried: u64,
    pub gave_up: u64,
    /// Index entries for items no longer in that state, removed.
    pub stale_markers: u64,
    /// Item records that are not valid JSON: recorded under the reject prefix, dead-lettered.
    pub corrupt_records: u64,
    /// Items that could not be handled this time (an S3, SQS or Batch error); next sweep retries.
    pub errors: u64,
    /// Items this sweep had no time left for: the next sweep, which starts elsewhere, does them.
    pub out_of_time: u64,
}

/// The item sweeper's scheduled invocation: the reconciler, then the sweeper, each within its
/// share of the invocation's time, so that a long reconciler pass never leaves the sweeper no
/// time at all. The reconciler gets half; the sweeper what is left.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ScheduledPass {
    pub reconcile: crate::handlers::reconciler::ReconcileSummary,
    pub sweep: SweepSummary,
}

pub async fn scheduled_pass(
    imp: &Ctx,
    now: DateTime<Utc>,
    budget: &Budget,
) -> Result<ScheduledPass, HandlerError> {
    let reconcile = crate::handlers::reconciler::reconcile_within(imp, now, &budget.part(1, 2))
        .await
        .map_err(|e| HandlerError::during("reconciler", e))?;
    let sweep = sweep_within(imp, now, budget)
        .await
        .map_err(|e| HandlerError::during("sweeper", e))?;
    Ok(ScheduledPass { reconcile, sweep })
}

/// One sweep with no time limit (an operator's command, a test).
pub async fn sweep(imp: &Ctx, now: DateTime<Utc>) -> Result<SweepSummary, HandlerError> {
    sweep_within(imp, now, &Budget::unlimited()).await
}

/// One sweep within `budget`: it starts at a different item each time and stops starting new
/// ones once the time is spent (`out_of_time`).
pub async fn sweep_within(
    imp: &Ctx,
    now: DateTime<Utc>,
    budget: &Budget,
) -> Result<SweepSummary, HandlerError> {
    let mut summary = SweepSummary::default();
    let mut marked_items = imp.items().inflight().await?;
    let total = marked_items.len();
    marked_items.rotate_left(crate::budget::first_of(total));
    for (looked, (marked, id)) in marked_items.into_iter().enumerate() {
        if budget.spent() {
            summary.out_of_time += (total - looked) as u64;
            break;
        }
        summary.examined += 1;
        if let Err(e) = sweep_one(imp, marked, &id, Index::Marker, now, &mut summary).await {
            tracing::warn!(item_id = %id, error = %e, "cannot sweep this item now; the next sweep tries again");
            summary.errors += 1;
        }
    }
    // A window's granules have no marker of their own while their first attempt runs: the
    // window's open marker stands for them all.
    let granules = if budget.spent() {
        Vec::new()
    } else {
        window_granules(imp, &mut summary).await?
    };
    let total = granules.len();
    for (looked, id) in granules.into_iter().enumerate() {
        if budget.spent() {
            summary.out_of_time += (total - looked) as u64;
            break;
        }
        summary.examined += 1;
        if let Err(e) = sweep_one(imp, Processing, &id, Index::Window, now, &mut summary).await {
            tracing::warn!(item_id = %id, error = %e, "cannot sweep this item now; the next sweep tries again");
            summary.errors += 1;
        }
    }
    tracing::info!(?summary, "sweep finished");
    Ok(summary)
}

/// Which index named the item to the sweeper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Index {
    /// Its own in-flight marker, which the sweeper removes once the record no longer justifies it.
    Marker,
    /// An open window marker (the reconciler's to remove): only a record still in the state its
    /// window's creation left it in is the sweeper's business.
    Window,
}

/// The granules of every open window, from their claims.
async fn window_granules(
    imp: &Ctx,
    summary: &mut SweepSummary,
) -> Result<Vec<GranuleId>, HandlerError> {
    let layout = &imp.config.layout;
    if !layout.track_items {
        return Ok(Vec::new());
    }
    let prefix = &layout.open_claim_prefix;
    let mut out = Vec::new();
    for meta in imp.store.list(prefix).await.map_err(RecordError::from)? {
        let Some((inventory, start)) = parse_window_key(prefix, &meta.key) else {
            continue;
        };
        let claim = window_key(&layout.claim_prefix, &inventory, start);
        match read_json::<WindowClaim>(imp.store.as_ref(), &claim).await {
            Ok(Some(claim)) => out.extend(claim.value.granules),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(inventory, start, error = %e, "cannot read this window's claim; the next sweep tries again");
                summary.errors += 1;
            }
        }
    }
    Ok(out)
}

async fn sweep_one(
    imp: &Ctx,
    marked: ItemState,
    id: &GranuleId,
    index: Index,
    now: DateTime<Utc>,
    summary: &mut SweepSummary,
) -> Result<(), HandlerError> {
    let items = imp.items();
    let policy = imp.config.retry_policy;
    let current = match items.get(id).await {
        Ok(c) => c,
        Err(RecordError::Repository(crate::repositories::RepositoryError::Corrupt {
            key,
            source,
        })) => {
            imp.reject_corrupt_record(&key, &source.to_string(), "item sweeper")
                .await
                .map_err(HandlerError::from)?;
            items.clear_inflight(marked, id).await?;
            summary.corrupt_records += 1;
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    if index == Index::Window {
        // Not created by the window (yet), or past the state it left it in: nothing to sweep.
        if !current
            .as_ref()
            .is_some_and(|c| c.value.state == marked && c.value.in_batch_state())
        {
            return Ok(());
        }
        summary.window_granules += 1;
    }
    let Some(current) = current else {
        items.clear_inflight(marked, id).await?;
        summary.stale_markers += 1;
        return Ok(());
    };
    let record = current.value;
    if record.state != marked {
        items.clear_inflight(marked, id).await?;
        summary.stale_markers += 1;
        return Ok(());
    }
    let Some(path) = policy.timeout_recovery(record.state, &record.attempts, now) else {
        summary.within_time += 1;
        return Ok(());
    };
    if record.state == Processing {
        if let Some(job_id) = &record.job_id {
            match job_end(imp, job_id).await? {
                JobSeen::Alive => {
                    tracing::info!(item_id = %id, job_id, "past its time but the job is alive");
                    summary.job_alive += 1;
                    return Ok(());
                }
                JobSeen::Finished => {
                    summary.finished_by_batch += 1;
                    return Ok(());
                }
                JobSeen::Unknown => {}
            }
        }
    }
    let (state, seq) = (record.state, record.seq);
    let timeout = if state == Downloading {
        policy.download_timeout
    } else {
        policy.processing_timeout
    };
    let gives_up = path.last().is_some_and(|s| s.is_terminal());
    // The message first (see the module's note on order), then the state.
    match (state, gives_up) {
        (_, true) => {
            let terminal = path.last().copied().unwrap_or(Abandoned);
            dead_letter(imp, id, terminal, timeout).await?;
        }
        (Downloading, false) => imp.enqueue(id, Some(Step::Download)).await?,
        (_, false) => {
            // The requeuer submits the next attempt; it moves the item PROCESSING (n) →
            // PROCESSING_FAILED → READY → PROCESSING (n + 1) itself if this write is lost.
            imp.send_retry(
                id,
                record.attempts.processing,
                Outcome::TimedOut,
                "processing timed out (timeout recovery)",
            )
            .await?
        }
    }
    if crate::mutants::on("sweeper-timeout-path-in-steps") {
        let mut expected = (state, seq);
        for to in &path {
            let (from, at) = expected;
            let moved = items
                .advance_steps(id, BY, |r| {
                    decisions::on_timeout(r, from, at, &[*to], timeout.num_seconds())
                })
                .await?;
            match moved.record() {
                Some(r) if r.state == *to => expected = (r.state, r.seq),
                _ => break,
            }
        }
    } else {
        items
            .advance_steps(id, BY, |r| {
                decisions::on_timeout(r, state, seq, &path, timeout.num_seconds())
            })
            .await?;
    }
    if gives_up {
        summary.gave_up += 1;
    } else {
        summary.retried += 1;
    }
    Ok(())
}

enum JobSeen {
    Alive,
    Finished,
    /// Batch does not know the job (never created, or forgotten): the attempt timed out.
    Unknown,
}

/// What Batch says about a PROCESSING item's job; a finished job is handled as its event would
/// have been (the monitor's handler logs it, routes it and moves the item).
async fn job_end(imp: &Ctx, job_id: &str) -> Result<JobSeen, HandlerError> {
    let Some(description) = imp
        .jobs
        .describe(job_id)
        .await
        .map_err(|e| HandlerError::during(format!("DescribeJobs {job_id}"), e))?
    else {
        return Ok(JobSeen::Unknown);
    };
    let handled =
        crate::handlers::monitor::described_job(imp, description, "item sweeper (DescribeJobs)")
            .await
            .map_err(|e| HandlerError::during(format!("handling job {job_id}'s end"), e))?;
    Ok(match handled {
        None => JobSeen::Alive,
        // Recorded and dead-lettered as unreadable; the attempt itself is treated as timed out.
        Some(crate::handlers::monitor::MonitorOutcome::Rejected { .. }) => JobSeen::Unknown,
        Some(_) => JobSeen::Finished,
    })
}

/// Gave-up items are reported on the failure DLQ like any other failure an operator must see; the
/// item record (state, history with the reason) is the durable record.
async fn dead_letter(
    imp: &Ctx,
    id: &GranuleId,
    state: ItemState,
    timeout: chrono::Duration,
) -> Result<(), HandlerError> {
    let reason = format!(
        "timed out after {}s; attempts exhausted ({state})",
        timeout.num_seconds()
    );
    let notice = ItemNotice {
        item_id: id.clone(),
        state,
    };
    imp.failure_dlq
        .send(notice.to_message(&Notice::new(Outcome::TimedOut, reason))?)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::memory::{MemoryJobRunner, MemoryQueue, MemoryStore};
    use crate::config::Config;
    use crate::domain::batch_event::JobStatus;
    use crate::domain::claim::JobsClaim;
    use crate::domain::granule::{GranuleId, GranuleProcessingEvent};
    use crate::domain::item::NewItem;
    use crate::handlers::Ctx;
    use crate::ports::{JobRunner, Queue};
    use std::sync::Arc;

    async fn importer(jobs: Arc<MemoryJobRunner>) -> (Ctx, Arc<MemoryQueue>) {
        let config = Config::for_unit_tests(&[
            ("GRANARY_PROCESSING_TIMEOUT_SECS", "60"),
            ("GRANARY_MAX_RETRIES", "0"),
        ]);
        let store = Arc::new(MemoryStore::new());
        let dlq = Arc::new(MemoryQueue::new("dlq"));
        let imp = Ctx {
            store: store.clone(),
            jobs,
            retry_queue: Arc::new(MemoryQueue::new("retry")),
            failure_dlq: dlq.clone(),
            import_queue: Some(Arc::new(MemoryQueue::new("import"))),
            ..Ctx::in_memory(config)
        };
        (imp, dlq)
    }

    async fn processing(imp: &Ctx, id: &str, job_id: &str) -> GranuleId {
        let id = GranuleId::parse(id).unwrap();
        imp.items()
            .create(NewItem::ready(id.clone(), "t", None), "t")
            .await
            .unwrap();
        let event = GranuleProcessingEvent {
            granule_id: id.clone(),
            attempt: 1,
        };
        crate::handlers::item_sync::submitted(imp, &event, job_id, None, "t")
            .await
            .unwrap();
        id
    }

    async fn state(imp: &Ctx, id: &GranuleId) -> ItemState {
        imp.items().get(id).await.unwrap().unwrap().value.state
    }

    #[tokio::test]
    async fn asks_batch_before_failing_a_processing_item() {
        let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
        let (imp, dlq) = importer(jobs.clone()).await;
        let request = |item: &str| {
            let id = GranuleId::parse(item).unwrap();
            crate::contracts::job::job_request(&format!("{item}-1"), &id, 1)
        };
        let alive = jobs.submit(request("alive-item")).await.unwrap().job_id;
        let done = jobs.submit(request("done-item")).await.unwrap().job_id;
        jobs.set_status(&done, JobStatus::Succeeded);
        let a = processing(&imp, "alive-item", &alive).await;
        let d = processing(&imp, "done-item", &done).await;
        let lost = processing(&imp, "lost-item", "no-such-job").await;
        let late = Utc::now() + chrono::Duration::seconds(61);
        let s = sweep(&imp, late).await.unwrap();
        assert_eq!(
            (s.examined, s.job_alive, s.finished_by_batch, s.gave_up),
            (3, 1, 1, 1),
            "{s:?}"
        );
        assert_eq!(state(&imp, &a).await, Processing);
        // The finished job went through the monitor's handler: logged, and the item PROCESSED.
        assert_eq!(state(&imp, &d).await, Processed);
        let logs = imp.store.list(&imp.config.layout.log_prefix).await.unwrap();
        assert_eq!(logs.len(), 1, "{logs:?}");
        // one attempt allowed (GRANARY_MAX_RETRIES=0): the lost job's item gives up
        assert_eq!(state(&imp, &lost).await, Abandoned);
        assert_eq!(dlq.depth().await.unwrap().visible, 1);
        // only the live job's item is still indexed
        let left = imp.items().inflight().await.unwrap();
        assert_eq!(left, vec![(Processing, a)]);
    }

    #[tokio::test]
    async fn a_windows_granules_are_swept_through_its_open_marker_and_close_it() {
        let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
        let (imp, dlq) = importer(jobs.clone()).await;
        let ctx = &imp;
        let ids: Vec<GranuleId> = ["alive-item", "lost-item"]
            .iter()
            .map(|g| GranuleId::parse(g).unwrap())
            .collect();
        let alive = jobs
            .submit(crate::contracts::job::job_request(
                "alive-item-1",
                &ids[0],
                1,
            ))
            .await
            .unwrap()
            .job_id;
        // The feeder's window: claimed, jobs recorded, records made together, marker open.
        let found = vec![Some(alive.clone()), Some("forgotten-by-batch".to_owned())];
        let claim = WindowClaim::new("inv.parquet", 0, 2, ids.clone(), "t", Utc::now())
            .recording(&found, Utc::now());
        let layout = &ctx.config.layout;
        for prefix in [&layout.claim_prefix, &layout.open_claim_prefix] {
            crate::repositories::write_json(
                ctx.store.as_ref(),
                &window_key(prefix, "inv.parquet", 0),
                &claim,
                crate::ports::PutCondition::IfAbsent,
            )
            .await
            .unwrap();
        }
        let submitted: Vec<_> = claim
            .attempts()
            .zip(&found)
            .map(|(e, j)| (e, j.clone().unwrap(), "inv.parquet#row=0".to_owned()))
            .collect();
        let made = crate::handlers::item_sync::window_submitted(ctx, &claim, &submitted, "t")
            .await
            .unwrap();
        assert_eq!(made, vec![true, true]);
        assert!(ctx.items().inflight().await.unwrap().is_empty());

        let late = Utc::now() + chrono::Duration::seconds(61);
        let s = sweep(&imp, late).await.unwrap();
        assert_eq!(
            (s.window_granules, s.job_alive, s.gave_up, s.stale_markers),
            (2, 1, 1, 0),
            "{s:?}"
        );
        assert_eq!(state(&imp, &ids[0]).await, Processing);
        assert_eq!(state(&imp, &ids[1]).await, Abandoned, "Batch lost its job");
        assert_eq!(dlq.depth().await.unwrap().visible, 1);

        // The reconciler keeps the window open while a job runs; once it has ended, the
        // lost one counts as handled (its record moved on) and the marker goes.
        let open = || async {
            ctx.store
                .list(&layout.open_claim_prefix)
                .await
                .unwrap()
                .len()
        };
        let later = late + chrono::Duration::days(1);
        let r = crate::handlers::reconciler::reconcile(ctx, later)
            .await
            .unwrap();
        assert_eq!((r.handled, r.still_running, r.closed), (1, 1, 0), "{r:?}");
        assert_eq!(open().await, 1);
        jobs.set_status(&alive, JobStatus::Succeeded);
        // The marker remembers the handled one: this pass looks only at the other.
        let r = crate::handlers::reconciler::reconcile(ctx, later)
            .await
            .unwrap();
        assert_eq!((r.recovered, r.handled, r.closed), (1, 0, 1), "{r:?}");
        assert_eq!(open().await, 0);
        assert_eq!(state(&imp, &ids[0]).await, Processed);
        // Nothing of the window is left for the sweeper.
        let s = sweep(&imp, late).await.unwrap();
        assert_eq!(s.examined, 0, "{s:?}");
    }

    /// A scheduled pass with no time left touches nothing and says how much it left; the same
    /// items are swept by the next pass that has time.
    #[tokio::test]
    async fn a_pass_whose_time_is_spent_leaves_the_rest_for_the_next() {
        let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
        let (imp, _) = importer(jobs.clone()).await;
        let attempt = crate::domain::granule::GranuleProcessingEvent {
            granule_id: GranuleId::parse("marked-item").unwrap(),
            attempt: 1,
        };
        imp.submit_once(&attempt, "t").await.unwrap();
        let ids: Vec<GranuleId> = ["a-item", "b-item", "c-item"]
            .iter()
            .map(|g| GranuleId::parse(g).unwrap())
            .collect();
        for id in &ids {
            processing(&imp, id.as_str(), "no-such-job").await;
        }
        let late = Utc::now() + chrono::Duration::seconds(61);
        let spent = Budget::within(std::time::Duration::ZERO);
        let pass = scheduled_pass(&imp, late, &spent).await.unwrap();
        assert_eq!(pass.reconcile.out_of_time, 1, "{:?}", pass.reconcile);
        assert_eq!((pass.sweep.examined, pass.sweep.out_of_time), (0, 3));
        for id in &ids {
            assert_eq!(state(&imp, id).await, Processing);
        }
        let pass = scheduled_pass(&imp, late, &Budget::unlimited())
            .await
            .unwrap();
        assert_eq!((pass.reconcile.out_of_time, pass.sweep.out_of_time), (0, 0));
        assert_eq!(pass.reconcile.open_claims, 1, "{:?}", pass.reconcile);
        assert_eq!(pass.sweep.gave_up, 3, "{:?}", pass.sweep);
    }

    #[tokio::test]
    async fn leaves_items_within_their_time_and_clears_stale_markers() {
        let (imp, _) = importer(Arc::new(MemoryJobRunner::default())).await;
        let id = processing(&imp, "fresh", "job-x").await;
        let s = sweep(&imp, Utc::now()).await.unwrap();
        assert_eq!((s.examined, s.within_time), (1, 1));
        // a marker left behind by a crash after the record moved on
        imp.store
            .put(
                "inflight/DOWNLOADING/fresh",
                bytes::Bytes::new(),
                crate::ports::PutCondition::Overwrite,
            )
            .await
            .unwrap();
        let s = sweep(&imp, Utc::now()).await.unwrap();
        assert_eq!(s.stale_markers, 1);
        assert_eq!(
            imp.items().inflight().await.unwrap(),
            vec![(Processing, id)]
        );
    }
}
