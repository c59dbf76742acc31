//! Every setting granary reads, in one place: its variable, its default, who changes it and
//! why, the part of granary that reads it, and the template parameter that sets it.
//! docs/configuration.md is generated from this table (`granary settings --markdown`), and
//! `shared/tests/settings_catalogue.rs` fails when the code reads a variable the table lacks,
//! when a template parameter is missing from it, or when the generated page is stale.

use super::Section;

/// Who sets a variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An operator's choice, through its template parameter (or the shell, for the CLI).
    Choice,
    /// The stack sets it from its own resources; the CLI reads it from the shell (the stack's
    /// outputs). Nobody chooses it.
    Wiring,
    /// The stack sets a value granary measured or derived; tests and local runs change it.
    Fixed,
}

/// One variable granary reads.
#[derive(Debug)]
pub struct Setting {
    pub var: &'static str,
    pub kind: Kind,
    /// The value when unset, as an operator would write it ("" when unset means "none").
    pub default: &'static str,
    /// What the stack sets where it differs from `default` (a choice's template default, a
    /// fixed value the template writes).
    pub stack: Option<&'static str>,
    /// Who changes it, and why.
    pub why: &'static str,
    /// The configuration sections that read it (the functions reading them read it).
    pub sections: &'static [Section],
    /// The commands that read it, besides the section's functions.
    pub commands: &'static [&'static str],
    /// Where it takes effect, when that is narrower than the functions that read its section.
    pub used_by: &'static [&'static str],
    /// The template parameter that sets it, if any.
    pub parameter: Option<&'static str>,
}

/// A template parameter that sets no variable: the stack's own shape (network, compute,
/// alarms, schedules).
#[derive(Debug)]
pub struct Parameter {
    pub name: &'static str,
    /// The template's default; `None` for a parameter `sam deploy --guided` must ask for.
    pub default: Option<&'static str>,
    pub why: &'static str,
}

/// A variable only tests, the demo or the benchmarks set: never an operator's setting.
#[derive(Debug)]
pub struct TestSwitch {
    pub var: &'static str,
    pub why: &'static str,
}

const fn choice(
    var: &'static str,
    default: &'static str,
    section: &'static [Section],
    parameter: &'static str,
    why: &'static str,
) -> Setting {
    Setting {
        var,
        kind: Kind::Choice,
        default,
        stack: None,
        why,
        sections: section,
        commands: &[],
        used_by: &[],
        parameter: Some(parameter),
    }
}

const fn fixed(
    var: &'static str,
    default: &'static str,
    section: &'static [Section],
    why: &'static str,
) -> Setting {
    Setting {
        var,
        kind: Kind::Fixed,
        default,
        stack: None,
        why,
        sections: section,
        commands: &[],
        used_by: &[],
        parameter: None,
    }
}

const fn wiring(
    var: &'static str,
    sections: &'static [Section],
    commands: &'static [&'static str],
    why: &'static str,
) -> Setting {
    Setting {
        var,
        kind: Kind::Wiring,
        default: "",
        stack: None,
        why,
        sections,
        commands,
        used_by: &[],
        parameter: None,
    }
}

use Section::*;

