//! The crash-point harness: every handler is stopped at each of its external calls in turn — the
//! call never made, or made and its answer lost — and the platform then does what AWS does after
//! a dead invocation (the SQS message comes back once its visibility timeout passes, the schedule
//! fires again, an operator reruns an interrupted command) until nothing moves any more. After
//! each run the promise is audited: no item stranded, no (granule, attempt) submitted twice, every
//! failure that ends an item dead-lettered with a reason, every success logged.
//!
//! Everything runs on the in-memory twins; the handlers are the production ones, and each
//! invocation's S3, SQS and Batch calls pass through one `Faults` (see `adapters::tap::faults`).

//! The platform the handler tests run on: the in-memory twins of S3, SQS and Batch, the
//! production handlers, and what AWS does around them (schedules fire, event sources deliver,
//! visibility timeouts run out, Batch runs jobs and EventBridge delivers their ends). Each Lambda
//! runs with the environment `infra/template.yaml` gives that function, resolved for a test
//! stack, and its calls are recorded in that function's [`AccessLog`] (IAM by use).
#![allow(dead_code)]

pub mod crashes;
pub mod ingest;
pub mod leases;
pub mod spread;

use chrono::Utc;
use granary::adapters::memory::{
    job_state_change, Ending, MemoryJobRunner, MemoryQueue, MemorySource, MemoryStore,
};
use granary::adapters::parquet::{write_inventory, InventoryLayout, InventoryRow};
use granary::adapters::tap::access_log::{AccessLog, AwsAccount};
use granary::adapters::tap::faults::{CrashPoint, FaultCounts, Faults, Interleave};
use granary::adapters::tap::{Call, Fate, Op, Refusal, Tap};
use granary::config::Config;
use granary::domain::batch_event::JobStatus;
use granary::domain::brake::BrakeSettings;
use granary::domain::campaign::Campaign;
use granary::domain::granule::{GranuleId, GranuleProcessingEvent};
use granary::domain::item::{Change, ItemQuery, NewItem};
use granary::domain::lifecycle::ItemState;
use granary::handlers::importer::{self, discover, sweeper, ObjectsExist};
use granary::handlers::redrive::{self, RedriveFilter, RedriveOptions};
use granary::handlers::{feeder, item_sync, monitor, reconciler, requeuer, resume, Ctx};
use granary::ports::{PutCondition, Queue, SourceFile};
use granary_template::{Resolved, Stack, Template};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};

pub const BACKFILL: [&str; 2] = [
    "HLS.S30.T18TYN.2022002T153012.v2.0",
    "HLS.L30.T18TYN.2022001T153012.v2.0",
];

/// Where the importer's files come from in the test stack: an S3 prefix outside granary's bucket,
/// so the template's source grants are exercised.
pub const SOURCE_URL: &str = "s3://granary-test-source/incoming/";

/// The bucket-name patterns the test stack lets archive jobs read from and store to.
pub const ARCHIVE_SOURCES: &str = "granary-test-products-*";
pub const ARCHIVE_DESTINATIONS: &str = "granary-test-vault-*";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    Feeder,
    Discover,
    ImportStep,
    Requeuer,
    MonitorSuccess,
    MonitorFailure,
    Reconciler,
    SweeperProcessing,
    SweeperDownload,
    Revalidate,
    Resume,
    Redrive,
    /// A Spot reclaim: the monitor sends the granule back through the retry queue.
    MonitorRetryable,
    /// Events lost; attempt 1 reclaimed by Spot, attempt 2 succeeds: the reconciler routes the
    /// retry and moves the superseded failure log.
    ReconcilerRetryable,
    /// Events lost and SubmitJob's answer lost: the reconciler finds the job by its name.
    ReconcilerLostAnswer,
    /// The feeder's window submitted, every end's event lost: the reconciler finds the ends
    /// through the window's marker and closes it. One job is still running at the first pass,
    /// so the marker keeps the granule already handled.
    ReconcilerWindow,
    /// As above, but the feeder's run failed after recording the job ids and before the item
    /// records (their writes refused): the reconciler's ends make the records, and the next
    /// run's late creation finds them (a record made PROCESSING after its window closed would sit
    /// there with nothing to find it).
    ReconcilerWindowRecordsLate,
    /// Poison inputs: recorded under rejects/ and dead-lettered, never retried.
    PoisonEvent,
    PoisonRetry,
    PoisonImport,
    PoisonRow,
    /// An item record no code can read, found by the sweeper.
    CorruptRecord,
    /// Every download attempt fails (the source sends less than it listed): uploads are
    /// aborted, the item gives up after its attempts.
    DownloadFails,
    /// Two inventories sharing a granule, fed by one run as two windows (one per inventory),
    /// the second read from the page map the first left in the tracker.
    FeederTwoInventories,
    /// As above with array windows: the first window's array is still running, with no item
    /// records (made at its children's ends), when the second window lists its granule again:
    /// only the first window's open claim says the granule is in flight.
    FeederTwoInventoriesArray,
    /// The backfill with item records off: outcomes are the logs and the DLQ alone.
    FeederRecordsOff,
    /// Every attempt reclaimed by Spot: the requeuer meets the last attempt's retry message and
    /// dead-letters it ("attempts exhausted"), abandoning the item.
    RequeuerExhausted,
    /// Every attempt reclaimed by Spot: the requeuer meets the retry message of the attempt
    /// before the last and submits the last chance to the last-attempt (on-demand) queue, whose
    /// job a takeover must look for there.
    RequeuerLastChance,
    /// Array retries (`GRANARY_ARRAY_RETRIES`): both granules of an array window reclaimed by
    /// Spot; the requeuer parks one's retry (the other's comes in the recovery), and the
    /// feeder's schedule submits both as one window of retries.
    RequeuerParks,
    /// Array retries: both granules' retries parked; the feeder's run submits them as one
    /// window of retries, an array job of two children at attempt 2.
    FeederRetryWindow,
    /// A Batch event parked on the events DLQ is moved back by `granary redrive-events`.
    RedriveEvents,
    /// The feeder's run failed after its window's job ids and before their item records, and
    /// the jobs ended: the monitor meets ends with no record, and the feeder's schedule comes
    /// round only after the reconciler and the sweeper have run twice. The monitor makes the
    /// records at their ends; the feeder's late creation must find them and change nothing.
    MonitorBeforeRecords,
    /// As above, and Spot reclaims every first attempt: the retry is submitted, runs and
    /// succeeds before the feeder's schedule comes round, so every record the backfill loop would
    /// make meets a granule further on than the record says (what chaos found in CI).
    RetryBeforeRecords,
    /// The backfill with array windows: the window is one array job, each child's end is
    /// handled from the window claim, the parent's end routes nothing.
    FeederArray,
    /// As above with every event lost: the reconciler describes each child `<parent>:<index>`
    /// and closes the window.
    ReconcilerArrayWindow,
    /// The array window's children ended: the monitor handles a child's event (its granule read
    /// from the window claim).
    MonitorArrayChild,
    /// A second campaign over the same inventory while the first one's jobs still run: the
    /// unnamed campaign's feeder submitted the window, then the stack was switched to campaign
    /// `v2`, whose feeder (under test) submits the same granules again as its own. Spot reclaims
    /// every first attempt, so both campaigns retry. Each campaign must end with one success
    /// per granule in its own state: v2's takeover never adopts v1's job by name, and v1's ends
    /// and retries are handled in v1's state by a stack that now runs v2.
    CampaignSwitch,
    /// The first campaign's jobs ended with every event lost, then the stack was switched to
    /// `v2`: the reconciler (under test) of a stack running v2 finds v1's ends through v1's
    /// open claims and handles them in v1's state.
    CampaignSwitchReconciled,
    /// The first campaign's feeder claimed its window and died with no job submitted (every
    /// SubmitJob refused), then the stack was switched to `v2` and the claim's lease ran out:
    /// that campaign's feeder never comes back to the window, so the reconciler (under test) of
    /// a stack running v2 takes it over — jobs looked up by name, submitted, records made.
    CampaignSwitchHalfWindow,
    /// Array retries: the unnamed campaign's window reclaimed by Spot and both retries parked,
    /// then the stack switched to `v2` before any feeder run took them: v2's feeder (under
    /// test) takes the unnamed campaign's parked retries as that campaign's window of retries,
    /// with that campaign's tracker (`feed_other_campaigns`), and feeds its own window. Each
    /// campaign must end with one success per granule in its own state, nothing left parked.
    CampaignSwitchParked,
    /// The feeder's window submitted and its jobs running; an operator's `granary cancel`
    /// (under test) holds the feeder, records the cancel and terminates both jobs. Batch ends
    /// them with the cancel's reason, the monitor lists them as cancelled, the operator resumes
    /// them (`granary resume --cancelled`) and releases the feeder: each succeeds at attempt 2.
    Cancel,
    /// As above, the cancel made and the jobs ended: the monitor (under test) meets a cancelled
    /// end and lists it for the operator's resume, neither retrying nor dead-lettering it.
    MonitorCancelled,
    /// As above with the ends' events lost: the reconciler (under test) finds the cancelled
    /// ends through the window's marker and lists them.
    ReconcilerCancelled,
    /// Spot took attempt 1 and its retry message waits when an operator's `granary cancel`
    /// holds the feeder: the requeuer (under test) submits nothing, lists the granule as
    /// cancelled and gives it up; the operator resumes it and it succeeds at attempt 2.
    RequeuerHeldBack,
    /// The feeder's window of two granules both fail in the application, with the job
    /// monitor's brake judging from its first end: the monitor (under test) handles an end and
    /// holds the feeder itself — its hold is the last call of the end's handling.
    MonitorBrakes,
    /// Attempt 1 succeeded and the monitor logged it, but every write of its record was refused
    /// past the SDK's retries, so the event failed the monitor until the redrive policy parked
    /// it; then Batch forgot the job. The sweeper (under test) finds the item PROCESSING past
    /// its time with a job Batch does not know: the timed-out end meets the logged success,
    /// nothing is routed, and the record follows the success to PROCESSED.
    SweeperMeetsLoggedSuccess,
    /// As `ReconcilerArrayWindow`, both children ended, and Batch describes the second in a way
    /// no code can read: the reconciler (under test) keeps the description under rejects/ and
    /// dead-letters that granule with why (its record made at its end, as the monitor's would
    /// be), and handles the other's success.
    ReconcilerUndescribable,
}

