//! The item lifecycle against the emulator, one test per scenario of the lifecycle design: the
//! normal workflow, Failure1–Failure8 and the operational scenario, plus re-validation and a race.
//! Files come from a real HTTP server on loopback (`granary_tests::http_source`); processing runs
//! through the requeuer, the emulator's Batch and the job monitor.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{Duration, Utc};
use granary::domain::granule::{GranuleId, GranuleProcessingEvent};
use granary::domain::item::{Change, ItemRecord};
use granary::domain::lifecycle::ItemState::{self, *};
use granary::handlers::importer::{self, discover, download, sweeper, validate, Step};
use granary::handlers::Ctx;
use granary::handlers::{item_sync, monitor, requeuer};
use granary::ports::{ObjectMeta, ObjectStore, PutCondition, StoreError, StoredObject};
use granary::repositories::items::Items;
use granary::repositories::json::Changed;
use granary_tests::http_source::{self, ArchiveServer, Behaviour};
use granary_tests::*;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

struct World {
    s: TestStack,
    importer_ctx: Ctx,
    server: ArchiveServer,
}

/// A stack whose importer reads the loopback archive. Download attempts: 3, timeout 2 s;
/// processing attempts: 2.
async fn world(tag: &str, env: &[(&str, &str)]) -> World {
    let server = http_source::start().await;
    let mut all = vec![
        ("GRANARY_SOURCE_URL", server.index_url.as_str()),
        ("GRANARY_MAX_DOWNLOAD_ATTEMPTS", "3"),
        ("GRANARY_DOWNLOAD_TIMEOUT_SECS", "2"),
        ("GRANARY_MAX_RETRIES", "1"),
        ("GRANARY_PROCESSING_TIMEOUT_SECS", "600"),
    ];
    all.extend_from_slice(env);
    let s = stack(tag, 1, &all).await;
    let importer_ctx = s.ctx.clone();
    World {
        s,
        importer_ctx,
        server,
    }
}

impl World {
    fn items(&self) -> Items {
        self.s.ctx.items()
    }

    /// Runs every import message until the queue is empty; returns how many were handled.
    async fn run_import_queue(&self) -> usize {
        let mut n = 0;
        loop {
            let msgs = drain(&self.s.clients, &self.s.stack.import_queue_url).await;
            if msgs.is_empty() {
                return n;
            }
            for m in msgs {
                n += 1;
                match importer::handle_message(&self.importer_ctx, &m.body).await {
                    Ok(_) | Err(granary::handlers::HandlerError::Waiting { .. }) => {}
                    Err(e) => panic!("import step failed: {e}"),
                }
            }
        }
    }

    /// Runs every retry-queue message through the requeuer.
    async fn run_requeuer(&self) -> usize {
        let msgs = drain(&self.s.clients, &self.s.stack.retry_queue_url).await;
        for m in &msgs {
            requeuer::handle_message(&self.s.ctx, &m.body)
                .await
                .unwrap_or_else(|e| panic!("requeuer: {e}"));
        }
        msgs.len()
    }

    /// Ends the item's current Batch job with `end`, as the monitor would see it.
    async fn end_job(&self, id: &GranuleId, end: AttemptEnd) -> monitor::MonitorOutcome {
        let record = self.record(id).await;
        let job_id = record.job_id.clone().expect("the item has a job");
        let facts = facts(&self.s, &[job_id]).await;
        let status = if matches!(end, AttemptEnd::Success) {
            "SUCCEEDED"
        } else {
            "FAILED"
        };
        let body = state_change_event(&facts[0], &[end], status).to_string();
        monitor::handle_message(&self.s.ctx, &body)
            .await
            .unwrap_or_else(|e| panic!("monitor: {e}"))
    }

    async fn record(&self, id: &GranuleId) -> ItemRecord {
        self.items()
            .get(id)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no record for {id}"))
            .value
    }

    /// File `name` discovered, downloaded, submitted and its job succeeded: PROCESSED.
    async fn processed(&self, name: &str) -> GranuleId {
        self.server.archive.put(name, BODY, vec![Behaviour::Serve]);
        discover::discover(&self.importer_ctx).await.unwrap();
        self.run_import_queue().await;
        let id = self.only_item().await;
        self.run_requeuer().await;
        self.end_job(&id, AttemptEnd::Success).await;
        assert_eq!(self.record(&id).await.state, Processed);
        id
    }

    /// The one item discovery registered.
    async fn only_item(&self) -> GranuleId {
        let all = self.items().find(&Default::default()).await.unwrap();
        assert_eq!(all.len(), 1, "{all:?}");
        all[0].id.clone()
    }

    async fn path(&self, id: &GranuleId) -> Vec<(Option<ItemState>, ItemState)> {
        self.items()
            .history(id)
            .await
            .unwrap()
            .iter()
            .map(|e| (e.from, e.to))
            .collect()
    }
}

/// Turns a chain of states into the history it must leave: creation, then each step.
fn chain(states: &[ItemState]) -> Vec<(Option<ItemState>, ItemState)> {
    let mut out = vec![(None, states[0])];
    out.extend(states.windows(2).map(|w| (Some(w[0]), w[1])));
    out
}

// An HDF5 file's signature first (`domain::file_format`), then anything.
const BODY: &[u8] = b"\x89HDF\r\n\x1a\n pretend granule payload 0123456789";

fn spot() -> AttemptEnd {
    AttemptEnd::SpotInterruption {
        instance: "i-0abc".into(),
    }
}

