//! Archive jobs against the emulator: S3 (granary's bucket, a source bucket, destinations), the
//! archive task queue on SQS, the signing key in SSM. A destination that does not exist yet
//! (recoverable: the retry after it is created succeeds), one that never exists (the retries are
//! spent: failure, handled, cleaned up), and a member corrupted in the staging area before its
//! integrity check (not recoverable).
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use granary::config::{Config, Function};
use granary::contracts::archive::TaskMessage;
use granary::domain::archive::job::{ArchiveState, Phase};
use granary::domain::archive::record::{ArchiveJob, ArchiveSource, Destination};
use granary::handlers::archive::{self, tasks, verify};
use granary::handlers::Ctx;
use granary::ports::PutCondition;

struct Setup {
    s: granary_tests::TestStack,
    archive_ctx: Ctx,
    products: String,
    tag: String,
}

async fn setup(tag: &str, max_retries: &str, backoff_secs: &str) -> Setup {
    let s = granary_tests::stack(tag, 1, &[]).await;
    let tag = granary_tests::unique_name(tag);
    let products = format!("{tag}-products");
    s.clients
        .s3
        .create_bucket()
        .bucket(&products)
        .send()
        .await
        .unwrap();
    for n in 0..7 {
        s.clients
            .s3
            .put_object()
            .bucket(&products)
            .key(format!("l2/g{n}.nc"))
            .body(format!("granule {n} ").repeat(20 + n).into_bytes().into())
            .send()
            .await
            .unwrap();
    }
    let queue = s
        .clients
        .sqs
        .create_queue()
        .queue_name(format!("{tag}-archive-tasks"))
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let parameter = format!("/{tag}/archive-signing-key");
    s.clients
        .ssm
        .put_parameter()
        .name(&parameter)
        .value("7e".repeat(32))
        .r#type(aws_sdk_ssm::types::ParameterType::SecureString)
        .send()
        .await
        .unwrap();
    let vars = [
        ("GRANARY_BUCKET", s.stack.bucket.clone()),
        ("GRANARY_ARCHIVE_TASK_QUEUE_URL", queue),
        ("GRANARY_ARCHIVE_SIGNING_KEY_PARAMETER", parameter),
        ("GRANARY_ARCHIVE_OBJECTS_PER_SHARD", "3".into()),
        ("GRANARY_ARCHIVE_MAX_RETRIES", max_retries.into()),
        ("GRANARY_ARCHIVE_BACKOFF_SECS", backoff_secs.into()),
    ];
    let config = Config::for_sections(Function::ArchiveTask.sections(), |k| {
        vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
    })
    .unwrap();
    let archive_ctx = Ctx::aws_with_signing_key(config, &s.clients).await.unwrap();
    Setup {
        s,
        archive_ctx,
        products,
        tag,
    }
}

impl Setup {
    async fn create(&self, dest: &str) -> String {
        archive::create(
            &self.archive_ctx,
            ArchiveSource {
                bucket: self.products.clone(),
                prefix: "l2/".into(),
            },
            vec![Destination::parse(dest).unwrap()],
            chrono::Utc::now(),
        )
        .await
        .unwrap()
        .id
    }

    /// One tick, then every visible task message. Whether anything happened.
    async fn pass(&self) -> bool {
        let t = archive::tick(&self.archive_ctx, chrono::Utc::now())
            .await
            .unwrap();
        assert_eq!(t.errors, 0, "{t:?}");
        let got = self
            .archive_ctx
            .task_queue
            .receive(10, 60, 0)
            .await
            .unwrap();
        for m in &got {
            let message: TaskMessage = serde_json::from_str(&m.body).unwrap();
            tasks::handle(&self.archive_ctx, &message, chrono::Utc::now())
                .await
                .unwrap();
            self.archive_ctx
                .task_queue
                .delete(&m.receipt_handle)
                .await
                .unwrap();
        }
        t.moved > 0 || t.tasks_sent > 0 || !got.is_empty()
    }

    /// Passes until `until` holds for the job or nothing moves.
    async fn run_until(&self, id: &str, until: impl Fn(&ArchiveJob) -> bool) -> ArchiveJob {
        for _ in 0..40 {
            let busy = self.pass().await;
            let job = self.job(id).await;
            if until(&job) || (!busy && job.state.has_ended()) {
                return job;
            }
        }
        panic!(
            "archive job {id} did not get there: {:?}",
            self.job(id).await.history
        );
    }

