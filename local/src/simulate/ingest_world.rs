//! The ingest simulation's world: granary's bucket, Batch, the depositors' servers, the
//! identifier service and the queues, all in memory on the virtual clock; the batches, their
//! objects and each one's fate, drawn from the seed; and what Batch, EventBridge and an
//! operator do as time passes.

use super::ingest::IngestSimSpec;
use anyhow::{Context, Result};
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use bytes::Bytes;
use granary::adapters::memory::{
    MemoryEventBus, MemoryJobRunner, MemoryMinter, MemoryQueue, MemoryRemote, MemoryStore,
};
use granary::config::{Config, Function};
use granary::domain::batch_event::JobStatus;
use granary::domain::ingest::index::BatchId;
use granary::domain::ingest::manifest::ManifestKind;
use granary::domain::ingest::record::Submission;
use granary::handlers::Ctx;
use granary::ports::{ObjectStore, PutCondition};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The HTTP client's timeout (`GRANARY_INGEST_TIMEOUT_SECS`, the template's 600).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(600);
/// Processing attempts a job gets (`GRANARY_MAX_RETRIES` + 1).
pub const PROCESSING_ATTEMPTS: u32 = 3;
/// The depositors' servers the objects are spread over.
const SERVERS: u64 = 10;

/// The size of the world.
pub struct WorldShape {
    pub seed: u64,
    pub batches: usize,
    pub objects: usize,
}

impl WorldShape {
    pub fn of(spec: &IngestSimSpec) -> Self {
        Self {
            seed: spec.seed,
            batches: spec.batches,
            objects: spec.objects,
        }
    }
}

/// What the seed made of one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectFate {
    /// Its bytes arrive altered: the digest cannot match.
    pub altered: bool,
    /// Its processing application always fails.
    pub poisoned: bool,
    /// Its server never answers within the client's timeout.
    pub server_hangs: bool,
}

impl ObjectFate {
    /// Whether the plan lets it complete: nothing in its way.
    pub fn completes(&self) -> bool {
        !self.altered && !self.poisoned && !self.server_hangs
    }
}

pub struct IngestWorld {
    pub(super) seed: u64,
    pub store: Arc<MemoryStore>,
    pub jobs: Arc<MemoryJobRunner>,
    pub remote: Arc<MemoryRemote>,
    pub minter: Arc<MemoryMinter>,
    pub dlq: Arc<MemoryQueue>,
    /// Batch's events on their way to the job monitor.
    pub events: Arc<MemoryQueue>,
    /// The dispatcher's and ingest-submit's context, and the job monitor's.
    pub ctx: Ctx,
    pub monitor_ctx: Ctx,
    /// Each batch's objects' fates, by the batch's place in the submissions.
    pub fates: Vec<Vec<ObjectFate>>,
    /// Submissions not yet sent, with when.
    pub(super) submissions: Vec<(Instant, SqsEvent)>,
    /// Processing jobs seen running, and when each ends.
    pub(super) job_ends: BTreeMap<(Instant, String), ()>,
    pub(super) seen_jobs: BTreeSet<String>,
    /// Events on their way, by when they reach the queue.
    pub(super) on_the_way: BTreeMap<(Instant, u64), String>,
    pub(super) put: u64,
    pub events_lost: u64,
    /// The operator's hold of the second batch: when it is held and released.
    pub(super) hold_at: Instant,
    pub(super) release_at: Instant,
    pub(super) held: bool,
    pub(super) released: bool,
    /// EZID loses its answers (mints, the caller times out) from then, for EZID_OUTAGE.
    pub(super) ezid_outage_at: Instant,
    /// Jobs the operator resolved after a lost mint answer, whose batches want an update report.
    pub(super) resolved: BTreeSet<String>,
    pub(super) listing_caught_up: Instant,
    pub(super) looked_at: Instant,
}

/// How long EZID loses its answers once in a run, and how far ListJobs lags.
pub const EZID_OUTAGE: Duration = Duration::from_secs(10 * 60);
pub const LISTING_LAG: Duration = Duration::from_secs(10 * 60);

/// A stable hash of the seed and some text (the fault plan's: a run replays).
pub(super) fn draw(seed: u64, what: &str) -> u64 {
    crate::fault_plan::stable_hash(seed, what.as_bytes())
}

/// A draw in [0, 1).
pub(super) fn unit(seed: u64, what: &str) -> f64 {
    crate::fault_plan::unit(draw(seed, what))
}

