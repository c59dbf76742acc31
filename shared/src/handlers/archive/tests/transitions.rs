//! Every transition of the archive table driven by the handlers, not only allowed by the table:
//! seven archive jobs — one that completes, one with an empty source, a recoverable failure in
//! each phase, a destination that keeps failing, a source object gone before archiving, a
//! missing signing key — and the operator's retry of each failed phase. The union of their
//! histories must be the table, edge for edge.

use super::*;
use crate::domain::archive::job::TRANSITIONS;
use std::collections::BTreeSet;
use std::sync::Mutex;

type Edge = (ArchiveState, ArchiveState);

/// Refuses (as S3's 503 does) the next `left` writes under `prefix` in granary's bucket; every
/// other call passes, so the job's records keep moving while its staged files cannot be written.
#[derive(Default)]
struct RefuseUnder {
    prefix: Mutex<String>,
    left: AtomicU32,
}

impl RefuseUnder {
    fn arm(&self, prefix: String, writes: u32) {
        if let Ok(mut p) = self.prefix.lock() {
            *p = prefix;
        }
        self.left.store(writes, Ordering::SeqCst);
    }
}

impl Tap for RefuseUnder {
    fn enter(&self, call: &Call<'_>) -> Result<Fate, Refusal> {
        let write = matches!(
            call.op,
            Op::StorePut | Op::StoreUploadPart | Op::StoreUploadFinish | Op::StoreCopy
        );
        let under = self
            .prefix
            .lock()
            .map(|p| !p.is_empty() && call.target.starts_with(p.as_str()))
            .unwrap_or(false);
        if write
            && under
            && self
                .left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        {
            return Err(Refusal {
                message: "503 SlowDown",
                ambiguous: false,
            });
        }
        Ok(Fate::Make)
    }
}

/// A world whose bucket refuses what `refuse` is armed with.
async fn tapped_world(objects: usize, flaky_failures: u32) -> (World, Arc<RefuseUnder>) {
    let mut w = world(objects, flaky_failures, settings()).await;
    let refuse = Arc::new(RefuseUnder::default());
    w.archive_ctx.store = Arc::new(TappedStore {
        inner: w.store.clone(),
        tap: refuse.clone(),
    });
    (w, refuse)
}

/// Ticks and deliveries until the job is in `state` (its phase's tasks not yet delivered).
async fn until(w: &World, id: &str, state: ArchiveState) {
    for _ in 0..30 {
        if w.job(id).await.state == state {
            return;
        }
        tick(&w.archive_ctx, Utc::now()).await.unwrap();
        if w.job(id).await.state == state {
            return;
        }
        w.deliver(false).await;
    }
    panic!("{id} never reached {state}: {:?}", w.job(id).await.history);
}

fn edges(job: &ArchiveJob) -> BTreeSet<Edge> {
    job.history.iter().map(|t| (t.from, t.to)).collect()
}

/// Runs the job to its end and says it ended in `state`; returns the edges it took.
async fn ends(w: &World, id: &str, state: ArchiveState) -> BTreeSet<Edge> {
    w.run(false).await;
    let job = w.job(id).await;
    assert_eq!(job.state, state, "{:?}", job.history);
    edges(&job)
}