/// The campaign the campaign scenarios switch to.
pub const SECOND_CAMPAIGN: &str = "v2";

pub const ALL: [Scenario; 47] = [
    Scenario::Feeder,
    Scenario::Discover,
    Scenario::ImportStep,
    Scenario::Requeuer,
    Scenario::MonitorSuccess,
    Scenario::MonitorFailure,
    Scenario::Reconciler,
    Scenario::SweeperProcessing,
    Scenario::SweeperDownload,
    Scenario::Revalidate,
    Scenario::Resume,
    Scenario::Redrive,
    Scenario::MonitorRetryable,
    Scenario::ReconcilerRetryable,
    Scenario::ReconcilerLostAnswer,
    Scenario::ReconcilerWindow,
    Scenario::ReconcilerWindowRecordsLate,
    Scenario::PoisonEvent,
    Scenario::PoisonRetry,
    Scenario::PoisonImport,
    Scenario::PoisonRow,
    Scenario::CorruptRecord,
    Scenario::DownloadFails,
    Scenario::FeederTwoInventories,
    Scenario::FeederTwoInventoriesArray,
    Scenario::FeederRecordsOff,
    Scenario::RequeuerExhausted,
    Scenario::RequeuerLastChance,
    Scenario::RequeuerParks,
    Scenario::FeederRetryWindow,
    Scenario::RedriveEvents,
    Scenario::MonitorBeforeRecords,
    Scenario::RetryBeforeRecords,
    Scenario::FeederArray,
    Scenario::ReconcilerArrayWindow,
    Scenario::MonitorArrayChild,
    Scenario::CampaignSwitch,
    Scenario::CampaignSwitchReconciled,
    Scenario::CampaignSwitchHalfWindow,
    Scenario::CampaignSwitchParked,
    Scenario::Cancel,
    Scenario::MonitorCancelled,
    Scenario::ReconcilerCancelled,
    Scenario::RequeuerHeldBack,
    Scenario::MonitorBrakes,
    Scenario::SweeperMeetsLoggedSuccess,
    Scenario::ReconcilerUndescribable,
];

/// The inventories of [`Scenario::FeederTwoInventories`]: the second lists a granule of the
/// first again (submitted once) and one of its own.
pub const TWO_INVENTORIES: [[&str; 2]; 2] = [
    BACKFILL,
    [BACKFILL[1], "HLS.S30.T18TYN.2022003T153012.v2.0"],
];

/// A Spot reclaim as Batch reports it.
pub const SPOT: &str = granary::adapters::memory::SPOT_RECLAIM;

/// An inventory row no granule id can be made of.
pub const POISON_ROW: &str = "HLS.S30.T18TYN/../2022003T153012";

/// The stack's Lambda functions, by their logical ids in the template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Function {
    Feeder,
    Monitor,
    Requeuer,
    Discover,
    ImportStep,
    Sweeper,
}

impl Function {
    pub const ALL: [Function; 6] = [
        Function::Feeder,
        Function::Monitor,
        Function::Requeuer,
        Function::Discover,
        Function::ImportStep,
        Function::Sweeper,
    ];

    pub fn logical_id(self) -> &'static str {
        match self {
            Function::Feeder => "QueueFeederFunction",
            Function::Monitor => "JobMonitorFunction",
            Function::Requeuer => "RequeuerFunction",
            Function::Discover => "ImporterDiscoverFunction",
            Function::ImportStep => "ImporterStepFunction",
            Function::Sweeper => "ItemSweeperFunction",
        }
    }

    /// The deployed function this one plays, for the configuration sections it reads.
    pub fn deployed(self) -> granary::config::Function {
        use granary::config::Function as F;
        match self {
            Function::Feeder => F::QueueFeeder,
            Function::Monitor => F::JobMonitor,
            Function::Requeuer => F::Requeuer,
            Function::Discover => F::ImporterDiscover,
            Function::ImportStep => F::ImporterStep,
            Function::Sweeper => F::ItemSweeper,
        }
    }
}

/// The test stack: the template resolved with an S3 source and stand-ins for the parameters
/// that name an account's network and image.
/// The SSM parameter the test stack's ingest dispatcher reads EZID's credentials from.
pub const EZID_CREDENTIALS: &str = "/granary-test/ezid";

pub fn stack() -> &'static (Stack, Resolved) {
    static STACK: OnceLock<(Stack, Resolved)> = OnceLock::new();
    STACK.get_or_init(|| {
        let stack = Stack::new("granary-test")
            .with("SubnetIds", "subnet-1,subnet-2")
            .with("SecurityGroupIds", "sg-1")
            .with(
                "ContainerImage",
                "123456789012.dkr.ecr.us-east-1.amazonaws.com/p:1",
            )
            .with("SourceUrl", SOURCE_URL)
            .with("ArchiveSourceBuckets", ARCHIVE_SOURCES)
            .with("ArchiveDestinationBuckets", ARCHIVE_DESTINATIONS)
            .with(
                "IngestArchiveDestinations",
                "s3://granary-test-vault-ingest/batches/",
            )
            .with("IngestEzidUrl", "https://ezid.example")
            .with("IngestEzidShoulder", "ark:/99999/fk4")
            .with("IngestEzidCredentialsParameter", EZID_CREDENTIALS)
            .with("DownstreamQueueName", "granary-test-archive-intake")
            .with("LastAttemptOnDemand", "true")
            .with("ArrayWindows", "true");
        let template = Template::granary().expect("infra/template.yaml reads");
        let resolved = template.resolve(&stack).expect("the template resolves");
        (stack, resolved)
    })
}

/// Checks `needed` against the role of function `logical_id` in the test stack, both ways;
/// each problem (a call not granted, a grant no call used) is pushed onto `problems`.
pub fn check_function_role(
    logical_id: &str,
    needed: &BTreeSet<granary::adapters::tap::access_log::Access>,
    problems: &mut Vec<String>,
) {
    let (_, resolved) = stack();
    let statements = resolved
        .function(logical_id)
        .and_then(|f| f.statements())
        .unwrap();
    let check = granary_template::check_role(
        &statements,
        needed.iter().map(|a| (a.action, a.resource.as_str())),
    )
    .unwrap();
    for n in check.not_granted {
        problems.push(format!(
            "{logical_id} needs {n} and its role does not grant it"
        ));
    }
    for u in check.unused {
        problems.push(format!("{logical_id} is granted {u} and no call uses it"));
    }
}

pub fn account() -> AwsAccount {
    let (s, _) = stack();
    AwsAccount {
        partition: s.partition.clone(),
        region: s.region.clone(),
        account: s.account.clone(),
    }
}

/// What the harness changes in every function's environment: a smaller retry budget. The
/// leases are the template's: a dead invocation's claim or unrouted failure waits out its lease
/// (time is moved on by `let_leases_run_out` once the platform is quiet, and by expiring
/// visibility timeouts, not by waiting).
const HARNESS: [(&str, &str); 1] = [("GRANARY_MAX_RETRIES", "2")];

/// The configuration a function reads from the environment the template gives it (read once:
/// compiling its patterns is most of a world's cost).
pub fn function_config(f: Function) -> Config {
    static CONFIGS: OnceLock<BTreeMap<Function, Config>> = OnceLock::new();
    CONFIGS.get_or_init(|| {
        Function::ALL
            .into_iter()
            .map(|f| (f, read_config(f)))
            .collect()
    })[&f]
        .clone()
}

/// The environment the template gives `f`, as the harness runs it.
fn function_env(f: Function) -> BTreeMap<String, String> {
    let (_, resolved) = stack();
    let mut env = resolved
        .function(f.logical_id())
        .and_then(|f| f.environment())
        .expect("the function and its environment resolve");
    for (k, v) in HARNESS {
        env.insert(k.to_owned(), v.to_owned());
    }
    env
}