#[tokio::test]
async fn normal_workflow() {
    let w = world("lcnormal", &[]).await;
    w.server.archive.put(
        "HLS.S30.T01GBH.2022226T214921.v2.0.h5",
        BODY,
        vec![Behaviour::Serve],
    );
    let found = discover::discover(&w.importer_ctx).await.unwrap();
    assert_eq!((found.listed, found.new), (1, 1));
    w.run_import_queue().await;
    let id = w.only_item().await;
    assert_eq!(w.record(&id).await.state, Ready);
    assert_eq!(w.run_requeuer().await, 1, "READY items go to processing");
    assert_eq!(w.record(&id).await.state, Processing);
    w.end_job(&id, AttemptEnd::Success).await;
    let r = w.record(&id).await;
    assert_eq!(r.state, Processed);
    assert!(
        r.workflow_complete && r.terminal,
        "stored: the workflow is complete"
    );
    assert_eq!((r.attempts.download, r.attempts.processing), (1, 1));
    assert_eq!(r.size, Some(BODY.len() as u64));
    assert!(r.checksum.as_deref().unwrap().starts_with("sha256:"));
    assert_eq!(
        w.path(&id).await,
        chain(&[
            Discovered,
            Downloading,
            Downloaded,
            Ready,
            Processing,
            Processed
        ])
    );
    // the raw file is in the bucket, byte for byte
    let stored =
        w.s.ctx
            .store
            .get(r.stored_key.as_deref().unwrap())
            .await
            .unwrap()
            .unwrap();
    assert_eq!(&stored.body[..], BODY);
}

#[tokio::test]
async fn failure1_download_fails_until_the_limit_then_ignore() {
    let w = world("lcfail1", &[]).await;
    w.server.archive.put("a.h5", BODY, vec![Behaviour::Fail]);
    discover::discover(&w.importer_ctx).await.unwrap();
    w.run_import_queue().await;
    let id = w.only_item().await;
    let r = w.record(&id).await;
    assert_eq!((r.state, r.attempts.download), (Ignore, 3));
    assert!(
        r.terminal && !r.workflow_complete,
        "given up: terminal, never complete"
    );
    assert_eq!(w.server.archive.gets("a.h5"), 3);
    assert_eq!(
        w.path(&id).await,
        chain(&[
            Discovered,
            Downloading,
            DownloadingFailed,
            Downloading,
            DownloadingFailed,
            Downloading,
            DownloadingFailed,
            Ignore
        ])
    );
    let history = w.items().history(&id).await.unwrap();
    assert!(
        history[2].reason.contains("HTTP 500"),
        "{}",
        history[2].reason
    );
}

/// The seed's outdated-timestamp rule: a file the source last modified before
/// `GRANARY_NOT_BEFORE` is SKIPPED with the reason; the same file under an earlier cut-off is
/// admitted (the test server's Last-Modified is 2022-11-15T08:12:31Z).
#[tokio::test]
async fn an_outdated_file_is_skipped_and_a_current_one_admitted() {
    for (tag, not_before, want) in [
        ("lcoutdated", "2023-01-01T00:00:00Z", Skipped),
        ("lccurrent", "2022-01-01T00:00:00Z", Ready),
    ] {
        let w = world(tag, &[("GRANARY_NOT_BEFORE", not_before)]).await;
        w.server.archive.put("o.h5", BODY, vec![Behaviour::Serve]);
        discover::discover(&w.importer_ctx).await.unwrap();
        w.run_import_queue().await;
        let id = w.only_item().await;
        let r = w.record(&id).await;
        assert_eq!(
            r.state, want,
            "GRANARY_NOT_BEFORE={not_before}: {}",
            r.reason
        );
        assert_eq!(
            r.source_modified.map(|t| t.to_rfc3339()).as_deref(),
            Some("2022-11-15T08:12:31+00:00")
        );
        if want == Skipped {
            assert!(
                r.reason.contains("outdated") && r.reason.contains("GRANARY_NOT_BEFORE"),
                "{}",
                r.reason
            );
            assert_eq!(
                w.path(&id).await,
                chain(&[Discovered, Downloading, Downloaded, Skipped])
            );
        }
    }
}

/// Validation checks that a file is the kind its name says, not only its size and digest: an
/// error page served as `scene.png` downloads and hashes fine, and is never admitted (each
/// admission sends it back to download, until the attempts are spent: IGNORE); a real PNG is.
#[tokio::test]
async fn a_file_that_is_not_the_kind_its_name_says_is_never_admitted() {
    let w = world("lcformat", &[]).await;
    let page = b"<html><body>Service Unavailable</body></html>".to_vec();
    let png = [
        &[0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A][..],
        b"\0\0\0\x0dIHDR",
    ]
    .concat();
    w.server
        .archive
        .put("scene.png", &page, vec![Behaviour::Serve]);
    w.server
        .archive
        .put("real.png", &png, vec![Behaviour::Serve]);
    discover::discover(&w.importer_ctx).await.unwrap();
    w.run_import_queue().await;
    for r in w.items().find(&Default::default()).await.unwrap() {
        if r.name == "real.png" {
            assert_eq!(r.state, Ready, "{}", r.reason);
            continue;
        }
        assert_eq!((r.state, r.attempts.download), (Ignore, 3), "{}", r.reason);
        let history = w.items().history(&r.id).await.unwrap();
        assert!(
            history
                .iter()
                .any(|e| e.reason.contains("scene.png is not a PNG file")),
            "{:?}",
            history.iter().map(|e| &e.reason).collect::<Vec<_>>()
        );
    }
}

#[tokio::test]
async fn failure2_ineligible_files_are_skipped() {
    let w = world(
        "lcfail2",
        &[
            ("GRANARY_ELIGIBLE_PATTERN", r"\.h5$"),
            ("GRANARY_ACTIVE_SLOTS", "S30"),
        ],
    )
    .await;
    w.server
        .archive
        .put("readme.txt", b"not a granule", vec![Behaviour::Serve]);
    w.server.archive.put(
        "HLS.L30.T18TYN.2020001T153012.v2.0.h5",
        BODY,
        vec![Behaviour::Serve],
    );
    discover::discover(&w.importer_ctx).await.unwrap();
    w.run_import_queue().await;
    let all = w.items().find(&Default::default()).await.unwrap();
    assert_eq!(all.len(), 2);
    for r in &all {
        assert_eq!(r.state, Skipped, "{}", r.name);
        assert_eq!(
            w.path(&r.id).await,
            chain(&[Discovered, Downloading, Downloaded, Skipped])
        );
    }
    let why: Vec<&str> = all.iter().map(|r| r.reason.as_str()).collect();
    assert!(
        why.iter().any(|w| w.contains("GRANARY_ELIGIBLE_PATTERN")),
        "{why:?}"
    );
    assert!(
        why.iter().any(|w| w.contains("slot L30 is not ACTIVE")),
        "{why:?}"
    );
}