/// How long server `k` takes to answer: most in under a second, some in minutes, one in twenty
/// never within the client's timeout.
fn server_delay(seed: u64, k: u64) -> Duration {
    let u = unit(seed, &format!("server {k}"));
    let spread = unit(seed, &format!("server {k} spread"));
    let (least, most) = match u {
        u if u < 0.60 => (0.02, 0.5),
        u if u < 0.85 => (2.0, 60.0),
        u if u < 0.95 => (120.0, 280.0),
        _ => (3_600.0, 3_600.0),
    };
    Duration::from_secs_f64(least + spread * (most - least))
}

fn config(f: Function, bucket_only: bool) -> Result<Config> {
    Config::for_sections(f.sections(), |k| match k {
        "GRANARY_BUCKET" => Some("bucket".into()),
        "GRANARY_RETRY_QUEUE_URL" => Some("retry".into()),
        "GRANARY_FAILURE_DLQ_URL" => Some("dlq".into()),
        "GRANARY_FUNCTION_TIMEOUT_SECS" if !bucket_only => Some("900".into()),
        "GRANARY_MAX_RETRIES" => Some((PROCESSING_ATTEMPTS - 1).to_string()),
        "GRANARY_JOB_QUEUE" => Some("q".into()),
        "GRANARY_JOB_DEFINITION" => Some("d".into()),
        "GRANARY_INGEST_TIMEOUT_SECS" => Some(REQUEST_TIMEOUT.as_secs().to_string()),
        "GRANARY_INGEST_DOWNLOAD_ATTEMPTS" | "GRANARY_INGEST_CALLBACK_ATTEMPTS" => Some("3".into()),
        "GRANARY_INGEST_EZID_URL" => Some("https://ezid.example".into()),
        "GRANARY_INGEST_EZID_SHOULDER" => Some("ark:/99999/fk4".into()),
        _ => None,
    })
    .context("the simulation's configuration")
}

fn md5_hex(body: &[u8]) -> String {
    use md5::{Digest, Md5};
    format!("{:x}", Md5::digest(body))
}