/// What `f` reads at init: only the sections its deployed function reads.
fn read_config(f: Function) -> Config {
    let env = function_env(f);
    Config::for_sections(f.deployed().sections(), |k| env.get(k).cloned())
        .expect("the template's environment is a valid config for the function")
}

/// Every section, from every function's environment: what the world's shared ports are named by.
fn world_config() -> Config {
    let env: BTreeMap<String, String> = Function::ALL.into_iter().flat_map(function_env).collect();
    Config::from_lookup(|k| env.get(k).cloned()).expect("the template's environments are valid")
}

pub struct World {
    pub imp: Ctx,
    pub jobs: Arc<MemoryJobRunner>,
    pub import: Arc<MemoryQueue>,
    pub retry: Arc<MemoryQueue>,
    pub dlq: Arc<MemoryQueue>,
    pub events: Arc<MemoryQueue>,
    /// Where the events queue's redrive policy parks events (`granary redrive-events` reads it).
    pub events_dlq: Arc<MemoryQueue>,
    /// The granules the scenario's inventories list (each must end with a record, or with item
    /// records off, a success log).
    pub listed: Vec<&'static str>,
    /// Whether item records are kept (`GRANARY_ITEM_RECORDS`).
    pub records: bool,
    /// Attempts whose job fails in the application (exit code 1: dead-lettered).
    pub failing_attempts: BTreeSet<u32>,
    /// Attempts whose instance Spot reclaims (retried by granary).
    pub spot_attempts: BTreeSet<u32>,
    /// Final events EventBridge never delivers: only the reconciler learns those ends.
    pub lose_events: bool,
    /// An operator resumes the attempts `granary cancel` ended and releases the feeder, in the
    /// settling rounds.
    pub resume_cancelled: bool,
    /// The job monitor's brake, when a scenario sets it (the template's judges from 50 ends on,
    /// more than any scenario has).
    pub brake: Option<BrakeSettings>,
    /// Whether the feeder's schedule fires (the backfill scenarios).
    pub feeder: bool,
    /// The settling round from which the feeder's schedule fires (the rounds before it, the
    /// event sources and the reconciler and sweeper run without it).
    pub feeder_from_round: u32,
    /// Whether the importer-discover schedule fires.
    pub discover: bool,
    /// Whether the scenario feeds a poison input (it must end under rejects/ and on the DLQ).
    pub poison: bool,
    /// What each function's calls needed.
    pub logs: BTreeMap<Function, Arc<AccessLog>>,
    /// Whether the feeder submits its windows as array jobs (`GRANARY_ARRAY_WINDOWS`).
    pub array: bool,
    /// Whether the requeuer parks retries for the feeder's windows of retries
    /// (`GRANARY_ARRAY_RETRIES`).
    pub array_retries: bool,
    /// The campaign the stack runs now (`GRANARY_CAMPAIGN`): every function's context is in it
    /// ([`World::as_fn`]); a campaign scenario switches it after the first campaign's work.
    pub campaign: std::sync::Mutex<Option<Campaign>>,
}

/// [`world`] with the stack running `campaign` from the start (its state under
/// `campaigns/<name>/`, `ctx(w)` included).
pub fn world_in(scenario: Scenario, campaign: Option<Campaign>) -> World {
    let mut w = world(scenario);
    w.imp.config.layout = w.imp.config.layout.in_campaign(campaign.as_ref());
    w.switch_to(campaign);
    w
}

pub fn world(scenario: Scenario) -> World {
    // Every run of a scenario makes the same choices (where a pass starts), so a recovery
    // crashed at its call k meets the same calls as the plain recovery that counted them.
    granary::retry::reseed_jitter(0x5eed);
    let config = world_config();
    let store = Arc::new(MemoryStore::new());
    // ListJobs shows a new job only once time has passed (`let_leases_run_out`).
    // Asked about the queues every function's ListJobs asks about (a last-attempt queue too).
    let other_queues = config
        .jobs
        .as_ref()
        .map_or(Vec::new(), |j| j.other_queues());
    let jobs = Arc::new(
        MemoryJobRunner::new(JobStatus::Running)
            .listing_lags()
            .listing_also(other_queues),
    );
    let (retry_url, dlq_url) = config.queue_names();
    let retry = Arc::new(MemoryQueue::new(&retry_url));
    let dlq = Arc::new(MemoryQueue::new(&dlq_url));
    let import_url = config
        .importer
        .import_queue_url
        .clone()
        .expect("the template sets the import queue");
    let import = Arc::new(MemoryQueue::new(&import_url));
    let mut config = config;
    config.layout.track_items = scenario != Scenario::FeederRecordsOff;
    let body = bytes::Bytes::from_static(b"a raw granule file");
    // A source whose listing promises more than it sends: every download attempt is aborted.
    let listed_size = match scenario {
        Scenario::DownloadFails => body.len() as u64 + 100,
        _ => body.len() as u64,
    };
    let file = SourceFile {
        url: format!("{SOURCE_URL}granule-a.bin"),
        name: "granule-a.bin".into(),
        size: Some(listed_size),
        last_modified: Some(Utc::now()),
        version: None,
        digest: None,
    };
    let imp = Ctx {
        store: store.clone(),
        jobs: jobs.clone(),
        retry_queue: retry.clone(),
        failure_dlq: dlq.clone(),
        source: Some(Arc::new(MemorySource {
            files: vec![(file, body)],
        })),
        import_queue: Some(import.clone()),
        prerequisites: Arc::new(ObjectsExist { templates: vec![] }),
        ..Ctx::in_memory(config)
    };
    let logs = Function::ALL
        .into_iter()
        .map(|f| {
            let log = AccessLog::new(&function_config(f), account());
            (f, Arc::new(log))
        })
        .collect();
    World {
        imp,
        jobs,
        import,
        retry,
        dlq,
        events: Arc::new(MemoryQueue::new("batch-events")),
        events_dlq: Arc::new(MemoryQueue::new("batch-events-dlq")),
        listed: match scenario {
            Scenario::FeederTwoInventories | Scenario::FeederTwoInventoriesArray => {
                let mut all: Vec<&str> = TWO_INVENTORIES.concat();
                all.sort_unstable();
                all.dedup();
                all
            }
            Scenario::Feeder
            | Scenario::FeederRecordsOff
            | Scenario::PoisonRow
            | Scenario::ReconcilerWindow
            | Scenario::ReconcilerWindowRecordsLate
            | Scenario::MonitorBeforeRecords
            | Scenario::RetryBeforeRecords
            | Scenario::FeederArray
            | Scenario::ReconcilerArrayWindow
            | Scenario::ReconcilerUndescribable
            | Scenario::MonitorArrayChild
            | Scenario::CampaignSwitch
            | Scenario::CampaignSwitchReconciled
            | Scenario::CampaignSwitchHalfWindow
            | Scenario::RequeuerParks
            | Scenario::FeederRetryWindow
            | Scenario::CampaignSwitchParked => BACKFILL.to_vec(),
            _ => Vec::new(),
        },
        records: scenario != Scenario::FeederRecordsOff,
        failing_attempts: match scenario {
            Scenario::MonitorFailure
            | Scenario::Resume
            | Scenario::Redrive
            | Scenario::MonitorBrakes => BTreeSet::from([1]),
            _ => BTreeSet::new(),
        },
        spot_attempts: match scenario {
            Scenario::MonitorRetryable
            | Scenario::ReconcilerRetryable
            | Scenario::RequeuerHeldBack
            | Scenario::RetryBeforeRecords
            | Scenario::CampaignSwitch
            | Scenario::RequeuerParks
            | Scenario::FeederRetryWindow
            | Scenario::CampaignSwitchParked => BTreeSet::from([1]),
            Scenario::RequeuerExhausted | Scenario::RequeuerLastChance => {
                (1..=function_config(Function::Requeuer).max_attempt()).collect()
            }
            _ => BTreeSet::new(),
        },
        lose_events: matches!(
            scenario,
            Scenario::Reconciler
                | Scenario::ReconcilerRetryable
                | Scenario::ReconcilerLostAnswer
                | Scenario::ReconcilerWindow
                | Scenario::ReconcilerWindowRecordsLate
                | Scenario::ReconcilerArrayWindow
                | Scenario::ReconcilerUndescribable
                | Scenario::CampaignSwitchReconciled
                | Scenario::ReconcilerCancelled
        ),
        feeder: matches!(
            scenario,
            Scenario::Feeder
                | Scenario::FeederTwoInventories
                | Scenario::FeederTwoInventoriesArray
                | Scenario::FeederRecordsOff
                | Scenario::PoisonRow
                | Scenario::ReconcilerWindow
                | Scenario::ReconcilerWindowRecordsLate
                | Scenario::MonitorBeforeRecords
                | Scenario::RetryBeforeRecords
                | Scenario::FeederArray
                | Scenario::ReconcilerArrayWindow
                | Scenario::ReconcilerUndescribable
                | Scenario::MonitorArrayChild
                | Scenario::CampaignSwitch
                | Scenario::CampaignSwitchReconciled
                | Scenario::CampaignSwitchHalfWindow
                | Scenario::Cancel
                | Scenario::MonitorCancelled
                | Scenario::ReconcilerCancelled
                | Scenario::MonitorBrakes
                | Scenario::RequeuerParks
                | Scenario::FeederRetryWindow
                | Scenario::CampaignSwitchParked
        ),
        brake: (scenario == Scenario::MonitorBrakes).then(|| BrakeSettings {
            window: 4,
            min_ends: 1,
            ..BrakeSettings::default()
        }),
        resume_cancelled: matches!(
            scenario,
            Scenario::Cancel
                | Scenario::MonitorCancelled
                | Scenario::ReconcilerCancelled
                | Scenario::RequeuerHeldBack
        ),
        feeder_from_round: match scenario {
            Scenario::MonitorBeforeRecords => 2,
            Scenario::RetryBeforeRecords => 4,
            _ => 0,
        },
        discover: scenario == Scenario::Discover,
        poison: matches!(
            scenario,
            Scenario::PoisonEvent
                | Scenario::PoisonRetry
                | Scenario::PoisonImport
                | Scenario::PoisonRow
                | Scenario::CorruptRecord
                | Scenario::ReconcilerUndescribable
        ),
        logs,
        array: matches!(
            scenario,
            Scenario::FeederArray
                | Scenario::FeederTwoInventoriesArray
                | Scenario::ReconcilerArrayWindow
                | Scenario::ReconcilerUndescribable
                | Scenario::MonitorArrayChild
                | Scenario::RequeuerParks
                | Scenario::FeederRetryWindow
                | Scenario::CampaignSwitchParked
        ),
        array_retries: matches!(
            scenario,
            Scenario::RequeuerParks | Scenario::FeederRetryWindow | Scenario::CampaignSwitchParked
        ),
        campaign: std::sync::Mutex::new(None),
    }
}