pub const SETTINGS: &[Setting] = &[
    // The operator's choices.
    Setting {
        commands: &["granary status", "granary items"],
        ..choice("GRANARY_CAMPAIGN", "", &[Layout], "Campaign", "Start a new campaign beside the old one (docs/campaigns.md); empty: the bucket's root.")
    },
    choice("GRANARY_ITEM_RECORDS", "on", &[Layout], "ItemRecords", "Off saves about three S3 PUTs a granule when nobody queries items."),
    Setting {
        commands: &["granary inventory convert"],
        ..choice("GRANARY_ID_PATTERN", "", &[Layout], "IdPattern", "Granule ids that are not HLS ids: a regex with platform and acquisition_date groups.")
    },
    Setting {
        commands: &["granary inventory convert"],
        ..choice("GRANARY_ID_DATE_FORMAT", "", &[Layout], "IdDateFormat", "The chrono format of IdPattern's acquisition_date.")
    },
    choice("GRANARY_INVENTORY_ID_COLUMN", "granule_id", &[Feeder], "InventoryIdColumn", "Inventories whose id column has another name."),
    choice("GRANARY_MAX_ACTIVE_JOBS", "10000", &[Feeder], "MaxActiveJobs", "Cap the unfinished jobs on the queue (cost, downstream load)."),
    Setting {
        stack: Some("true"),
        ..choice("GRANARY_ARRAY_WINDOWS", "off", &[Feeder, Jobs], "ArrayWindows", "Off for a container that cannot follow the array child contract (docs/array-windows.md): one job a granule.")
    },
    choice("GRANARY_DOWNSTREAM_MAX_MESSAGES", "1000", &[Feeder], "DownstreamMaxMessages", "The backlog the downstream queue may hold before the feeder waits."),
    Setting {
        commands: &["granary audit"],
        ..choice("GRANARY_JOB_MEMORY_MIB", "2048:16384", &[Jobs], "JobMemoryMiB", "Memory a job reserves, MiB; after the colon, the most an out-of-memory retry asks for.")
    },
    choice("GRANARY_MAX_RETRIES", "3", &[Retry], "MaxRetries", "More retries for flaky work, fewer to dead-letter sooner."),
    choice("GRANARY_MAX_SPOT_RETRIES", "shared", &[Retry], "MaxSpotRetries", "Give Spot reclaims a budget of their own on a bad night of reclaims."),
    Setting {
        used_by: &["job-monitor"],
        ..choice("GRANARY_BRAKE_APPLICATION_PERCENT", "25", &[Retry], "BrakeApplicationPercent", "Share of recent ends failing in your code that holds the feeder; off: never.")
    },
    Setting {
        used_by: &["job-monitor"],
        ..choice("GRANARY_BRAKE_CAPACITY_PERCENT", "50", &[Retry], "BrakeCapacityPercent", "Share of recent Spot and capacity ends that holds the feeder; off: never.")
    },
    choice("GRANARY_PROCESSING_TIMEOUT_SECS", "21600", &[Retry], "ProcessingTimeoutSeconds", "A PROCESSING item whose job Batch no longer runs is retried after this long."),
    choice("GRANARY_SOURCE_URL", "", &[Importer], "SourceUrl", "Where the importer discovers files; empty: no importer."),
    choice("GRANARY_ACTIVE_SLOTS", "*", &[Importer], "ActiveSlots", "Process only some slots (platforms, tiles) first."),
    choice("GRANARY_SLOT_PATTERN", r"^[^.]+\.([^.]+)\.", &[Importer], "SlotPattern", "File names whose slot sits elsewhere."),
    choice("GRANARY_ELIGIBLE_PATTERN", ".", &[Importer], "EligiblePattern", "Skip files whose names do not match."),
    choice("GRANARY_NOT_BEFORE", "", &[Importer], "NotBefore", "Skip files last modified before this RFC 3339 time."),
    choice("GRANARY_PREREQUISITES", "", &[Importer], "Prerequisites", "Keys that must exist before an item is processed."),
    Setting {
        commands: &["granary items", "granary audit"],
        ..choice("GRANARY_PRODUCT_KEYS", "", &[Importer], "ProductKeys", "A processed item's products, checked by re-validation and `granary audit`.")
    },
    choice("GRANARY_INGEST_CAPACITY_BYTES", "107374182400", &[Ingest], "IngestCapacityBytes", "Bytes of ingest jobs downloading or processing at once: the scratch space you pay for."),
    choice("GRANARY_INGEST_CONTAINER_STEP", "on", &[Ingest], "IngestContainerStep", "Off stores deposits as they came, without the processing container."),
    choice("GRANARY_INGEST_EZID_URL", "", &[Ingest], "IngestEzidUrl", "Mint identifiers for objects that have none; empty: none minted."),
    choice("GRANARY_INGEST_EZID_SHOULDER", "", &[Ingest], "IngestEzidShoulder", "The shoulder identifiers are minted on (with IngestEzidUrl)."),
    choice("GRANARY_INGEST_EZID_CREDENTIALS_PARAMETER", "", &[Ingest], "IngestEzidCredentialsParameter", "The SSM SecureString holding EZID's user:password."),
    choice("GRANARY_INGEST_QUEUED_CONFIRMATION", "", &[Ingest], "IngestQueuedConfirmationProfiles", "Profiles whose depositors are told when their jobs are queued."),
    choice("GRANARY_INGEST_ARCHIVE_DESTINATIONS", "", &[Ingest], "IngestArchiveDestinations", "Archive each completed ingest batch before its cleanup."),
    Setting {
        stack: Some("/granary/archive-signing-key"),
        ..choice("GRANARY_ARCHIVE_SIGNING_KEY_PARAMETER", "", &[Archive], "ArchiveSigningKeyParameter", "The SSM SecureString with the archive manifests' Ed25519 key.")
    },
    // Set by the stack from its own resources.
    wiring("GRANARY_BUCKET", &[Layout], &["every granary command"], "The data bucket: inventories, state, logs."),
    wiring("GRANARY_STACK_NAME", &[Layout], &[], "The Stack dimension of every metric; `local` when unset."),
    wiring("GRANARY_JOB_QUEUE", &[Jobs], &["granary status"], "The Batch job queue."),
    wiring("GRANARY_JOB_DEFINITION", &[Jobs], &["granary status"], "The Batch job definition."),
    wiring("GRANARY_LAST_ATTEMPT_JOB_QUEUE", &[Jobs], &[], "The on-demand queue for last attempts (LastAttemptOnDemand)."),
    wiring("GRANARY_RETRY_QUEUE_URL", &[Queues], &["granary status", "granary redrive"], "The retry queue."),
    wiring("GRANARY_FAILURE_DLQ_URL", &[Queues], &["granary status", "granary redrive"], "The failure dead-letter queue."),
    wiring("GRANARY_DOWNSTREAM_QUEUE_URL", &[Feeder], &[], "The downstream queue (DownstreamQueueName) whose backlog holds the feeder."),
    wiring("GRANARY_IMPORT_QUEUE_URL", &[Importer], &["granary redrive-imports"], "The queue between importer steps."),
    wiring("GRANARY_IMPORT_DLQ_URL", &[], &["granary redrive-imports"], "The import queue's dead-letter queue."),
    wiring("GRANARY_EVENTS_QUEUE_URL", &[], &["granary redrive-events"], "The Batch events queue."),
    wiring("GRANARY_EVENTS_DLQ_URL", &[], &["granary redrive-events"], "The Batch events queue's dead-letter queue."),
    wiring("GRANARY_NOTIFICATION_BUS", &[Ingest, Archive], &[], "The EventBridge bus depositors' notices go to."),
    wiring("GRANARY_ARCHIVE_TASK_QUEUE_URL", &[Archive], &[], "The archive task queue."),
    wiring("GRANARY_ATHENA_WORKGROUP", &[], &["granary report"], "The Athena workgroup reports run in (default primary)."),
    wiring("GRANARY_ATHENA_DATABASE", &[], &["granary report"], "The Glue database of the logs tables (default granary)."),
    wiring("GRANARY_ATHENA_OUTPUT", &[], &["granary report"], "Where Athena writes query results."),
    // Fixed by the stack at a measured or derived value.
    Setting {
        commands: &["granary plan"],
        ..fixed("GRANARY_SUBMIT_JOB_RATE", "", &[Jobs], "Each submitter's share of the account's 50 SubmitJob calls a second; unset: unpaced.")
    },
    Setting {
        commands: &["granary plan"],
        ..fixed("GRANARY_FUNCTION_TIMEOUT_SECS", "", &[Leases, Ingest, Archive], "The function's own Timeout: every lease outlasts it; a dispatcher's tick spends four fifths.")
    },
    fixed("GRANARY_SUBMIT_CONCURRENCY", "8", &[Feeder], "SubmitJob calls in flight; pacing, not this, bounds the rate."),
    Setting {
        used_by: &["job-monitor"],
        ..fixed("GRANARY_BRAKE_WINDOW_ENDS", "200", &[Retry], "The recent ends the brake judges; the percents are the choice.")
    },
    fixed("GRANARY_MAX_DOWNLOAD_ATTEMPTS", "3", &[Retry], "Importer download attempts before an item is given up."),
    fixed("GRANARY_DOWNLOAD_TIMEOUT_SECS", "240", &[Retry], "A download older than this is timed out; below the step's timeout."),
    Setting {
        stack: Some("960"),
        ..fixed("GRANARY_CLAIM_LEASE_SECS", "900", &[Leases], "Must outlast every function's timeout; tests shorten it.")
    },
    Setting {
        stack: Some("960"),
        ..fixed("GRANARY_ROUTE_LEASE_SECS", "120", &[Leases], "Must outlast the monitor's timeout; tests shorten it.")
    },
    fixed("GRANARY_RECONCILE_AFTER_SECS", "3600", &[Leases], "Past EventBridge's usual delivery; tests shorten it to find lost events."),
    fixed("GRANARY_DISCOVER_CONCURRENCY", "8", &[Importer], "HEAD requests discovery makes at once."),
    fixed("GRANARY_INGEST_LARGE_JOB_BYTES", "10737418240", &[Ingest], "An ingest job above this steps back in priority."),
    fixed("GRANARY_INGEST_UNESTIMATED_RESERVE_BYTES", "10737418240", &[Ingest], "Capacity held back for a job of unknown size."),
    fixed("GRANARY_INGEST_DOWNLOAD_ATTEMPTS", "3", &[Ingest], "Tries of one depositor file."),
    fixed("GRANARY_INGEST_CALLBACK_ATTEMPTS", "3", &[Ingest], "Tries of one depositor callback."),
    fixed("GRANARY_INGEST_TIMEOUT_SECS", "600", &[Ingest], "One request to a depositor's server."),
    fixed("GRANARY_INGEST_MAX_CONTAINER_BYTES", "134217728", &[Ingest], "A zip deposit is expanded in memory: sized to the dispatcher's MemorySize."),
    fixed("GRANARY_ARCHIVE_OBJECTS_PER_SHARD", "100", &[Archive], "Source objects per archive task."),
    fixed("GRANARY_ARCHIVE_MAX_RETRIES", "3", &[Archive], "Retries of an archive phase after a recoverable error."),
    fixed("GRANARY_ARCHIVE_BACKOFF_SECS", "60", &[Archive], "The first wait before an archive phase's retry; each next doubles."),
    Setting {
        stack: Some("5400"),
        ..fixed("GRANARY_ARCHIVE_TASK_RESEND_SECS", "900", &[Archive], "Above the task queue's visibility timeout.")
    },
];