#[tokio::test]
async fn failure3_processing_fails_until_the_limit_then_abandoned() {
    let w = world("lcfail3", &[]).await;
    w.server.archive.put("b.h5", BODY, vec![Behaviour::Serve]);
    discover::discover(&w.importer_ctx).await.unwrap();
    w.run_import_queue().await;
    let id = w.only_item().await;
    for attempt in 1..=2 {
        assert_eq!(w.run_requeuer().await, 1);
        let r = w.record(&id).await;
        assert_eq!((r.state, r.attempts.processing), (Processing, attempt));
        w.end_job(&id, spot()).await;
        assert_eq!(w.record(&id).await.state, ProcessingFailed);
    }
    // the retry message of attempt 2 finds the budget spent
    assert_eq!(w.run_requeuer().await, 1);
    let r = w.record(&id).await;
    assert_eq!((r.state, r.attempts.processing), (Abandoned, 2));
    assert_eq!(
        w.path(&id).await,
        chain(&[
            Discovered,
            Downloading,
            Downloaded,
            Ready,
            Processing,
            ProcessingFailed,
            Ready,
            Processing,
            ProcessingFailed,
            Abandoned
        ])
    );
    let dlq = drain(&w.s.clients, &w.s.stack.failure_dlq_url).await;
    assert_eq!(dlq.len(), 1);
}

#[tokio::test]
async fn failure4_a_slow_download_times_out_and_is_retried() {
    let w = world("lcfail4", &[]).await;
    w.server.archive.put(
        "c.h5",
        BODY,
        vec![
            Behaviour::Slow(std::time::Duration::from_secs(5)),
            Behaviour::Serve,
        ],
    );
    discover::discover(&w.importer_ctx).await.unwrap();
    w.run_import_queue().await;
    let id = w.only_item().await;
    let r = w.record(&id).await;
    assert_eq!((r.state, r.attempts.download), (Ready, 2));
    assert_eq!(
        w.path(&id).await,
        chain(&[
            Discovered,
            Downloading,
            DownloadingFailed,
            Downloading,
            Downloaded,
            Ready
        ])
    );
    let failed = &w.items().history(&id).await.unwrap()[2];
    assert!(failed.reason.contains("timed out"), "{}", failed.reason);
}

#[tokio::test]
async fn a_truncated_download_is_detected_and_retried() {
    let w = world("lctrunc", &[]).await;
    w.server.archive.put(
        "d.h5",
        BODY,
        vec![Behaviour::Truncate(10), Behaviour::Serve],
    );
    discover::discover(&w.importer_ctx).await.unwrap();
    w.run_import_queue().await;
    let id = w.only_item().await;
    let r = w.record(&id).await;
    assert_eq!((r.state, r.attempts.download), (Ready, 2));
    assert_eq!(r.size, Some(BODY.len() as u64));
    let history = w.items().history(&id).await.unwrap();
    assert_eq!(history[2].to, DownloadingFailed);
    let stored =
        w.s.ctx
            .store
            .get(r.stored_key.as_deref().unwrap())
            .await
            .unwrap()
            .unwrap();
    assert_eq!(
        &stored.body[..],
        BODY,
        "the truncated body never became the stored file"
    );
}

#[tokio::test]
async fn failure5_a_processing_timeout_is_retried_while_attempts_remain_then_abandoned() {
    let w = world("lcfail5", &[]).await;
    w.server.archive.put("e.h5", BODY, vec![Behaviour::Serve]);
    discover::discover(&w.importer_ctx).await.unwrap();
    w.run_import_queue().await;
    let id = w.only_item().await;
    // Batch kills each attempt at the job definition's timeout and never retries it; granary
    // does, through the retry queue, while the item has attempts (two here).
    for attempt in 1..=2 {
        assert_eq!(w.run_requeuer().await, 1, "attempt {attempt} submitted");
        w.end_job(&id, AttemptEnd::Timeout).await;
        let r = w.record(&id).await;
        assert_eq!(
            (r.state, r.attempts.processing),
            (ProcessingFailed, attempt)
        );
        assert!(r.reason.contains("timed out"), "{}", r.reason);
    }
    // The second timeout's retry message finds the budget spent: dead-lettered, ABANDONED.
    assert_eq!(w.run_requeuer().await, 1);
    let r = w.record(&id).await;
    assert_eq!((r.state, r.attempts.processing), (Abandoned, 2));
    assert_eq!(
        w.path(&id).await,
        chain(&[
            Discovered,
            Downloading,
            Downloaded,
            Ready,
            Processing,
            ProcessingFailed,
            Ready,
            Processing,
            ProcessingFailed,
            Abandoned
        ])
    );
    let dlq = drain(&w.s.clients, &w.s.stack.failure_dlq_url).await;
    assert_eq!(dlq.len(), 1, "one notice, when the attempts are spent");
}