impl World {
    /// The importer (and its context) as function `f` runs it: `f`'s configuration, its calls
    /// recorded in `f`'s access log.
    /// The world as function `f` sees it: its own configuration, and — like the deployed
    /// function — no job runner or queues unless it reads their sections (the ports refuse).
    pub fn as_fn(&self, f: Function) -> Ctx {
        let mut imp = self.imp.clone();
        imp.config = function_config(f);
        imp.config.layout = imp.config.layout.in_campaign(self.campaign().as_ref());
        imp.config.layout.track_items = self.records;
        imp.config.feeder.array_windows = self.array;
        if let Some(jobs) = imp.config.jobs.as_mut() {
            jobs.array_retries = self.array_retries;
        }
        if let Some(brake) = self.brake {
            imp.config.brake = brake;
        }
        if imp.config.jobs.is_none() {
            imp.jobs = Arc::new(granary::adapters::unset::UnsetJobRunner);
        }
        if imp.config.queues.is_none() {
            imp.retry_queue = Arc::new(granary::adapters::unset::UnsetQueue {
                var: "GRANARY_RETRY_QUEUE_URL",
            });
            imp.failure_dlq = Arc::new(granary::adapters::unset::UnsetQueue {
                var: "GRANARY_FAILURE_DLQ_URL",
            });
        }
        if imp.config.importer.import_queue_url.is_none() {
            imp.import_queue = None;
        }
        imp.tapped(self.logs[&f].clone() as Arc<dyn Tap>)
    }
}

impl World {
    /// The campaign the stack runs now.
    pub fn campaign(&self) -> Option<Campaign> {
        self.campaign
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The stack is redeployed with `GRANARY_CAMPAIGN` naming `campaign`.
    pub fn switch_to(&self, campaign: Option<Campaign>) {
        *self.campaign.lock().unwrap_or_else(|p| p.into_inner()) = campaign;
    }

    /// Every campaign whose state the world holds: the one it started in, and the one it runs now.
    pub fn campaigns(&self) -> Vec<Option<Campaign>> {
        let mut all = vec![self.imp.config.layout.campaign.clone()];
        let now = self.campaign();
        if !all.contains(&now) {
            all.push(now);
        }
        all
    }
}

pub fn ctx(w: &World) -> &Ctx {
    &w.imp
}

/// Handles every visible message of `queue` with `handle`; deletes the ones handled (as Lambda
/// does with records not reported failed). Returns how many it handled.
pub async fn drain<F, Fut, T, E>(queue: &MemoryQueue, handle: F) -> u64
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let (handled, failed) = drain_counted(queue, handle).await;
    handled + failed
}

/// Like [`drain`], counting the messages handled and those whose handling failed (back on the
/// queue once their visibility timeout passes) apart.
pub async fn drain_counted<F, Fut, T, E>(queue: &MemoryQueue, handle: F) -> (u64, u64)
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let (mut handled, mut failed) = (0, 0);
    loop {
        let got = queue.receive(10, 30, 0).await.unwrap();
        if got.is_empty() {
            return (handled, failed);
        }
        for m in got {
            if handle(m.body.clone()).await.is_ok() {
                queue.delete(&m.receipt_handle).await.unwrap();
                handled += 1;
            } else {
                failed += 1;
            }
        }
    }
}

/// Batch runs every RUNNING job to its end and, unless events are lost, EventBridge delivers the
/// final event to the events queue.
pub async fn finish_jobs(w: &World) -> u64 {
    let mut finished = 0;
    for (request, job) in w.jobs.running() {
        let attempt: u32 = request.parameters["attempt"].parse().unwrap();
        let ending = if w.spot_attempts.contains(&attempt) {
            Ending::SpotReclaimed
        } else if w.failing_attempts.contains(&attempt) {
            Ending::Exited(1)
        } else {
            Ending::Succeeded
        };
        let detail = w.jobs.end(&job.job_id, ending).unwrap();
        announce_end(w, &detail).await;
        finished += 1;
    }
    // Jobs TerminateJob ended since: Batch sends their events as any other end's.
    for detail in w.jobs.take_terminated() {
        announce_end(w, &detail).await;
        finished += 1;
    }
    // An array's parent ends once its children have; its event routes nothing.
    for detail in w.jobs.end_array_parents() {
        announce_end(w, &detail).await;
    }
    finished
}

/// EventBridge delivers a job's state change to the events queue, unless events are lost.
async fn announce_end(w: &World, detail: &serde_json::Value) {
    if !w.lose_events {
        let event = job_state_change(detail);
        w.events
            .send(granary::ports::OutgoingMessage::new(event.to_string()))
            .await
            .unwrap();
    }
}

/// What the platform does to the recovery: the invocations that run after the one under test,
/// redoing what it left.
#[derive(Debug, Clone, Copy, Default)]
pub struct Recovery {
    /// The recovery's Nth external call, counted across its invocations in the order they run,
    /// kills the invocation making it (a second crash, inside the recovery).
    pub crash: Option<CrashPoint>,
    /// Every message is delivered twice at once and every scheduled function fires twice,
    /// overlapping, their calls interleaved one by one (SQS delivers at least once; EventBridge
    /// schedules invoke at least once).
    pub twice: bool,
}

/// What the recovery did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Recovered {
    /// External calls the recovery's invocations made.
    pub calls: u64,
    /// Whether the recovery's crash point was reached.
    pub crashed: bool,
}

/// The recovery's faults across its invocations: its crash counted as [`crashes::Crashes`]
/// counts every run's.
struct RecoveryFaults {
    plan: Recovery,
    crashes: crashes::Crashes,
}

/// One invocation's result and whether it lived.
type Ran<T, E> = (Result<T, E>, bool);

impl RecoveryFaults {
    fn new(plan: Recovery) -> Self {
        Self {
            plan,
            crashes: crashes::Crashes::new(plan.crash.as_slice()),
        }
    }

    fn report(&self) -> Recovered {
        Recovered {
            calls: self.crashes.calls(),
            crashed: self.crashes.reached() > 0,
        }
    }

    fn invocation(&self) -> Arc<Faults> {
        self.crashes.invocation()
    }

    /// Whether the invocation lived.
    fn ended(&self, faults: &Faults) -> bool {
        self.crashes.ended(faults)
    }

    /// Runs `call` as one invocation of `imp`'s function (two overlapping ones when the plan
    /// says twice).
    async fn invoke<T, E, Fut>(&self, imp: &Ctx, call: impl Fn(Ctx) -> Fut) -> Vec<Ran<T, E>>
    where
        Fut: std::future::Future<Output = Result<T, E>>,
    {
        let one = || async {
            let faults = self.invocation();
            let mut tapped = imp.with_faults(&faults);
            if self.plan.twice {
                tapped = tapped.tapped(Arc::new(Interleave));
            }
            let result = call(tapped).await;
            let lived = self.ended(&faults);
            (result, lived)
        };
        if self.plan.twice {
            let (a, b) = tokio::join!(one(), one());
            vec![a, b]
        } else {
            vec![one().await]
        }
    }

