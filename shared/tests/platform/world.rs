//! The world a scenario runs in: the test stack, each function's configuration as the template gives it, the twins.

use super::*;

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
    pub importer_ctx: Ctx,
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
    w.importer_ctx.config.layout = w.importer_ctx.config.layout.in_campaign(campaign.as_ref());
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
    let importer_ctx = Ctx {
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
        importer_ctx,
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