#[tokio::test]
async fn a_non_retryable_end_is_dead_lettered_and_abandoned_at_once_and_resume_sends_it_round() {
    let w = world("lcnonretry", &[]).await;
    w.server.archive.put("n.h5", BODY, vec![Behaviour::Serve]);
    discover::discover(&w.importer_ctx).await.unwrap();
    w.run_import_queue().await;
    let id = w.only_item().await;
    assert_eq!(w.run_requeuer().await, 1);
    // The application failed: granary does not retry what the code broke.
    w.end_job(&id, AttemptEnd::AppFailure { exit_code: 2 })
        .await;
    let r = w.record(&id).await;
    assert_eq!((r.state, r.attempts.processing), (Abandoned, 1));
    assert!(r.reason.contains("dead-lettered"), "{}", r.reason);
    assert_eq!(w.run_requeuer().await, 0, "nothing on the retry queue");
    let dlq = drain(&w.s.clients, &w.s.stack.failure_dlq_url).await;
    assert_eq!(dlq.len(), 1, "the notice a human reads");
    // Fixed: the operator resumes it, and its next attempt runs and succeeds.
    let resumed =
        granary::handlers::resume::resume(&w.importer_ctx, std::slice::from_ref(&id), false)
            .await
            .unwrap();
    assert_eq!(resumed.resumed[0].from, "ABANDONED");
    assert_eq!(w.run_requeuer().await, 1);
    w.end_job(&id, AttemptEnd::Success).await;
    let r = w.record(&id).await;
    assert_eq!((r.state, r.attempts.processing), (Processed, 2));
    assert_eq!(
        w.path(&id).await,
        chain(&[
            Discovered,
            Downloading,
            Downloaded,
            Ready,
            Processing,
            ProcessingFailed,
            Abandoned,
            Ready,
            Processing,
            Processed
        ])
    );
}

#[tokio::test]
async fn failure6_a_crash_during_download_is_recovered_by_the_sweeper() {
    let w = world("lcfail6", &[]).await;
    w.server.archive.put("f.h5", BODY, vec![Behaviour::Serve]);
    discover::discover(&w.importer_ctx).await.unwrap();
    drain(&w.s.clients, &w.s.stack.import_queue_url).await;
    let id = w.only_item().await;
    // A worker began the download and died.
    w.items()
        .advance(&id, "crashed-worker", |r| {
            (r.state == Discovered).then(|| Change::to(Downloading, "download attempt 1"))
        })
        .await
        .unwrap();
    // Within the timeout the sweeper leaves it alone.
    let early = sweeper::sweep(&w.importer_ctx, Utc::now()).await.unwrap();
    assert_eq!((early.examined, early.within_time), (1, 1));
    let late = sweeper::sweep(&w.importer_ctx, Utc::now() + Duration::seconds(3))
        .await
        .unwrap();
    assert_eq!(late.retried, 1);
    assert_eq!(w.record(&id).await.state, DownloadingFailed);
    w.run_import_queue().await;
    let r = w.record(&id).await;
    assert_eq!((r.state, r.attempts.download), (Ready, 2));
    assert_eq!(
        w.path(&id).await,
        chain(&[
            Discovered,
            Downloading,
            DownloadingFailed,
            Downloading,
            Downloaded,
            Ready
        ])
    );
    assert!(w.items().inflight().await.unwrap().is_empty());
}

/// The seed's DOWNLOADING-timeout rule on the last attempt: the sweeper, not a download message,
/// finds the item stuck past its time with no attempt left and gives it up (DOWNLOADING →
/// DOWNLOADING_FAILED → IGNORE in one write), with its DLQ notice first.
#[tokio::test]
async fn failure6_a_crash_during_the_last_download_is_given_up_by_the_sweeper() {
    let w = world("lcfail6i", &[("GRANARY_MAX_DOWNLOAD_ATTEMPTS", "1")]).await;
    w.server.archive.put("i.h5", BODY, vec![Behaviour::Serve]);
    discover::discover(&w.importer_ctx).await.unwrap();
    drain(&w.s.clients, &w.s.stack.import_queue_url).await;
    let id = w.only_item().await;
    // A worker began the only download attempt and died.
    w.items()
        .advance(&id, "crashed-worker", |r| {
            (r.state == Discovered).then(|| Change::to(Downloading, "download attempt 1"))
        })
        .await
        .unwrap();
    let swept = sweeper::sweep(&w.importer_ctx, Utc::now() + Duration::seconds(3))
        .await
        .unwrap();
    assert_eq!((swept.gave_up, swept.retried), (1, 0), "{swept:?}");
    let r = w.record(&id).await;
    assert_eq!((r.state, r.attempts.download), (Ignore, 1));
    assert!(r.terminal && !r.workflow_complete);
    assert!(r.reason.contains("timed out"), "{}", r.reason);
    assert_eq!(
        w.path(&id).await,
        chain(&[Discovered, Downloading, DownloadingFailed, Ignore])
    );
    let dlq = drain(&w.s.clients, &w.s.stack.failure_dlq_url).await;
    assert_eq!(dlq.len(), 1, "one notice for the item given up");
    assert!(dlq[0].body.contains(id.as_str()), "{}", dlq[0].body);
    assert!(
        drain(&w.s.clients, &w.s.stack.import_queue_url)
            .await
            .is_empty(),
        "no download is asked for again"
    );
    assert!(w.items().inflight().await.unwrap().is_empty());
    // A second sweep finds nothing to do.
    let again = sweeper::sweep(&w.importer_ctx, Utc::now() + Duration::seconds(6))
        .await
        .unwrap();
    assert_eq!((again.examined, again.gave_up), (0, 0), "{again:?}");
}

#[tokio::test]
async fn failure7_a_crash_during_processing_is_recovered_by_the_sweeper() {
    let w = world("lcfail7", &[("GRANARY_PROCESSING_TIMEOUT_SECS", "60")]).await;
    w.server.archive.put("g.h5", BODY, vec![Behaviour::Serve]);
    discover::discover(&w.importer_ctx).await.unwrap();
    w.run_import_queue().await;
    let id = w.only_item().await;
    drain(&w.s.clients, &w.s.stack.retry_queue_url).await;
    // Attempt 1 went to a job Batch no longer knows (its host crashed; no event will come).
    let event = GranuleProcessingEvent {
        granule_id: id.clone(),
        attempt: 1,
    };
    item_sync::submitted(&w.s.ctx, &event, "job-lost-in-crash", None, "test")
        .await
        .unwrap();
    let swept = sweeper::sweep(&w.importer_ctx, Utc::now() + Duration::seconds(61))
        .await
        .unwrap();
    assert_eq!(swept.retried, 1, "{swept:?}");
    assert_eq!(w.record(&id).await.state, ProcessingFailed);
    assert_eq!(w.run_requeuer().await, 1);
    let r = w.record(&id).await;
    assert_eq!((r.state, r.attempts.processing), (Processing, 2));
    w.end_job(&id, AttemptEnd::Success).await;
    assert_eq!(
        w.path(&id).await,
        chain(&[
            Discovered,
            Downloading,
            Downloaded,
            Ready,
            Processing,
            ProcessingFailed,
            Ready,
            Processing,
            Processed
        ])
    );
    let timed_out = &w.items().history(&id).await.unwrap()[5];
    assert!(
        timed_out.reason.contains("timed out"),
        "{}",
        timed_out.reason
    );
}