    /// A scheduled function's run(s): what the living ones returned. A run that died, or (when
    /// runs overlap) failed, is not fatal: the schedule fires again. Otherwise a failure is.
    async fn scheduled<T, E: std::fmt::Display, Fut>(
        &self,
        what: &str,
        imp: &Ctx,
        call: impl Fn(Ctx) -> Fut,
        failed: &mut u64,
    ) -> Result<Vec<T>, String>
    where
        Fut: std::future::Future<Output = Result<T, E>>,
    {
        let mut out = Vec::new();
        for (result, lived) in self.invoke(imp, call).await {
            match result {
                Ok(v) if lived => out.push(v),
                Err(e) if lived && !self.plan.twice => return Err(format!("{what}: {e}")),
                _ => *failed += 1,
            }
        }
        Ok(out)
    }

    /// Delivers every visible message of `queue` to `handle` (twice at once when the plan says
    /// so); deletes the ones a living invocation handled. Returns (handled, failed).
    async fn deliver<T, E, Fut>(
        &self,
        queue: &MemoryQueue,
        imp: &Ctx,
        handle: impl Fn(Ctx, String) -> Fut,
    ) -> (u64, u64)
    where
        Fut: std::future::Future<Output = Result<T, E>>,
    {
        let (mut handled, mut failed) = (0, 0);
        loop {
            let got = queue.receive(10, 30, 0).await.unwrap();
            if got.is_empty() {
                return (handled, failed);
            }
            for m in got {
                let runs = self.invoke(imp, |i| handle(i, m.body.clone())).await;
                if runs.iter().any(|(r, lived)| *lived && r.is_ok()) {
                    queue.delete(&m.receipt_handle).await.unwrap();
                    handled += 1;
                } else {
                    failed += 1;
                }
            }
        }
    }
}

/// The platform, fault-free, until nothing moves: the feeder's schedule, the import, retry and
/// events queues' event sources, Batch, and the sweeper's schedule (reconciler, then sweeper) a
/// day later. Between rounds every visibility timeout runs out, so what a dead invocation left
/// behind is delivered again.
pub async fn settle(w: &World) -> Result<(), String> {
    settle_with(w, Recovery::default()).await.map(|_| ())
}

/// [`settle`], with the recovery's invocations crashing or doubled as `plan` says.
pub async fn settle_with(w: &World, plan: Recovery) -> Result<Recovered, String> {
    let rf = &RecoveryFaults::new(plan);
    let feeder_fn = &w.as_fn(Function::Feeder);
    let discover_fn = &w.as_fn(Function::Discover);
    let step_fn = &w.as_fn(Function::ImportStep);
    let requeuer_fn = &w.as_fn(Function::Requeuer);
    let monitor_fn = &w.as_fn(Function::Monitor);
    let sweeper_fn = &w.as_fn(Function::Sweeper);
    for round in 0..60 {
        // The visibility timeout of whatever a dead invocation held has passed.
        for q in [&w.import, &w.retry, &w.events, &w.dlq] {
            q.expire_visibility();
        }
        let mut activity = 0;
        // Runs and deliveries that failed or died are tried again next round, but are not
        // progress (a delivery waiting on another's lease fails until the lease runs out).
        let mut failed = 0;
        let feeder_waits = round < w.feeder_from_round;
        if w.feeder && !feeder_waits {
            let event = || feeder::FeederEvent {
                granule_submit_count: 10,
            };
            for run in rf
                .scheduled(
                    "feeder",
                    feeder_fn,
                    |i| async move { feeder::run(&i, event()).await },
                    &mut failed,
                )
                .await?
            {
                activity += run.submitted + run.retries_submitted + run.stale_parked;
            }
        }
        if w.discover {
            for run in rf
                .scheduled(
                    "discover",
                    discover_fn,
                    |i| async move { discover::discover(&i).await },
                    &mut failed,
                )
                .await?
            {
                activity += run.new;
            }
        }
        for (done, refused) in [
            rf.deliver(&w.import, step_fn, |i, b| async move {
                importer::handle_message(&i, &b).await
            })
            .await,
            rf.deliver(&w.retry, requeuer_fn, |i, b| async move {
                requeuer::handle_message(&i, &b).await
            })
            .await,
        ] {
            activity += done;
            failed += refused;
        }
        activity += finish_jobs(w).await;
        let (done, refused) = rf
            .deliver(&w.events, monitor_fn, |i, b| async move {
                monitor::handle_message(&i, &b).await
            })
            .await;
        activity += done;
        failed += refused;
        if w.resume_cancelled {
            // Boxed: the settling loop's own future stays the size it was.
            activity += Box::pin(operator_resumes_cancelled(w, rf, &mut failed)).await?;
        }
        let later = Utc::now() + chrono::Duration::days(1);
        for r in rf
            .scheduled(
                "reconciler",
                sweeper_fn,
                |i| async move { reconciler::reconcile(&i, later).await },
                &mut failed,
            )
            .await?
        {
            activity += r.recovered + r.closed + r.taken_over;
        }
        for s in rf
            .scheduled(
                "sweeper",
                sweeper_fn,
                |i| async move { sweeper::sweep(&i, later).await },
                &mut failed,
            )
            .await?
        {
            activity += s.retried + s.gave_up + s.finished_by_batch + s.stale_markers;
        }
        if activity == 0 {
            if let_leases_run_out(w).await || failed > 0 || feeder_waits {
                continue;
            }
            return Ok(rf.report());
        }
    }
    Err("the platform did not settle in 60 rounds".into())
}

/// The operator's `granary cancel` of every open attempt, run (boxed: see `run_world`).
async fn operator_cancels(
    c: &Ctx,
    now: chrono::DateTime<Utc>,
    entropy: u32,
) -> Result<granary::handlers::cancel::CancelSummary, granary::handlers::HandlerError> {
    let request = operator_cancel();
    Box::pin(granary::handlers::cancel::cancel(
        c,
        &request,
        now,
        entropy,
        |_, _| {},
    ))
    .await
}

/// The operator's `granary cancel` of every open attempt, as the cancel scenarios ask it.
fn operator_cancel() -> granary::handlers::cancel::CancelRequest {
    granary::handlers::cancel::CancelRequest {
        filter: Default::default(),
        reason: "wrong container image".into(),
        by: "operator".into(),
        dry_run: false,
        hold_feeder: true,
        per_second: 10_000.0,
    }
}

/// The operator, once `granary cancel`'s ends are listed: `granary resume --cancelled` (a run
/// that died is run again next round), then `granary release`. Returns the activity.
async fn operator_resumes_cancelled(
    w: &World,
    rf: &RecoveryFaults,
    failed: &mut u64,
) -> Result<u64, String> {
    let mut activity = 0;
    for resumed in rf
        .scheduled(
            "resume-cancelled",
            &w.imp,
            |i| async move { granary::handlers::cancel::resume_cancelled(&i, None, false).await },
            failed,
        )
        .await?
    {
        activity += resumed.len() as u64;
    }
    let hold = &w.imp.config.layout.hold_key;
    if w.imp.store.get(hold).await.unwrap().is_some() {
        w.imp.store.delete(hold).await.unwrap();
        activity += 1;
    }
    Ok(activity)
}

/// Time passes for a quiet platform that still holds leases (a dead invocation's claim without
/// its job ids, a failure logged and not routed): each such lease is made as old as the
/// template's lease (`GRANARY_CLAIM_LEASE_SECS`, `GRANARY_ROUTE_LEASE_SECS`), as that much time
/// would make it, so the next delivery or run takes the work over. Nothing else moves the
/// clock: while a lease runs, the work waits, as it does in AWS. Whether any lease was aged.
async fn let_leases_run_out(w: &World) -> bool {
    // The time that ages a lease also lets ListJobs show the jobs submitted meanwhile.
    let listed = w.jobs.catch_up_listing();
    let mut aged = false;
    for campaign in w.campaigns() {
        aged |= let_campaign_leases_run_out(&ctx(w).in_campaign(campaign.as_ref())).await;
    }
    listed || aged
}

/// [`let_leases_run_out`] in one campaign's state.
async fn let_campaign_leases_run_out(c: &Ctx) -> bool {
    let claim_lease = function_config(Function::Feeder).leases.claim_lease;
    let route_lease = function_config(Function::Monitor).leases.route_lease;
    let layout = &c.config.layout;
    // A window claim until its jobs are recorded; a granule's claim until its job is.
    let claims = leases::age_leases(
        c.store.as_ref(),
        &layout.claim_prefix,
        "claimed_at",
        claim_lease,
        |v, _| match v.get("granules") {
            Some(granules) => {
                let ids = v["job_ids"].as_array().cloned().unwrap_or_default();
                ids.len() < granules.as_array().map_or(0, Vec::len)
                    || ids.iter().any(serde_json::Value::is_null)
            }
            None => v["job_id"].is_null(),
        },
    )
    .await;
    // A failure logged and not yet routed. With item records no log is marked routed (the
    // record past the attempt is the mark), so every failure log is aged once: a routed one's
    // age changes nothing, as its redelivery finds the record past the attempt.
    let logs = leases::age_leases(
        c.store.as_ref(),
        &layout.log_prefix,
        "logged_at",
        route_lease,
        |v, key| {
            key.contains("outcome=failure/")
                && v["routed_at"].is_null()
                && v["superseded"].is_null()
        },
    )
    .await;
    claims || logs
}