#[tokio::test]
async fn the_handlers_drive_every_transition_of_the_archive_table() {
    use ArchiveState::*;
    let mut driven: BTreeSet<Edge> = BTreeSet::new();

    // Completes; a recoverable failure in archiving (its first staged write refused) and one
    // in post-processing (the manifest's write refused) are each retried after their backoff.
    let (w, refuse) = tapped_world(8, 0).await;
    let id = w.create().await;
    until(&w, &id, ActivityArchiving).await;
    refuse.arm(w.archive_ctx.archives().keys.tmp(&id), 1);
    until(&w, &id, PostProcessing).await;
    refuse.arm(w.archive_ctx.archives().keys.staged(&id), 1);
    let seen = ends(&w, &id, Completed).await;
    for edge in [
        (ActivityArchiving, Error),
        (RecoverableError, ActivityArchiving),
        (PostProcessing, Error),
        (RecoverableError, PostProcessing),
    ] {
        assert!(seen.contains(&edge), "{edge:?} not taken: {seen:?}");
    }
    assert!(w
        .verify("mirror", &format!("copies/{id}/"), None)
        .await
        .intact());
    driven.extend(seen);

    // An empty source fails before any phase.
    let w = world(0, 0, settings()).await;
    let id = create(
        &w.archive_ctx,
        ArchiveSource {
            bucket: "products".into(),
            prefix: "nothing-here/".into(),
        },
        vec![dest("s3://mirror/")],
        Utc::now(),
    )
    .await
    .unwrap()
    .id;
    driven.extend(ends(&w, &id, Failed).await);

    // A destination that refuses every write spends the store's retries; once it accepts
    // writes again, the operator's retry re-runs the store and the job completes.
    let w = world(6, 1000, settings()).await;
    let id = w.create().await;
    driven.extend(ends(&w, &id, Failed).await);
    w.buckets.failures.store(0, Ordering::SeqCst);
    assert_eq!(
        steps::retry(&w.archive_ctx, &id, Utc::now()).await.unwrap(),
        Store
    );
    let seen = ends(&w, &id, Completed).await;
    assert!(seen.contains(&(Failed, Store)));
    assert!(w
        .verify("mirror", &format!("copies/{id}/"), None)
        .await
        .intact());
    driven.extend(seen);

    // A source object deleted after the listing: archiving fails for good (S3's 404 is not
    // worth a retry); once it is back, the operator's retry archives again.
    let w = world(6, 0, settings()).await;
    let id = w.create().await;
    until(&w, &id, ActivityArchiving).await;
    let products = w.buckets.inner.bucket("products");
    let kept = products.get("l2/g0002.nc").await.unwrap().unwrap().body;
    products.delete("l2/g0002.nc").await.unwrap();
    driven.extend(ends(&w, &id, Failed).await);
    let job = w.job(&id).await;
    assert_eq!(job.failed_phase, Some(Phase::ActivityArchiving));
    assert!(
        job.failure.as_deref().unwrap_or("").contains("l2/g0002.nc"),
        "{:?}",
        job.failure
    );
    products
        .put("l2/g0002.nc", kept, PutCondition::Overwrite)
        .await
        .unwrap();
    assert_eq!(
        steps::retry(&w.archive_ctx, &id, Utc::now()).await.unwrap(),
        ActivityArchiving
    );
    driven.extend(ends(&w, &id, Completed).await);

    // No signing key: post-processing fails for good and says which setting is missing; with
    // the key configured, the operator's retry signs and the job completes.
    let mut w = world(6, 0, settings()).await;
    let key = w.archive_ctx.signing_key.take();
    let id = w.create().await;
    driven.extend(ends(&w, &id, Failed).await);
    let job = w.job(&id).await;
    assert_eq!(job.failed_phase, Some(Phase::PostProcessing));
    assert_eq!(job.recoverable, Some(false));
    let failure = job.failure.unwrap_or_default();
    assert!(
        failure.contains("GRANARY_ARCHIVE_SIGNING_KEY_PARAMETER"),
        "{failure}"
    );
    w.archive_ctx.signing_key = key;
    assert_eq!(
        steps::retry(&w.archive_ctx, &id, Utc::now()).await.unwrap(),
        PostProcessing
    );
    driven.extend(ends(&w, &id, Completed).await);
    assert!(
        w.verify("vault", &format!("archives/{id}/"), None)
            .await
            .signature_ok
    );

    let table: BTreeSet<Edge> = TRANSITIONS.iter().map(|(f, t, _)| (*f, *t)).collect();
    let never: Vec<&Edge> = table.difference(&driven).collect();
    let outside: Vec<&Edge> = driven.difference(&table).collect();
    assert!(never.is_empty(), "never driven: {never:?}");
    assert!(
        outside.is_empty(),
        "taken but not in the table: {outside:?}"
    );
}