#[tokio::test]
async fn failure8_a_duplicate_discovery_is_ignored() {
    let w = world("lcfail8", &[]).await;
    // Two links to the same content, with the same published digest: one file.
    let sha = {
        use sha2::Digest;
        format!("{:x}", sha2::Sha256::digest(BODY))
    };
    for name in ["h.h5", "mirror-of-h.h5"] {
        w.server.archive.put(name, BODY, vec![Behaviour::Serve]);
        w.server.archive.put(
            &format!("{name}.sha256"),
            format!("{sha}  {name}\n").as_bytes(),
            vec![Behaviour::Serve],
        );
    }
    let first = discover::discover(&w.importer_ctx).await.unwrap();
    assert_eq!((first.listed, first.new, first.duplicates), (2, 1, 1));
    w.run_import_queue().await;
    let id = w.only_item().await;
    assert_eq!(
        w.record(&id).await.raw_file_hash,
        Some(format!("sha256:{sha}"))
    );
    let again = discover::discover(&w.importer_ctx).await.unwrap();
    assert_eq!((again.new, again.duplicates), (0, 2));
    assert_eq!(
        w.run_import_queue().await,
        0,
        "a finished item is not queued again"
    );
    assert_eq!(
        w.path(&id).await,
        chain(&[Discovered, Downloading, Downloaded, Ready])
    );
    assert_eq!(
        w.server.archive.gets("h.h5") + w.server.archive.gets("mirror-of-h.h5"),
        1
    );
}

#[tokio::test]
async fn operational_a_file_already_stored_goes_straight_to_downloaded() {
    let w = world("lcoper", &[]).await;
    w.server.archive.put("i.h5", BODY, vec![Behaviour::Serve]);
    discover::discover(&w.importer_ctx).await.unwrap();
    drain(&w.s.clients, &w.s.stack.import_queue_url).await;
    let id = w.only_item().await;
    let record = w.record(&id).await;
    let key = download::stored_key(&w.importer_ctx, &record);
    w.s.ctx
        .store
        .put(&key, Bytes::from_static(BODY), PutCondition::Overwrite)
        .await
        .unwrap();
    run_steps(&w.importer_ctx, &id, None).await.unwrap();
    let r = w.record(&id).await;
    assert_eq!((r.state, r.attempts.download), (Ready, 0));
    assert_eq!(w.server.archive.gets("i.h5"), 0, "nothing downloaded");
    assert_eq!(w.path(&id).await, chain(&[Discovered, Downloaded, Ready]));
}

/// Seed 001's status rows for the importer's steps, read back from what a run wrote: a failed
/// download attempt, a stored one, the admission in progress while a prerequisite is missing
/// and complete once the item is READY, then the processing attempt. Each row completes when
/// the record moves on, and at that moment the record's state and `last_updated` are the row's
/// end (the seed's "S3 status" and "Redshift status" tests), as `granary items steps` reads them.
#[tokio::test]
async fn an_imported_files_step_rows_are_its_download_attempts_its_admission_and_its_processing() {
    use granary::domain::item_steps::{StepQuery, StepType};
    let w = world(
        "lcsteps",
        &[("GRANARY_PREREQUISITES", "ancillary/{name}.met")],
    )
    .await;
    w.server
        .archive
        .put("s.h5", BODY, vec![Behaviour::Fail, Behaviour::Serve]);
    discover::discover(&w.importer_ctx).await.unwrap();
    w.run_import_queue().await;
    let id = w.only_item().await;
    let steps = |q: StepQuery| {
        let items = w.items();
        async move { items.steps(&q).await.unwrap() }
    };
    let of_item = || StepQuery {
        item: Some(id.clone()),
        ..Default::default()
    };
    let rows = steps(of_item()).await;
    let seen: Vec<_> = rows
        .iter()
        .map(|s| (s.name.as_str(), s.step_type, s.step_complete, s.ended_in))
        .collect();
    assert_eq!(
        seen,
        vec![
            (
                "download attempt 1",
                StepType::Download,
                true,
                Some(DownloadingFailed)
            ),
            (
                "download attempt 2",
                StepType::Download,
                true,
                Some(Downloaded)
            ),
            ("admission", StepType::Admission, false, None),
        ]
    );
    assert!(rows.iter().all(|s| s.item_id == id));
    // The file is in S3, its download row complete, and the record says so.
    let r = w.record(&id).await;
    assert_eq!((r.state, Some(r.last_updated)), (Downloaded, rows[1].ended));
    assert_eq!(Some(rows[2].started), rows[1].ended);
    let stored =
        w.s.ctx
            .store
            .get(r.stored_key.as_deref().unwrap())
            .await
            .unwrap()
            .unwrap();
    assert_eq!(&stored.body[..], BODY);
    // The seed's finders, over the run's rows: the step in progress, the downloads.
    let open = steps(StepQuery {
        step_complete: Some(false),
        ..Default::default()
    })
    .await;
    assert_eq!(open, rows[2..]);
    let downloads = steps(StepQuery {
        step_type: Some(StepType::Download),
        ..Default::default()
    })
    .await;
    assert_eq!(downloads, rows[..2]);

    // The prerequisite arrives; SQS delivers the admission again: READY.
    w.s.ctx
        .store
        .put(
            "ancillary/s.h5.met",
            Bytes::from_static(b"ok"),
            PutCondition::Overwrite,
        )
        .await
        .unwrap();
    run_steps(&w.importer_ctx, &id, Some(Step::Admit))
        .await
        .unwrap();
    let rows = steps(of_item()).await;
    let r = w.record(&id).await;
    assert_eq!(
        (rows[2].step_complete, rows[2].ended_in),
        (true, Some(Ready))
    );
    assert_eq!((r.state, Some(r.last_updated)), (Ready, rows[2].ended));

    // Processing; then every row is complete, and the workflow with them.
    assert_eq!(w.run_requeuer().await, 1);
    w.end_job(&id, AttemptEnd::Success).await;
    let rows = steps(of_item()).await;
    assert_eq!(rows.len(), 4, "{rows:?}");
    assert_eq!(
        (rows[3].name.as_str(), rows[3].step_type, rows[3].ended_in),
        (
            "processing attempt 1",
            StepType::Processing,
            Some(Processed)
        )
    );
    assert!(rows.iter().all(|s| s.step_complete));
    let r = w.record(&id).await;
    assert!(r.workflow_complete);
    assert_eq!(
        r.created,
        w.items().history(&id).await.unwrap()[0].at,
        "created never changes"
    );
}