pub async fn only_item(w: &World) -> GranuleId {
    let items = ctx(w).items().find(&ItemQuery::default()).await.unwrap();
    assert_eq!(items.len(), 1, "{items:?}");
    items[0].id.clone()
}

async fn run_to_the_retry_of(w: &World, attempt: u32) {
    let max = function_config(Function::Requeuer).max_attempt();
    let requeuer_fn = w.as_fn(Function::Requeuer);
    let monitor_fn = &w.as_fn(Function::Monitor);
    for _ in 0..4 * max {
        for m in w.retry.receive(10, 30, 0).await.unwrap() {
            let ended: GranuleProcessingEvent = serde_json::from_str(&m.body).unwrap();
            if ended.attempt == attempt {
                w.retry.expire_visibility();
                return;
            }
            requeuer::handle_message(&requeuer_fn, &m.body)
                .await
                .unwrap();
            w.retry.delete(&m.receipt_handle).await.unwrap();
        }
        finish_jobs(w).await;
        drain(&w.events, |b| async move {
            monitor::handle_message(monitor_fn, &b).await
        })
        .await;
    }
    panic!("the retry message of attempt {attempt} never came");
}

/// Brings the world to the moment just before the invocation under test.
pub async fn prepare(w: &World, scenario: Scenario) {
    let c = ctx(w);
    use Scenario::*;
    match scenario {
        FeederTwoInventories | FeederTwoInventoriesArray => {
            for (n, granules) in TWO_INVENTORIES.iter().enumerate() {
                let rows: Vec<InventoryRow> = granules
                    .iter()
                    .map(|id| InventoryRow {
                        granule_id: (*id).to_owned(),
                        start_datetime: "2022-01-01T15:30:12Z".into(),
                    })
                    .collect();
                let bytes = write_inventory(&rows, &InventoryLayout::granary()).unwrap();
                let key = format!("{}{:04}.parquet", c.config.layout.inventory_prefix, n + 1);
                c.store
                    .put(&key, bytes, PutCondition::Overwrite)
                    .await
                    .unwrap();
            }
        }
        Feeder
        | FeederRecordsOff
        | PoisonRow
        | ReconcilerWindow
        | ReconcilerWindowRecordsLate
        | MonitorBeforeRecords
        | RetryBeforeRecords
        | FeederArray
        | ReconcilerArrayWindow
        | ReconcilerUndescribable
        | MonitorArrayChild
        | CampaignSwitch
        | CampaignSwitchReconciled
        | CampaignSwitchHalfWindow
        | Cancel
        | MonitorCancelled
        | ReconcilerCancelled
        | MonitorBrakes
        | RequeuerParks
        | FeederRetryWindow
        | CampaignSwitchParked => {
            let poison = (scenario == PoisonRow).then_some(POISON_ROW);
            let rows: Vec<InventoryRow> = BACKFILL
                .iter()
                .chain(poison.iter())
                .map(|id| InventoryRow {
                    granule_id: (*id).to_owned(),
                    start_datetime: "2022-01-01T15:30:12Z".into(),
                })
                .collect();
            let bytes = write_inventory(&rows, &InventoryLayout::granary()).unwrap();
            let key = format!("{}0001.parquet", c.config.layout.inventory_prefix);
            c.store
                .put(&key, bytes, PutCondition::Overwrite)
                .await
                .unwrap();
            if scenario == Feeder {
                // One granule was already known: the importer found it, made its record READY
                // and handed it to processing (a retry message for the requeuer). The feeder
                // lists it too and submits nothing for it: it is submitted once, by the requeuer.
                let id = GranuleId::parse(BACKFILL[1]).unwrap();
                c.items()
                    .create(
                        NewItem::ready(id.clone(), "known before the inventory", None),
                        "t",
                    )
                    .await
                    .unwrap();
                let handed = granary::contracts::messages::RetryMessage::ended(id, 0)
                    .of_campaign(c.campaign().cloned())
                    .to_message(&granary::contracts::messages::Notice::new(
                        granary::contracts::messages::Outcome::Ready,
                        "admitted for processing",
                    ))
                    .unwrap();
                c.retry_queue.send(handed).await.unwrap();
            }
            if matches!(
                scenario,
                MonitorArrayChild
                    | ReconcilerWindow
                    | ReconcilerArrayWindow
                    | ReconcilerUndescribable
                    | CampaignSwitch
                    | CampaignSwitchReconciled
                    | Cancel
                    | MonitorCancelled
                    | ReconcilerCancelled
                    | MonitorBrakes
                    | RequeuerParks
                    | FeederRetryWindow
                    | CampaignSwitchParked
            ) {
                let fed = feeder::run(
                    &w.as_fn(Function::Feeder),
                    feeder::FeederEvent {
                        granule_submit_count: 10,
                    },
                )
                .await
                .unwrap();
                assert_eq!(fed.submitted, BACKFILL.len() as u64);
            }
            if scenario == MonitorBrakes {
                assert_eq!(finish_jobs(w).await, BACKFILL.len() as u64);
            }
            if matches!(scenario, MonitorCancelled | ReconcilerCancelled) {
                let s = operator_cancels(&w.imp, Utc::now(), 1).await.unwrap();
                assert_eq!(s.terminated, BACKFILL.len() as u64);
                assert_eq!(finish_jobs(w).await, BACKFILL.len() as u64);
            }
            if scenario == MonitorArrayChild {
                assert_eq!(w.jobs.submitted().len(), 1, "the window is one array job");
                assert_eq!(finish_jobs(w).await, BACKFILL.len() as u64);
            }
            if matches!(
                scenario,
                RequeuerParks | FeederRetryWindow | CampaignSwitchParked
            ) {
                // Both children reclaimed, both ends handled: a retry message each.
                assert_eq!(finish_jobs(w).await, BACKFILL.len() as u64);
                let monitor_fn = &w.as_fn(Function::Monitor);
                drain(&w.events, |b| async move {
                    monitor::handle_message(monitor_fn, &b).await
                })
                .await;
                assert_eq!(w.retry.messages().len(), BACKFILL.len());
            }
            if matches!(scenario, FeederRetryWindow | CampaignSwitchParked) {
                let requeuer_fn = &w.as_fn(Function::Requeuer);
                drain(&w.retry, |b| async move {
                    requeuer::handle_message(requeuer_fn, &b).await
                })
                .await;
                let parked =
                    granary::domain::layout::claims::parked_prefix(&c.config.layout.claim_prefix);
                assert_eq!(c.store.list(&parked).await.unwrap().len(), BACKFILL.len());
                assert_eq!(w.jobs.submitted().len(), 1, "parked: nothing submitted yet");
            }
            if scenario == CampaignSwitchReconciled {
                // Every end's event is lost.
                assert_eq!(finish_jobs(w).await, BACKFILL.len() as u64);
            }
            if scenario == ReconcilerUndescribable {
                // Every end's event is lost, and Batch describes the second child with a job
                // name that is a number (no JobDetail).
                assert_eq!(w.jobs.submitted().len(), 1, "the window is one array job");
                let child = w
                    .jobs
                    .running()
                    .into_iter()
                    .map(|(_, job)| job.job_id)
                    .find(|id| id.ends_with(":1"))
                    .unwrap();
                assert_eq!(finish_jobs(w).await, BACKFILL.len() as u64);
                let unreadable =
                    serde_json::json!({"jobId": child, "jobName": 7, "status": "SUCCEEDED"});
                w.jobs.finish(&child, JobStatus::Succeeded, unreadable);
            }
            if scenario == CampaignSwitchHalfWindow {
                // Every SubmitJob refused: the window is claimed and marked open, no job exists.
                let refused = w
                    .as_fn(Function::Feeder)
                    .tapped(Arc::new(RefuseSubmitJob) as Arc<dyn Tap>);
                let _ = feeder::run(
                    &refused,
                    feeder::FeederEvent {
                        granule_submit_count: 10,
                    },
                )
                .await;
                assert!(w.jobs.submitted().is_empty());
            }
            if matches!(
                scenario,
                CampaignSwitch
                    | CampaignSwitchReconciled
                    | CampaignSwitchHalfWindow
                    | CampaignSwitchParked
            ) {
                w.switch_to(Campaign::parse(SECOND_CAMPAIGN).ok());
            }
            if scenario == CampaignSwitchHalfWindow {
                // The run released its claim when Batch refused it (or its lease has run out
                // by the time the reconciler looks); its window is open with no job.
                let_leases_run_out(w).await;
                let open = c
                    .store
                    .list(&c.config.layout.open_claim_prefix)
                    .await
                    .unwrap();
                assert_eq!(open.len(), 1, "{open:?}");
            }
            if matches!(scenario, ReconcilerWindow | ReconcilerArrayWindow) {
                // One job ends now; the other is still running at the reconciler's first pass.
                let (request, job) = w.jobs.running().into_iter().next().unwrap();
                assert_eq!(request.parameters["attempt"], "1");
                w.jobs.end(&job.job_id, Ending::Succeeded).unwrap();
            }
            if matches!(
                scenario,
                ReconcilerWindowRecordsLate | MonitorBeforeRecords | RetryBeforeRecords
            ) {
                let feeder = w
                    .as_fn(Function::Feeder)
                    .tapped(Arc::new(RefuseItemRecords));
                let fed = feeder::run(
                    &feeder,
                    feeder::FeederEvent {
                        granule_submit_count: 10,
                    },
                )
                .await;
                assert!(
                    matches!(fed, Err(granary::handlers::HandlerError::Stalled { .. })),
                    "{fed:?}"
                );
                assert_eq!(w.jobs.submitted().len(), BACKFILL.len());
                finish_jobs(w).await;
            }
        }
        Discover => {}
        PoisonEvent => {
            poison(
                &w.events,
                "{\"detail-type\": \"Batch Job State Change\", \"detail\": 7}",
            )
            .await
        }
        PoisonRetry => poison(&w.retry, "{\"granule_id\": [\"not\", \"an id\"]}").await,
        PoisonImport => poison(&w.import, "{\"item_id\": 42}").await,
        SweeperProcessing | CorruptRecord => {
            // PROCESSING with a job Batch does not know, past its timeout.
            let id = GranuleId::parse("lost-job-item").unwrap();
            c.items()
                .create(NewItem::ready(id.clone(), "t", None), "t")
                .await
                .unwrap();
            let event = GranuleProcessingEvent {
                granule_id: id,
                attempt: 1,
            };
            item_sync::submitted(c, &event, "no-such-job", None, "t")
                .await
                .unwrap();
            if scenario == CorruptRecord {
                let key = format!("{}lost-job-item.json", c.config.layout.item_prefixes.items);
                assert!(c.store.get(&key).await.unwrap().is_some(), "{key}");
                c.store
                    .put(
                        &key,
                        bytes::Bytes::from_static(b"{\"id\": tru"),
                        PutCondition::Overwrite,
                    )
                    .await
                    .unwrap();
            }
        }
        _ => {
            discover::discover(&w.as_fn(Function::Discover))
                .await
                .unwrap();
            if matches!(scenario, ImportStep | DownloadFails) {
                return;
            }
            if scenario == SweeperDownload {
                // A download whose Lambda timed out again and again: its message went to the
                // import queue's dead-letter queue, the item is left DOWNLOADING.
                let id = only_item(w).await;
                for m in w.import.receive(10, 30, 0).await.unwrap() {
                    w.import.delete(&m.receipt_handle).await.unwrap();
                }
                c.items()
                    .advance(&id, "t", |r| {
                        (r.state == ItemState::Discovered)
                            .then(|| Change::to(ItemState::Downloading, "download attempt 1"))
                    })
                    .await
                    .unwrap();
                return;
            }
            let step_fn = w.as_fn(Function::ImportStep);
            let step_fn = &step_fn;
            drain(&w.import, |b| async move {
                importer::handle_message(step_fn, &b).await
            })
            .await;
            if scenario == Requeuer {
                return;
            }
            if scenario == RequeuerExhausted {
                run_to_the_retry_of(w, function_config(Function::Requeuer).max_attempt()).await;
                return;
            }
            if scenario == RequeuerLastChance {
                let max = function_config(Function::Requeuer).max_attempt();
                run_to_the_retry_of(w, max - 1).await;
                return;
            }
            let requeuer_fn = w.as_fn(Function::Requeuer);
            let requeuer_fn = &requeuer_fn;
            if scenario == ReconcilerLostAnswer {
                // SubmitJob is made and its answer lost; the retry message stays in flight
                // (the invocation died), so the reconciler is the first to look for the job.
                let lose = Arc::new(LoseSubmitAnswer) as Arc<dyn Tap>;
                let lossy = requeuer_fn.tapped(lose);
                let m = w.retry.receive(1, 30, 0).await.unwrap();
                assert_eq!(m.len(), 1);
                assert!(requeuer::handle_message(&lossy, &m[0].body).await.is_err());
                finish_jobs(w).await;
                return;
            }
            drain(&w.retry, |b| async move {
                requeuer::handle_message(requeuer_fn, &b).await
            })
            .await;
            finish_jobs(w).await;
            if scenario == SweeperMeetsLoggedSuccess {
                let refused = w
                    .as_fn(Function::Monitor)
                    .tapped(Arc::new(RefuseItemRecords));
                let m = w.events.receive(1, 30, 0).await.unwrap();
                assert_eq!(m.len(), 1);
                assert!(monitor::handle_message(&refused, &m[0].body).await.is_err());
                // It failed the monitor five times: the redrive policy parked it.
                w.events_dlq
                    .send(granary::ports::OutgoingMessage::new(m[0].body.clone()))
                    .await
                    .unwrap();
                w.events.delete(&m[0].receipt_handle).await.unwrap();
                let id = only_item(w).await;
                let record = c.items().get(&id).await.unwrap().unwrap().value;
                assert_eq!(record.state, ItemState::Processing, "{record:?}");
                // Batch keeps an ended job for days, not for ever.
                w.jobs.forget(record.job_id.as_deref().unwrap());
                return;
            }
            if scenario == RequeuerHeldBack {
                // The Spot end is handled (its retry message waits), then the operator cancels:
                // nothing is open to terminate, the hold names the cancel.
                let monitor_fn = &w.as_fn(Function::Monitor);
                drain(&w.events, |b| async move {
                    monitor::handle_message(monitor_fn, &b).await
                })
                .await;
                assert_eq!(w.retry.messages().len(), 1);
                let s = operator_cancels(&w.imp, Utc::now(), 1).await.unwrap();
                assert_eq!((s.terminated, s.held), (0, true));
                return;
            }
            if scenario == RedriveEvents {
                // The event failed the monitor five times: the redrive policy parked it.
                for m in w.events.receive(10, 30, 0).await.unwrap() {
                    w.events_dlq
                        .send(granary::ports::OutgoingMessage::new(m.body.clone()))
                        .await
                        .unwrap();
                    w.events.delete(&m.receipt_handle).await.unwrap();
                }
                assert_eq!(w.events_dlq.messages().len(), 1);
                return;
            }
            if matches!(
                scenario,
                MonitorSuccess
                    | MonitorFailure
                    | MonitorRetryable
                    | Reconciler
                    | ReconcilerRetryable
            ) {
                return;
            }
            settle(w).await.unwrap();
            if scenario == Revalidate {
                // The stored file went bad after processing: re-validation fails it.
                let record = c.items().get(&only_item(w).await).await.unwrap().unwrap();
                let key = record.value.stored_key.clone().unwrap();
                c.store
                    .put(
                        &key,
                        bytes::Bytes::from_static(b"damaged"),
                        PutCondition::Overwrite,
                    )
                    .await
                    .unwrap();
                // In the campaign whose item it is, as `granary revalidate` sends it.
                let message = granary::contracts::messages::ImportMessage {
                    item_id: record.value.id.clone(),
                    step: Some(granary::handlers::importer::Step::Revalidate),
                    resume: false,
                    campaign: c.campaign().cloned(),
                };
                w.import.send(message.to_message().unwrap()).await.unwrap();
            }
        }
    }
}