    async fn job(&self, id: &str) -> ArchiveJob {
        self.archive_ctx
            .archives()
            .job(id)
            .await
            .unwrap()
            .unwrap()
            .value
    }
}

#[tokio::test]
async fn a_destination_missing_at_first_is_a_recoverable_error_and_the_retry_stores_there() {
    let w = setup("archlate", "2", "1").await;
    let late = format!("{}-late", w.tag);
    let id = w.create(&format!("s3://{late}/archives/")).await;
    let job = w
        .run_until(&id, |j| j.state == ArchiveState::RecoverableError)
        .await;
    assert_eq!(
        job.state,
        ArchiveState::RecoverableError,
        "{:?}",
        job.history
    );
    assert_eq!(job.failed_phase, Some(Phase::Store));
    // The operator creates the bucket; the retry (after its backoff) stores and verifies.
    w.s.clients
        .s3
        .create_bucket()
        .bucket(&late)
        .send()
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let job = w.run_until(&id, |j| j.state.has_ended()).await;
    assert_eq!(job.state, ArchiveState::Completed, "{:?}", job.history);
    assert_eq!(
        job.times(ArchiveState::RecoverableError, ArchiveState::Store),
        1
    );
    let store = granary::wiring::s3_store(&w.s.clients, &late);
    let r = verify::verify(store, &late, &format!("archives/{id}/"), None).await;
    assert!(r.intact() && r.members_checked == 7, "{r:?}");
}

#[tokio::test]
async fn a_destination_that_never_appears_spends_the_retries_and_the_job_fails() {
    let w = setup("archnever", "1", "0").await;
    let id = w.create(&format!("s3://{}-nowhere/a/", w.tag)).await;
    let job = w.run_until(&id, |j| j.state.has_ended()).await;
    use ArchiveState::*;
    assert_eq!(job.state, Failed, "{:?}", job.history);
    assert_eq!(job.times(Store, Error), 2, "the first run and one retry");
    assert_eq!(job.times(Error, Failure), 1);
    assert_eq!(job.times(ErrorHandling, Cleanup), 1);
    assert!(
        job.failure.as_deref().unwrap_or("").contains("nowhere"),
        "{:?}",
        job.failure
    );
    // Temporaries are gone; the staged archive stays for `granary archive retry`.
    let tmp =
        w.s.ctx
            .store
            .list(&w.archive_ctx.archives().keys.tmp(&id))
            .await
            .unwrap();
    assert!(tmp.is_empty());
    let staged =
        w.s.ctx
            .store
            .list(&w.archive_ctx.archives().keys.staged(&id))
            .await
            .unwrap();
    assert!(staged.iter().any(|m| m.key.ends_with("SHA256SUMS.sig")));
}

#[tokio::test]
async fn a_member_corrupted_before_its_integrity_check_fails_for_good() {
    let w = setup("archrot", "3", "0").await;
    let vault = format!("{}-vault", w.tag);
    w.s.clients
        .s3
        .create_bucket()
        .bucket(&vault)
        .send()
        .await
        .unwrap();
    let id = w.create(&format!("s3://{vault}/a/")).await;
    // Until archiving is done and the post-processing task waits on the queue.
    for _ in 0..20 {
        archive::tick(&w.archive_ctx, chrono::Utc::now())
            .await
            .unwrap();
        if w.job(&id).await.state == ArchiveState::PostProcessing {
            break;
        }
        for m in w.archive_ctx.task_queue.receive(10, 60, 0).await.unwrap() {
            let message: TaskMessage = serde_json::from_str(&m.body).unwrap();
            tasks::handle(&w.archive_ctx, &message, chrono::Utc::now())
                .await
                .unwrap();
            w.archive_ctx
                .task_queue
                .delete(&m.receipt_handle)
                .await
                .unwrap();
        }
    }
    assert_eq!(w.job(&id).await.state, ArchiveState::PostProcessing);
    let members =
        w.s.ctx
            .store
            .list(&format!(
                "{}members/",
                w.archive_ctx.archives().keys.staged(&id)
            ))
            .await
            .unwrap();
    w.s.ctx
        .store
        .put(&members[2].key, "rot".into(), PutCondition::Overwrite)
        .await
        .unwrap();
    let job = w.run_until(&id, |j| j.state.has_ended()).await;
    use ArchiveState::*;
    assert_eq!(job.state, Failed, "{:?}", job.history);
    assert_eq!(job.recoverable, Some(false));
    assert_eq!(job.times(Error, RecoverableError), 0, "not retried");
    assert!(job.failure.as_deref().unwrap_or("").contains("integrity"));
    let copies = granary::wiring::s3_store(&w.s.clients, &vault)
        .list("a/")
        .await
        .unwrap();
    assert!(copies.is_empty(), "nothing stored");
}