/// Variables read only by tests, the demo and the benchmarks, or set on jobs for the container.
pub const TEST_SWITCHES: &[TestSwitch] = &[
    TestSwitch {
        var: "GRANARY_MUTANT",
        why: "Switches on one deliberate defect (scripts/mutants.sh).",
    },
    TestSwitch {
        var: "GRANARY_MOTO_SERVER",
        why: "The moto server granary-local starts.",
    },
    TestSwitch {
        var: "GRANARY_DEMO_TIMINGS",
        why: "Prints the demo's phase timings.",
    },
    TestSwitch {
        var: "GRANARY_ARRAY_RETRIES",
        why:
            "Defaults to GRANARY_ARRAY_WINDOWS; set apart only by benchmarks that compare the two.",
    },
    TestSwitch {
        var: "GRANARY_WINDOW_CLAIM",
        why: "Set on each array job for the container: its window claim (docs/array-windows.md).",
    },
    TestSwitch {
        var: "GRANARY_WINDOW_TOKEN",
        why: "Set on each array job: its window claim's token, which its children's ends carry.",
    },
];

pub const PARAMETERS: &[Parameter] = &[
    Parameter {
        name: "SubnetIds",
        default: None,
        why: "Subnets of the Spot compute environment.",
    },
    Parameter {
        name: "SecurityGroupIds",
        default: None,
        why: "Security groups of the compute environment.",
    },
    Parameter {
        name: "ContainerImage",
        default: None,
        why: "Your processing container image.",
    },
    Parameter {
        name: "Architecture",
        default: Some("arm64"),
        why: "The Lambdas' instruction set: arm64 or x86_64 (make package ARCHITECTURE=...).",
    },
    Parameter {
        name: "JobVcpus",
        default: Some("1"),
        why: "vCPUs a job needs.",
    },
    Parameter {
        name: "AttemptTimeoutSeconds",
        default: Some("3600"),
        why: "Batch ends an attempt that runs longer.",
    },
    Parameter {
        name: "BatchRetryAttempts",
        default: Some("3"),
        why: "Batch's own retries of Spot reclaims and image pulls.",
    },
    Parameter {
        name: "InstanceTypes",
        default: Some("c6i,c7i,c6a"),
        why: "Spot instance types or families.",
    },
    Parameter {
        name: "MaxVcpus",
        default: Some("256"),
        why: "The Spot compute environment's size: the campaign's speed and spend.",
    },
    Parameter {
        name: "LastAttemptOnDemand",
        default: Some("false"),
        why: "Run a granule's last chance against capacity on demand.",
    },
    Parameter {
        name: "RunnableCapacityLimitSeconds",
        default: Some("14400"),
        why: "A job waiting this long for Spot capacity is cancelled and retried.",
    },
    Parameter {
        name: "FeederScheduleMinutes",
        default: Some("60"),
        why: "Minutes between feeder runs.",
    },
    Parameter {
        name: "GranuleSubmitCount",
        default: Some("1000"),
        why: "Granules one feeder run submits.",
    },
    Parameter {
        name: "FunctionConcurrency",
        default: Some("20"),
        why: "Reserved concurrency of the queue-driven functions.",
    },
    Parameter {
        name: "DownstreamQueueName",
        default: Some(""),
        why:
            "A queue downstream whose backlog holds the feeder (sets GRANARY_DOWNSTREAM_QUEUE_URL).",
    },
    Parameter {
        name: "GlueDatabaseName",
        default: Some("granary"),
        why: "The logs' Glue database; unique per account and region.",
    },
    Parameter {
        name: "AlarmEmail",
        default: Some(""),
        why: "An address for the alarm topic.",
    },
    Parameter {
        name: "EventsRedriveRoleArns",
        default: Some(""),
        why: "Roles that may run `granary redrive-events`.",
    },
    Parameter {
        name: "LogRetentionDays",
        default: Some("365"),
        why: "Days the functions' logs are kept.",
    },
    Parameter {
        name: "ArchiveSourceBuckets",
        default: Some(""),
        why: "Buckets archive jobs may read besides the data bucket.",
    },
    Parameter {
        name: "ArchiveDestinationBuckets",
        default: Some(""),
        why: "Buckets archives may be stored in.",
    },
];

impl Setting {
    /// The functions that read it: those whose sections include its own.
    pub fn functions(&self) -> Vec<super::Function> {
        super::Function::ALL
            .into_iter()
            .filter(|f| {
                self.sections
                    .iter()
                    .any(|s| *s == Section::Layout || f.sections().contains(s))
            })
            .collect()
    }
}

/// The entry of `var`, if the catalogue has one.
pub fn setting(var: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.var == var)
}

#[path = "catalogue_doc.rs"]
mod doc;
pub use doc::markdown;