/// Runs the invocation under test with its external calls passing through `faults`, and does what
/// the platform does with its answer (deletes the message it handled, if it lived).
pub async fn act(w: &World, scenario: Scenario, faults: &Arc<Faults>) {
    use Scenario::*;
    let function = match scenario {
        Feeder
        | FeederTwoInventories
        | FeederTwoInventoriesArray
        | FeederRecordsOff
        | PoisonRow
        | FeederArray
        | CampaignSwitch
        | FeederRetryWindow
        | CampaignSwitchParked => Some(Function::Feeder),
        Discover => Some(Function::Discover),
        ImportStep | Revalidate | PoisonImport | DownloadFails => Some(Function::ImportStep),
        Requeuer | PoisonRetry | RequeuerExhausted | RequeuerLastChance | RequeuerHeldBack
        | RequeuerParks => Some(Function::Requeuer),
        MonitorSuccess | MonitorFailure | MonitorRetryable | PoisonEvent | MonitorBeforeRecords
        | RetryBeforeRecords | MonitorArrayChild | MonitorCancelled | MonitorBrakes => {
            Some(Function::Monitor)
        }
        Reconciler
        | ReconcilerRetryable
        | ReconcilerLostAnswer
        | ReconcilerWindow
        | ReconcilerWindowRecordsLate
        | ReconcilerArrayWindow
        | ReconcilerUndescribable
        | CampaignSwitchReconciled
        | CampaignSwitchHalfWindow
        | ReconcilerCancelled
        | SweeperProcessing
        | SweeperDownload
        | SweeperMeetsLoggedSuccess
        | CorruptRecord => Some(Function::Sweeper),
        // Operator commands: run with the operator's credentials, not a function's role.
        Resume | Redrive | RedriveEvents | Cancel => None,
    };
    let imp = match function {
        Some(f) => w.as_fn(f).with_faults(faults),
        None => w.imp.with_faults(faults),
    };
    let c = &imp;
    let later = Utc::now() + chrono::Duration::days(1);
    let take = |q: Arc<MemoryQueue>| async move {
        let got = q.receive(1, 30, 0).await.unwrap();
        assert_eq!(
            got.len(),
            1,
            "{scenario:?}: the scenario's message is not there"
        );
        got.into_iter().next().unwrap()
    };
    let (queue, message) = match scenario {
        Feeder
        | FeederTwoInventories
        | FeederTwoInventoriesArray
        | FeederRecordsOff
        | PoisonRow
        | FeederArray
        | CampaignSwitch
        | FeederRetryWindow
        | CampaignSwitchParked => {
            // Three rows: the first inventory's two, then one of the second (a second window,
            // its file opened and the rest of it mapped for the next run).
            let count = if matches!(scenario, FeederTwoInventories | FeederTwoInventoriesArray) {
                3
            } else {
                10
            };
            let _ = feeder::run(
                c,
                feeder::FeederEvent {
                    granule_submit_count: count,
                },
            )
            .await;
            return;
        }
        RedriveEvents => {
            let opts = RedriveOptions {
                per_second: 10_000.0,
                visibility_secs: 30,
                ..RedriveOptions::default()
            };
            let events_dlq = granary::adapters::tap::TappedQueue {
                inner: w.events_dlq.clone(),
                tap: faults.clone(),
            };
            let events = granary::adapters::tap::TappedQueue {
                inner: w.events.clone(),
                tap: faults.clone(),
            };
            let run = redrive::redrive_events(&events_dlq, &events, &opts, &|_| {}).await;
            if run.is_err() || faults.crashed() {
                // An operator reruns a command that died.
                w.events_dlq.expire_visibility();
                redrive::redrive_events(w.events_dlq.as_ref(), w.events.as_ref(), &opts, &|_| {})
                    .await
                    .unwrap();
            }
            return;
        }
        Reconciler
        | ReconcilerRetryable
        | ReconcilerLostAnswer
        | ReconcilerWindow
        | ReconcilerWindowRecordsLate
        | ReconcilerArrayWindow
        | ReconcilerUndescribable
        | CampaignSwitchReconciled
        | CampaignSwitchHalfWindow
        | ReconcilerCancelled => {
            // The pass runs a day later: ListJobs shows every job by then.
            w.jobs.catch_up_listing();
            let _ = reconciler::reconcile(c, later).await;
            return;
        }
        Discover => {
            let _ = discover::discover(&imp).await;
            return;
        }
        SweeperProcessing | SweeperDownload | SweeperMeetsLoggedSuccess | CorruptRecord => {
            let _ = sweeper::sweep(&imp, later).await;
            return;
        }
        Cancel => {
            let now = Utc::now();
            let run = operator_cancels(&imp, now, 1).await;
            if run.is_err() || faults.crashed() {
                // An operator reruns a command that died (a second cancel, its own id).
                operator_cancels(&w.imp, now, 2).await.unwrap();
            }
            return;
        }
        Resume => {
            let id = only_item(w).await;
            if resume::resume(&imp, std::slice::from_ref(&id), false)
                .await
                .is_err()
                || faults.crashed()
            {
                // An operator reruns a command that died.
                resume::resume(&w.imp, &[id], false).await.unwrap();
            }
            return;
        }
        Redrive => {
            let opts = RedriveOptions {
                per_second: 10_000.0,
                visibility_secs: 30,
                ..RedriveOptions::default()
            };
            let run = redrive::redrive(
                c.failure_dlq.as_ref(),
                c.retry_queue.as_ref(),
                &RedriveFilter::default(),
                &opts,
                &|_| {},
            )
            .await;
            if run.is_err() || faults.crashed() {
                w.dlq.expire_visibility();
                redrive::redrive(
                    w.dlq.as_ref(),
                    w.retry.as_ref(),
                    &RedriveFilter::default(),
                    &opts,
                    &|_| {},
                )
                .await
                .unwrap();
            }
            return;
        }
        ImportStep | Revalidate | PoisonImport | DownloadFails => {
            (w.import.clone(), take(w.import.clone()).await)
        }
        Requeuer | PoisonRetry | RequeuerExhausted | RequeuerLastChance | RequeuerHeldBack
        | RequeuerParks => (w.retry.clone(), take(w.retry.clone()).await),
        MonitorSuccess | MonitorFailure | MonitorRetryable | PoisonEvent | MonitorBeforeRecords
        | RetryBeforeRecords | MonitorArrayChild | MonitorCancelled | MonitorBrakes => {
            (w.events.clone(), take(w.events.clone()).await)
        }
    };
    let ok = match scenario {
        ImportStep | Revalidate | PoisonImport | DownloadFails => {
            importer::handle_message(&imp, &message.body).await.is_ok()
        }
        Requeuer | PoisonRetry | RequeuerExhausted | RequeuerLastChance | RequeuerHeldBack
        | RequeuerParks => requeuer::handle_message(c, &message.body).await.is_ok(),
        _ => monitor::handle_message(c, &message.body).await.is_ok(),
    };
    if ok && !faults.crashed() {
        queue.delete(&message.receipt_handle).await.unwrap();
    }
}