#[tokio::test]
async fn revalidation_sends_a_corrupt_download_back_and_prerequisites_hold_admission() {
    let w = world(
        "lcreval",
        &[("GRANARY_PREREQUISITES", "ancillary/{name}.met")],
    )
    .await;
    w.server.archive.put("j.h5", BODY, vec![Behaviour::Serve]);
    discover::discover(&w.importer_ctx).await.unwrap();
    w.run_import_queue().await;
    let id = w.only_item().await;
    let r = w.record(&id).await;
    assert_eq!(r.state, Downloaded, "waits for its prerequisite");
    let waiting = run_steps(&w.importer_ctx, &id, None).await.unwrap_err();
    assert!(
        waiting
            .to_string()
            .contains("ancillary/j.h5.met does not exist yet"),
        "{waiting}"
    );
    // The stored file is damaged: re-validation sends the item back to downloading.
    w.s.ctx
        .store
        .put(
            r.stored_key.as_deref().unwrap(),
            Bytes::from_static(b"corrupt"),
            PutCondition::Overwrite,
        )
        .await
        .unwrap();
    // The operator asks for a re-validation (`granary revalidate`): a dry run sends nothing, the
    // request one import message, which the importer step runs.
    let ids = [id.clone(), GranuleId::parse("no-such-item").unwrap()];
    let dry = validate::request_revalidation(&w.importer_ctx, &ids, true)
        .await
        .unwrap();
    assert_eq!(
        dry.requested,
        vec![(id.to_string(), "DOWNLOADED".to_owned())]
    );
    assert_eq!(dry.missing, vec!["no-such-item".to_owned()]);
    assert!(drain(&w.s.clients, &w.s.stack.import_queue_url)
        .await
        .is_empty());
    validate::request_revalidation(&w.importer_ctx, &ids, false)
        .await
        .unwrap();
    let asked = drain(&w.s.clients, &w.s.stack.import_queue_url).await;
    assert_eq!(asked.len(), 1);
    let after = importer::handle_message(&w.importer_ctx, &asked[0].body)
        .await
        .unwrap();
    assert_eq!(after.final_state, Some(DownloadingFailed));
    w.s.ctx
        .store
        .put(
            "ancillary/j.h5.met",
            Bytes::from_static(b"ok"),
            PutCondition::Overwrite,
        )
        .await
        .unwrap();
    w.run_import_queue().await;
    let r = w.record(&id).await;
    assert_eq!((r.state, r.attempts.download), (Ready, 2));
    assert_eq!(
        w.path(&id).await,
        chain(&[
            Discovered,
            Downloading,
            Downloaded,
            DownloadingFailed,
            Downloading,
            Downloaded,
            Ready
        ])
    );
}

/// A processed item whose product goes missing is found out by re-validation
/// (`GRANARY_PRODUCT_KEYS`): PROCESSING_FAILED and processed again while attempts remain; an
/// empty product once the attempts are spent: dead-lettered and ABANDONED.
#[tokio::test]
async fn revalidation_reopens_a_processed_item_whose_product_is_missing_or_empty() {
    let w = world("lcprod", &[("GRANARY_PRODUCT_KEYS", "products/{id}.tif")]).await;
    let id = w.processed("p.h5").await;
    let product = format!("products/{id}.tif");
    let revalidate = || async {
        validate::request_revalidation(&w.importer_ctx, std::slice::from_ref(&id), false)
            .await
            .unwrap();
        let asked = drain(&w.s.clients, &w.s.stack.import_queue_url).await;
        assert_eq!(asked.len(), 1);
        importer::handle_message(&w.importer_ctx, &asked[0].body)
            .await
            .unwrap()
            .final_state
    };
    // The product is missing: failed, and handed to processing again (attempt 2 of 2).
    assert_eq!(revalidate().await, Some(ProcessingFailed));
    let r = w.record(&id).await;
    assert!(
        r.reason.contains(&format!("product {product} is missing")),
        "{}",
        r.reason
    );
    assert_eq!(w.run_requeuer().await, 1);
    assert_eq!(w.record(&id).await.state, Processing);
    w.end_job(&id, AttemptEnd::Success).await;
    // The product is there: re-validation leaves the item processed.
    w.s.ctx
        .store
        .put(
            &product,
            Bytes::from_static(b"tif"),
            PutCondition::Overwrite,
        )
        .await
        .unwrap();
    assert_eq!(revalidate().await, Some(Processed));
    // Empty, with no attempt left: dead-lettered, abandoned.
    w.s.ctx
        .store
        .put(&product, Bytes::new(), PutCondition::Overwrite)
        .await
        .unwrap();
    assert_eq!(revalidate().await, Some(Abandoned));
    let dlq = drain(&w.s.clients, &w.s.stack.failure_dlq_url).await;
    assert_eq!(dlq.len(), 1);
    assert!(dlq[0].body.contains(id.as_str()), "{}", dlq[0].body);
    assert_eq!(
        w.path(&id).await[6..],
        chain(&[
            Processed,
            ProcessingFailed,
            Ready,
            Processing,
            Processed,
            ProcessingFailed,
            Abandoned
        ])[1..]
    );
}