/// Dies right after the first write of a task record marked done: the write is made and its
/// answer lost, and every call after it is refused (the handler is dead before its fan-in).
struct DieAfterTaskDone {
    dead: std::sync::atomic::AtomicBool,
}

impl granary::adapters::tap::Tap for DieAfterTaskDone {
    fn enter(
        &self,
        call: &granary::adapters::tap::Call<'_>,
    ) -> Result<granary::adapters::tap::Fate, granary::adapters::tap::Refusal> {
        use granary::adapters::tap::{Fate, Op, Refusal};
        use std::sync::atomic::Ordering;
        if self.dead.load(Ordering::SeqCst) {
            return Err(Refusal {
                message: "the handler died",
                ambiguous: false,
            });
        }
        if call.op == Op::StorePut && call.target.contains("/tasks/activity-archiving/") {
            self.dead.store(true, Ordering::SeqCst);
            return Ok(Fate::MakeAndLoseAnswer);
        }
        Ok(Fate::Make)
    }
}

#[tokio::test]
async fn a_task_handler_dying_before_its_fan_in_and_a_duplicate_delivery_complete_the_phase_once() {
    let w = setup("archfanin", "1", "0").await;
    let vault = format!("{}-vault", w.tag);
    w.s.clients
        .s3
        .create_bucket()
        .bucket(&vault)
        .send()
        .await
        .unwrap();
    let id = w.create(&format!("s3://{vault}/a/")).await;
    // Until the archiving tasks are on the queue (7 objects, 3 per shard: 3 tasks).
    for _ in 0..5 {
        archive::tick(&w.archive_ctx, chrono::Utc::now())
            .await
            .unwrap();
    }
    assert_eq!(w.job(&id).await.state, ArchiveState::ActivityArchiving);
    let got = w.archive_ctx.task_queue.receive(10, 30, 1).await.unwrap();
    assert_eq!(got.len(), 3);
    let messages: Vec<TaskMessage> = got
        .iter()
        .map(|m| serde_json::from_str(&m.body).unwrap())
        .collect();
    // The first two run; the last one's handler dies right after recording its task done, so
    // nobody has checked the fan-in with all three done.
    for m in &messages[..2] {
        tasks::handle(&w.archive_ctx, m, chrono::Utc::now())
            .await
            .unwrap();
    }
    let mut dying = w.archive_ctx.clone();
    let tap = std::sync::Arc::new(DieAfterTaskDone {
        dead: Default::default(),
    });
    dying.store = std::sync::Arc::new(granary::adapters::tap::TappedStore {
        inner: w.archive_ctx.store.clone(),
        tap,
    });
    assert!(tasks::handle(&dying, &messages[2], chrono::Utc::now())
        .await
        .is_err());
    assert_eq!(w.job(&id).await.state, ArchiveState::ActivityArchiving);
    // SQS delivers the third message again, twice (it was never deleted): the phase hands on once.
    for _ in 0..2 {
        let out = tasks::handle(&w.archive_ctx, &messages[2], chrono::Utc::now())
            .await
            .unwrap();
        assert!(
            matches!(
                out,
                tasks::TaskOutcome::Duplicate | tasks::TaskOutcome::Stale
            ),
            "{out:?}"
        );
    }
    for m in &got {
        w.archive_ctx
            .task_queue
            .delete(&m.receipt_handle)
            .await
            .unwrap();
    }
    let job = w.run_until(&id, |j| j.state.has_ended()).await;
    assert_eq!(job.state, ArchiveState::Completed, "{:?}", job.history);
    assert_eq!(
        job.times(
            ArchiveState::ActivityArchiving,
            ArchiveState::PostProcessing
        ),
        1
    );
    let store = granary::wiring::s3_store(&w.s.clients, &vault);
    assert!(verify::verify(store, &vault, &format!("a/{id}/"), None)
        .await
        .intact());
}