/// One run of a scenario: the world prepared, the invocation under test made with `crash` (or
/// none), then the platform left to settle. Returns the world, whether the invocation crashed,
/// how many external calls it made, and how settling went.
pub async fn run(
    scenario: Scenario,
    crash: Option<CrashPoint>,
) -> (World, bool, u64, Result<(), String>) {
    let (w, crashed, calls, settled) = run_with(scenario, crash, Recovery::default()).await;
    (w, crashed, calls, settled.map(|_| ()))
}

/// [`run`], with the recovery crashed or doubled as `recovery` says.
pub async fn run_with(
    scenario: Scenario,
    crash: Option<CrashPoint>,
    recovery: Recovery,
) -> (World, bool, u64, Result<Recovered, String>) {
    run_world(world(scenario), scenario, crash, recovery).await
}

/// [`run`] with the stack running `campaign` from the start.
pub async fn run_in(
    scenario: Scenario,
    campaign: Option<Campaign>,
    crash: Option<CrashPoint>,
) -> (World, bool, u64, Result<(), String>) {
    let w = world_in(scenario, campaign);
    let (w, crashed, calls, settled) = run_world(w, scenario, crash, Recovery::default()).await;
    (w, crashed, calls, settled.map(|_| ()))
}

async fn run_world(
    w: World,
    scenario: Scenario,
    crash: Option<CrashPoint>,
    recovery: Recovery,
) -> (World, bool, u64, Result<Recovered, String>) {
    // Each phase boxed: a test's runtime polls its future on the test thread's stack (2 MiB),
    // and these debug-build futures, nested by value, would not fit there.
    Box::pin(prepare(&w, scenario)).await;
    let faults = Faults::new(crash, 0.0, 0, Arc::new(FaultCounts::default()));
    Box::pin(act(&w, scenario, &faults)).await;
    let settled = Box::pin(settle_with(&w, recovery)).await;
    (w, faults.crashed(), faults.calls(), settled)
}

async fn poison(queue: &MemoryQueue, body: &str) {
    queue
        .send(granary::ports::OutgoingMessage::new(body))
        .await
        .unwrap();
}

/// Refuses every write of an item record or its history (as S3 would past the SDK's retries).
struct RefuseItemRecords;

impl Tap for RefuseItemRecords {
    fn enter(&self, call: &Call<'_>) -> Result<Fate, Refusal> {
        // In any campaign's state (a named one's keys are under campaigns/<name>/).
        let record = ["items/", "history/"]
            .iter()
            .any(|p| call.target.starts_with(p) || call.target.contains(&format!("/{p}")));
        if call.op == Op::StorePut && record {
            Err(Refusal {
                message: "refused: slow down",
                ambiguous: false,
            })
        } else {
            Ok(Fate::Make)
        }
    }
}

/// Refuses every SubmitJob (as Batch would past the SDK's retries), unambiguously.
struct RefuseSubmitJob;

impl Tap for RefuseSubmitJob {
    fn enter(&self, call: &Call<'_>) -> Result<Fate, Refusal> {
        if call.op == Op::JobSubmit {
            Err(Refusal {
                message: "refused: too many requests",
                ambiguous: false,
            })
        } else {
            Ok(Fate::Make)
        }
    }
}

/// Lets SubmitJob happen and loses its answer (the invocation died waiting for it).
struct LoseSubmitAnswer;

impl Tap for LoseSubmitAnswer {
    fn enter(&self, call: &Call<'_>) -> Result<Fate, Refusal> {
        Ok(if call.op == Op::JobSubmit {
            Fate::MakeAndLoseAnswer
        } else {
            Fate::Make
        })
    }
}