/// Re-validation revokes the success it found wanting before it sends the item round: the new
/// attempt's failure is then routed like any other (the application's: dead-lettered, ABANDONED),
/// not taken for a late end of a granule that succeeded, which would leave the item PROCESSING
/// with nothing coming. The revoked success stays logged as the job's evidence, marked revoked.
#[tokio::test]
async fn a_failure_after_revalidation_is_routed_not_taken_for_a_late_end() {
    let w = world("lcrevoke", &[("GRANARY_PRODUCT_KEYS", "products/{id}.tif")]).await;
    let id = w.processed("v.h5").await;
    // The product never appeared: re-validation fails the item and hands it to processing.
    validate::request_revalidation(&w.importer_ctx, std::slice::from_ref(&id), false)
        .await
        .unwrap();
    let asked = drain(&w.s.clients, &w.s.stack.import_queue_url).await;
    assert_eq!(asked.len(), 1);
    let state = importer::handle_message(&w.importer_ctx, &asked[0].body)
        .await
        .unwrap()
        .final_state;
    assert_eq!(state, Some(ProcessingFailed));
    assert_eq!(w.run_requeuer().await, 1);
    assert_eq!(w.record(&id).await.state, Processing);
    // Attempt 2's application fails.
    let outcome = w
        .end_job(&id, AttemptEnd::AppFailure { exit_code: 2 })
        .await;
    assert_eq!(
        outcome,
        monitor::MonitorOutcome::Routed {
            route: granary::domain::classify::Route::FailureDlq
        }
    );
    let r = w.record(&id).await;
    assert_eq!((r.state, r.attempts.processing), (Abandoned, 2));
    let dlq = drain(&w.s.clients, &w.s.stack.failure_dlq_url).await;
    assert_eq!(dlq.len(), 1, "the notice a human reads");
    // Attempt 1's success is still logged, marked revoked through attempt 1.
    let facts = w.s.ctx.config.layout.id_parser.facts(&id);
    let key = granary::domain::layout::logs::LogKey::new(
        granary::domain::layout::logs::LogOutcome::Success,
        &facts,
        &id,
        1,
    );
    let log: granary::domain::layout::logs::LogRecord = serde_json::from_slice(
        &w.s.ctx
            .store
            .get(&key.to_key(&w.s.ctx.config.layout.log_prefix))
            .await
            .unwrap()
            .expect("attempt 1's success log")
            .body,
    )
    .unwrap();
    let revoked = log.revoked.expect("the success is revoked");
    assert_eq!(revoked.through_attempt, 1);
    assert!(
        revoked.reason.contains("re-validation failed"),
        "{}",
        revoked.reason
    );
}

/// An admission that waited for its prerequisites until SQS parked its message in the import
/// DLQ leaves the item DOWNLOADED with nothing to move it. Once the prerequisites are there,
/// `granary redrive-imports` (the parked message back, unchanged) or `granary resume` (a fresh
/// admission) admits it.
#[tokio::test]
async fn a_parked_admission_is_woken_by_redrive_imports_or_resume() {
    let w = world(
        "lcparked",
        &[("GRANARY_PREREQUISITES", "ancillary/{name}.met")],
    )
    .await;
    for name in ["k.h5", "l.h5"] {
        w.server.archive.put(name, BODY, vec![Behaviour::Serve]);
    }
    discover::discover(&w.importer_ctx).await.unwrap();
    w.run_import_queue().await;
    let items = w.items().find(&Default::default()).await.unwrap();
    assert_eq!(items.len(), 2);
    assert!(items.iter().all(|r| r.state == Downloaded), "{items:?}");
    let by_name = |name: &str| items.iter().find(|r| r.name == name).unwrap().id.clone();
    let (k, l) = (by_name("k.h5"), by_name("l.h5"));
    // SQS moved k's last admission message to the import DLQ after its receives ran out.
    let dlq_url =
        w.s.clients
            .sqs
            .create_queue()
            .queue_name(format!("lcparked-import-dlq-{}", std::process::id()))
            .send()
            .await
            .unwrap()
            .queue_url
            .unwrap();
    let dlq = granary::wiring::sqs_queue(&w.s.clients, &dlq_url);
    let import_queue = granary::wiring::sqs_queue(&w.s.clients, &w.s.stack.import_queue_url);
    let parked = granary::contracts::messages::ImportMessage {
        item_id: k.clone(),
        step: Some(Step::Admit),
        resume: false,
        campaign: None,
    };
    dlq.send(parked.to_message().unwrap()).await.unwrap();
    for name in ["k.h5", "l.h5"] {
        w.s.ctx
            .store
            .put(
                &format!("ancillary/{name}.met"),
                Bytes::from_static(b"ok"),
                PutCondition::Overwrite,
            )
            .await
            .unwrap();
    }
    let moved = granary::handlers::redrive::redrive_imports(
        dlq.as_ref(),
        import_queue.as_ref(),
        None,
        &Default::default(),
        &|_| {},
    )
    .await
    .unwrap();
    assert_eq!(moved.redriven, 1);
    assert_eq!(w.run_import_queue().await, 1);
    assert_eq!(w.record(&k).await.state, Ready);
    assert_eq!(w.record(&l).await.state, Downloaded, "nothing woke l yet");
    let resumed =
        granary::handlers::resume::resume(&w.importer_ctx, std::slice::from_ref(&l), false)
            .await
            .unwrap();
    assert_eq!(resumed.resumed[0].from, "DOWNLOADED");
    assert_eq!(w.run_import_queue().await, 1);
    assert_eq!(w.record(&l).await.state, Ready);
    assert_eq!(
        w.path(&l).await,
        chain(&[Discovered, Downloading, Downloaded, Ready])
    );
}