impl IngestWorld {
    pub async fn new(shape: &WorldShape) -> Result<Self> {
        let store = Arc::new(MemoryStore::new());
        let remote = Arc::new(MemoryRemote::default());
        remote.time_out_after(REQUEST_TIMEOUT);
        for k in 0..SERVERS {
            remote.slow(
                &format!("https://depositor-{k}.example/cb"),
                server_delay(shape.seed, k),
            );
        }
        // ListJobs lags (Batch promises no read-after-write for it): a job is listed by its
        // name only once the platform catches the listing up, every LISTING_LAG.
        let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running).listing_lags());
        let minter = Arc::new(MemoryMinter::default());
        let dlq = Arc::new(MemoryQueue::new("dlq"));
        let ctx = Ctx {
            store: store.clone(),
            jobs: jobs.clone(),
            failure_dlq: dlq.clone(),
            remote: remote.clone(),
            bus: Arc::new(MemoryEventBus::default()),
            minter: Some(minter.clone()),
            ..Ctx::in_memory(config(Function::IngestDispatcher, false)?)
        };
        let monitor_ctx = Ctx {
            store: store.clone(),
            jobs: Arc::new(granary::adapters::unset::UnsetJobRunner),
            failure_dlq: dlq.clone(),
            ..Ctx::in_memory(config(Function::JobMonitor, true)?)
        };
        let start = Instant::now();
        let mut world = Self {
            seed: shape.seed,
            store,
            jobs,
            remote,
            minter,
            dlq,
            events: Arc::new(MemoryQueue::new("events")),
            ctx,
            monitor_ctx,
            fates: Vec::new(),
            submissions: Vec::new(),
            job_ends: BTreeMap::new(),
            seen_jobs: BTreeSet::new(),
            on_the_way: BTreeMap::new(),
            put: 0,
            events_lost: 0,
            hold_at: start + Duration::from_secs(90 * 60),
            release_at: start + Duration::from_secs(150 * 60),
            held: false,
            released: shape.batches < 2,
            ezid_outage_at: start + Duration::from_secs(100 * 60),
            resolved: BTreeSet::new(),
            listing_caught_up: start,
            looked_at: start,
        };
        for b in 0..shape.batches {
            let at = start + Duration::from_secs(b as u64 * 40 * 60);
            world.add_batch(b, shape.objects, at).await?;
        }
        world.held = shape.batches < 2;
        Ok(world)
    }

    /// Batch `b`: its objects on their servers, its manifest in the bucket, its submission
    /// sent at `at`.
    async fn add_batch(&mut self, b: usize, objects: usize, at: Instant) -> Result<()> {
        let seed = self.seed;
        let mut manifest = String::from("#%checkm_0.7\n#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileName | mrt:localIdentifier\n");
        let mut fates = Vec::with_capacity(objects);
        for n in 0..objects {
            let k = draw(seed, &format!("b{b} o{n} server")) % SERVERS;
            let url = format!("https://depositor-{k}.example/b{b}/o{n}.dat");
            let body = format!("batch {b} object {n} ").repeat(20 + n % 50);
            let fate = ObjectFate {
                altered: unit(seed, &format!("b{b} o{n} altered")) < 0.03,
                poisoned: unit(seed, &format!("b{b} o{n} poisoned")) < 0.03,
                server_hangs: server_delay(seed, k) > REQUEST_TIMEOUT,
            };
            let served = if fate.altered {
                body.to_uppercase()
            } else {
                body.clone()
            };
            self.remote.serve(&url, Bytes::from(served));
            self.remote.slow(&url, server_delay(seed, k));
            manifest.push_str(&format!(
                "{url} | md5 | {} | {} | o{n}.dat | b{b}-o{n}\n",
                md5_hex(body.as_bytes()),
                body.len()
            ));
            fates.push(fate);
        }
        self.fates.push(fates);
        let key = self.ctx.ingest().keys.manifest(&format!("b{b}.checkm"));
        self.store
            .put(&key, Bytes::from(manifest), PutCondition::Overwrite)
            .await?;
        let k = draw(seed, &format!("b{b} callback")) % SERVERS;
        let submission = Submission {
            collection: "maps".into(),
            manifest_url: format!("s3://bucket/{key}"),
            kind: ManifestKind::Files,
            priority: 5,
            callback: Some(format!("https://depositor-{k}.example/cb")),
            profile: None,
            submitter: "sim".into(),
            deposit: Default::default(),
        };
        let mut m = SqsMessage::default();
        m.message_id = Some(format!("submission-{b}"));
        m.body = Some(serde_json::to_string(&submission)?);
        let sent = granary::clock::now() + (at - Instant::now());
        m.attributes
            .insert("SentTimestamp".into(), sent.timestamp_millis().to_string());
        let mut event = SqsEvent::default();
        event.records = vec![m];
        self.submissions.push((at, event));
        Ok(())
    }

    /// The submissions whose time has come.
    pub fn submissions_due(&mut self) -> Vec<SqsEvent> {
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.submissions)
            .into_iter()
            .partition(|(at, _)| *at <= now);
        self.submissions = later;
        due.into_iter().map(|(_, e)| e).collect()
    }

    /// The batches submitted so far, by id.
    pub async fn batch_ids(&self) -> Result<Vec<BatchId>> {
        let mut out = Vec::new();
        for m in self.store.list("ingest/batches/").await? {
            let id = m
                .key
                .strip_prefix("ingest/batches/")
                .and_then(|k| k.strip_suffix(".json"));
            if let Some(id) = id.and_then(|i| BatchId::parse(i).ok()) {
                out.push(id);
            }
        }
        Ok(out)
    }

    /// Which batch (by its place in the submissions) and object an ingest job is, from its id
    /// (`<batch>-j<n>`, n from 1 in manifest order) and its batch's manifest (`b<place>.checkm`).
    pub async fn object_of(&self, ingest_job: &str) -> Result<Option<(usize, usize)>> {
        let Some((batch, n)) = ingest_job.rsplit_once("-j") else {
            return Ok(None);
        };
        let (Ok(n), Ok(batch)) = (n.parse::<usize>(), BatchId::parse(batch)) else {
            return Ok(None);
        };
        Ok(self.place_of(&batch).await?.zip(n.checked_sub(1)))
    }

    /// A batch's place in the submissions, from the manifest its record names.
    pub async fn place_of(&self, batch: &BatchId) -> Result<Option<usize>> {
        let Some(record) = self.ctx.ingest().batch(batch).await? else {
            return Ok(None);
        };
        let url = record.value.submission.manifest_url;
        Ok(url.rsplit('/').next().and_then(|name| {
            name.strip_prefix('b')?
                .strip_suffix(".checkm")?
                .parse()
                .ok()
        }))
    }

    /// Whether batch `b`'s callback server never answers within the client's timeout.
    pub fn callback_hangs(&self, b: usize) -> bool {
        let k = draw(self.seed, &format!("b{b} callback")) % SERVERS;
        server_delay(self.seed, k) > REQUEST_TIMEOUT
    }
}