/// Holds the first two reads of one key until both have happened, so two handlers act on the
/// same version of the record.
struct BarrierStore {
    inner: Arc<dyn ObjectStore>,
    key: String,
    barrier: tokio::sync::Barrier,
    reads: AtomicUsize,
}

#[async_trait]
impl ObjectStore for BarrierStore {
    async fn get(&self, key: &str) -> Result<Option<StoredObject>, StoreError> {
        let got = self.inner.get(key).await;
        if key == self.key && self.reads.fetch_add(1, Ordering::SeqCst) < 2 {
            self.barrier.wait().await;
        }
        got
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, StoreError> {
        self.inner.get_range(key, range).await
    }
    async fn get_suffix(&self, key: &str, len: u64) -> Result<(Bytes, u64), StoreError> {
        self.inner.get_suffix(key, len).await
    }
    async fn put(&self, key: &str, body: Bytes, c: PutCondition) -> Result<String, StoreError> {
        self.inner.put(key, body, c).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StoreError> {
        self.inner.list(prefix).await
    }
    async fn copy(&self, from: &str, to: &str) -> Result<(), StoreError> {
        self.inner.copy(from, to).await
    }
    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.inner.delete(key).await
    }
}

#[tokio::test]
async fn racing_handlers_make_exactly_one_transition() {
    let s = stack("lcrace", 1, &[]).await;
    let id = GranuleId::parse("HLS.S30.T01GBH.2022226T214921.v2.0").unwrap();
    let plain = s.ctx.items();
    plain
        .create(
            granary::domain::item::NewItem::ready(id.clone(), "listed in an inventory", None),
            "test",
        )
        .await
        .unwrap();
    let store = Arc::new(BarrierStore {
        inner: s.ctx.store.clone(),
        key: format!("items/{id}.json"),
        barrier: tokio::sync::Barrier::new(2),
        reads: AtomicUsize::new(0),
    });
    let racing = Items::new(store, plain.prefixes.clone());
    let go = |who: &'static str| {
        let racing = racing.clone();
        let id = id.clone();
        async move {
            racing
                .advance(&id, who, |r| {
                    (r.state == Ready)
                        .then(|| Change::to(Processing, format!("submitted by {who}")))
                })
                .await
                .unwrap()
        }
    };
    let (a, b) = tokio::join!(go("feeder"), go("requeuer"));
    let moved = [&a, &b]
        .iter()
        .filter(|x| matches!(x, Changed::Moved(_)))
        .count();
    assert_eq!(moved, 1, "{a:?} / {b:?}");
    assert!(
        [&a, &b]
            .iter()
            .any(|x| matches!(x, Changed::Unchanged(r) if r.state == Processing)),
        "the loser re-read and found nothing left to do"
    );
    let history = plain.history(&id).await.unwrap();
    assert_eq!(
        history.iter().map(|e| (e.from, e.to)).collect::<Vec<_>>(),
        chain(&[Ready, Processing])
    );
    assert_eq!(
        plain
            .get(&id)
            .await
            .unwrap()
            .unwrap()
            .value
            .attempts
            .processing,
        1
    );
}

#[tokio::test]
async fn an_s3_prefix_source_is_discovered_and_streamed_in_parts() {
    let source_bucket = unique_name("src");
    let (clients, _) = clients().await;
    clients
        .s3
        .create_bucket()
        .bucket(&source_bucket)
        .send()
        .await
        .unwrap();
    // 9 MiB: more than one 8 MiB part, so the download is a real multipart upload.
    let mut big: Vec<u8> = (0..9 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    big[..8].copy_from_slice(&BODY[..8]); // HDF5's signature
    for (key, body) in [
        ("granules/big.h5", big.clone()),
        ("granules/small.h5", BODY.to_vec()),
    ] {
        clients
            .s3
            .put_object()
            .bucket(&source_bucket)
            .key(key)
            .body(body.into())
            .send()
            .await
            .unwrap();
    }
    let url = format!("s3://{source_bucket}/granules/");
    let s = stack("lcs3", 1, &[("GRANARY_SOURCE_URL", url.as_str())]).await;
    let importer_ctx = s.ctx.clone();
    let found = discover::discover(&importer_ctx).await.unwrap();
    assert_eq!((found.listed, found.new), (2, 2));
    loop {
        let msgs = drain(&s.clients, &s.stack.import_queue_url).await;
        if msgs.is_empty() {
            break;
        }
        for m in msgs {
            importer::handle_message(&importer_ctx, &m.body)
                .await
                .unwrap();
        }
    }
    let records = s.ctx.items().find(&Default::default()).await.unwrap();
    assert_eq!(records.len(), 2);
    for r in records {
        assert_eq!(r.state, Ready, "{}", r.name);
        let stored = s
            .ctx
            .store
            .get(r.stored_key.as_deref().unwrap())
            .await
            .unwrap()
            .unwrap();
        let want: &[u8] = if r.name == "big.h5" { &big } else { BODY };
        assert_eq!(stored.body.len(), want.len());
        assert!(stored.body[..] == *want, "{} stored byte for byte", r.name);
        assert_eq!(
            r.source.as_deref(),
            Some(format!("{url}{}", r.name).as_str())
        );
    }
}

/// The import message for `id` (at `step`), delivered to the importer as SQS would.
async fn run_steps(
    importer_ctx: &Ctx,
    id: &GranuleId,
    step: Option<Step>,
) -> Result<importer::StepReport, granary::handlers::HandlerError> {
    let message = granary::contracts::messages::ImportMessage {
        item_id: id.clone(),
        step,
        resume: false,
        campaign: None,
    };
    let body = serde_json::to_string(&message).unwrap();
    importer::handle_message(importer_ctx, &body).await
}
