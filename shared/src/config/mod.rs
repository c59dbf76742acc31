//! Configuration from environment variables (the Lambda environment the template sets, or the
//! shell for the CLI), in sections: each Lambda and each command reads only the sections it uses
//! ([`Function::sections`], [`Config::for_sections`]), each setting has one default (a constant in
//! its section's file), and every variable is in the catalogue ([`catalogue`]), from which
//! docs/configuration.md is generated.

pub mod archive;
pub mod catalogue;
mod importer;
pub mod ingest;
mod sections;

pub use importer::ImporterConfig;
pub use sections::{
    Feeder, Jobs, Layout, Leases, Queues, DEFAULT_CLAIM_LEASE_SECS, DEFAULT_JOB_MEMORY,
    DEFAULT_MAX_RETRIES, DEFAULT_ROUTE_LEASE_SECS,
};

use crate::domain::granule::IdParserError;
use crate::domain::lifecycle::RetryPolicy;
use regex::Regex;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{var} is not set; it must name {what}")]
    Missing {
        var: &'static str,
        what: &'static str,
    },
    #[error("{var}={value:?} is not valid: {why}")]
    Invalid {
        var: &'static str,
        value: String,
        why: String,
    },
    #[error("GRANARY_ID_PATTERN / GRANARY_ID_DATE_FORMAT: {0}")]
    IdParser(#[from] IdParserError),
}

/// One configuration section: the settings one part of granary reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Section {
    /// The bucket and its key layout, the id parser, item records on or off. Every part reads it.
    Layout,
    /// The inventories' id column, the active-jobs cap, submit concurrency.
    Feeder,
    /// The AWS Batch job queue and job definition (required when read).
    Jobs,
    /// The retry queue and failure DLQ URLs (required when read).
    Queues,
    /// Attempt budgets and state timeouts; the automatic brake.
    Retry,
    /// Claim and route leases, reconcile delay, the function's own timeout.
    Leases,
    /// The importer's source, import queue, slots, patterns, prerequisites.
    Importer,
    /// The ingest queue: its prefix, capacity, attempts, timeouts, notification bus.
    Ingest,
    /// Archive jobs: prefix, task queue, signing key, shards, retries.
    Archive,
}

/// The Lambda functions, by what they read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Function {
    QueueFeeder,
    JobMonitor,
    Requeuer,
    ImporterDiscover,
    ImporterStep,
    ItemSweeper,
    IngestDispatcher,
    IngestSubmit,
    ArchiveDispatcher,
    ArchiveTask,
}

impl Function {
    pub const ALL: [Function; 10] = [
        Function::QueueFeeder,
        Function::JobMonitor,
        Function::Requeuer,
        Function::ImporterDiscover,
        Function::ImporterStep,
        Function::ItemSweeper,
        Function::IngestDispatcher,
        Function::IngestSubmit,
        Function::ArchiveDispatcher,
        Function::ArchiveTask,
    ];

    /// Its binary's name, as the template and the packages call it.
    pub fn name(self) -> &'static str {
        match self {
            Function::QueueFeeder => "queue-feeder",
            Function::JobMonitor => "job-monitor",
            Function::Requeuer => "requeuer",
            Function::ImporterDiscover => "importer-discover",
            Function::ImporterStep => "importer-step",
            Function::ItemSweeper => "item-sweeper",
            Function::IngestDispatcher => "ingest-dispatcher",
            Function::IngestSubmit => "ingest-submit",
            Function::ArchiveDispatcher => "archive-dispatcher",
            Function::ArchiveTask => "archive-task",
        }
    }

    /// The sections the function reads. A section it does not read is never looked up: its
    /// required variables need not be set, and its ports refuse every call (`wiring`).
    pub fn sections(self) -> &'static [Section] {
        use Section::*;
        match self {
            // Submits jobs, dead-letters unusable rows.
            Function::QueueFeeder => &[Layout, Feeder, Jobs, Queues, Retry, Leases],
            // Logs and routes job ends (an ingest job's processing job: its record); never submits.
            Function::JobMonitor => &[Layout, Queues, Retry, Leases, Ingest],
            // Submits the next attempt or dead-letters.
            Function::Requeuer => &[Layout, Jobs, Queues, Retry, Leases],
            // Lists the source, registers items, dead-letters poison.
            Function::ImporterDiscover => &[Layout, Queues, Retry, Importer],
            // Downloads, admits, re-validates; hands READY items on through the retry queue.
            Function::ImporterStep => &[Layout, Queues, Retry, Importer],
            // The reconciler (asks Batch about open claims) and the sweeper (asks Batch before
            // failing a PROCESSING item).
            Function::ItemSweeper => &[Layout, Jobs, Queues, Retry, Leases, Importer],
            // Every ingest step; submits processing jobs, dead-letters the ones that fail.
            // (and creates a completed batch's archive job when batches are archived).
            Function::IngestDispatcher => &[Layout, Jobs, Queues, Retry, Ingest, Archive],
            // Creates batches from submissions.
            Function::IngestSubmit => &[Layout, Ingest],
            // Moves archive jobs through their table, sends tasks, announces.
            Function::ArchiveDispatcher => &[Layout, Archive],
            // Runs one task (a shard, post-processing, a destination); the last one fans in.
            Function::ArchiveTask => &[Layout, Archive],
        }
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    /// The stack whose metrics these are (`GRANARY_STACK_NAME`, the template sets it to the
    /// CloudFormation stack's name; `local` when unset): the `Stack` dimension of every metric.
    pub stack: String,
    pub layout: Layout,
    pub feeder: Feeder,
    /// `None` when the reader did not ask for the Jobs section.
    pub jobs: Option<Jobs>,
    /// `None` when the reader did not ask for the Queues section.
    pub queues: Option<Queues>,
    pub retry_policy: RetryPolicy,
    /// The retries a granule's failed attempts may have (`domain::attempt_budget`): the
    /// processing budget of `retry_policy`, and Spot/capacity ends' own when
    /// `GRANARY_MAX_SPOT_RETRIES` sets one.
    pub attempt_budget: crate::domain::attempt_budget::AttemptBudget,
    /// When the job monitor holds the feeder itself (`domain::brake`; read with the Retry
    /// section: it judges failures).
    pub brake: crate::domain::brake::BrakeSettings,
    pub leases: Leases,
    pub importer: ImporterConfig,
    pub ingest: ingest::IngestSettings,
    pub archive: archive::ArchiveSettings,
}

/// Reads variables through one lookup, with the parsing helpers every section shares.
pub(crate) struct Vars<'a> {
    get: &'a dyn Fn(&str) -> Option<String>,
}

impl Vars<'_> {
    /// The value, unless unset or empty.
    pub(crate) fn get(&self, var: &str) -> Option<String> {
        (self.get)(var).filter(|v| !v.is_empty())
    }

    pub(crate) fn or(&self, var: &str, default: &str) -> String {
        self.get(var).unwrap_or_else(|| default.to_owned())
    }

    pub(crate) fn required(
        &self,
        var: &'static str,
        what: &'static str,
    ) -> Result<String, ConfigError> {
        self.get(var).ok_or(ConfigError::Missing { var, what })
    }

    pub(crate) fn number<T>(&self, var: &'static str, default: T) -> Result<T, ConfigError>
    where
        T: std::str::FromStr,
        T::Err: std::fmt::Display,
    {
        match self.get(var) {
            None => Ok(default),
            Some(raw) => raw.parse().map_err(|e: T::Err| ConfigError::Invalid {
                var,
                value: raw.clone(),
                why: e.to_string(),
            }),
        }
    }

    pub(crate) fn regex(&self, var: &'static str, default: &str) -> Result<Regex, ConfigError> {
        let raw = self.or(var, default);
        crate::domain::pattern::compiled(&raw).map_err(|e| ConfigError::Invalid {
            var,
            value: raw.clone(),
            why: e.to_string(),
        })
    }

    pub(crate) fn flag(&self, var: &'static str, default: bool) -> Result<bool, ConfigError> {
        match self.get(var) {
            None => Ok(default),
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "1" | "true" | "on" | "yes" => Ok(true),
                "0" | "false" | "off" | "no" => Ok(false),
                _ => Err(ConfigError::Invalid {
                    var,
                    value: v,
                    why: "use on or off".into(),
                }),
            },
        }
    }

    pub(crate) fn list(&self, var: &str) -> Vec<String> {
        self.or(var, "")
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    }
}

impl Config {
    /// Every section, from the process environment (what a tool that does everything reads).
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Builds the config from name/value pairs only (tests, local runs).
    pub fn from_pairs(pairs: &[(&str, &str)]) -> Result<Self, ConfigError> {
        Self::from_lookup(|k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    /// A backfill stack's configuration for unit tests: bucket `b`, job queue `q`, job definition
    /// `d`, retry queue `r`, failure DLQ `f`, and `extra` over them.
    #[cfg(test)]
    pub fn for_unit_tests(extra: &[(&str, &str)]) -> Self {
        let base = [
            ("GRANARY_BUCKET", "b"),
            ("GRANARY_JOB_QUEUE", "q"),
            ("GRANARY_JOB_DEFINITION", "d"),
            ("GRANARY_RETRY_QUEUE_URL", "r"),
            ("GRANARY_FAILURE_DLQ_URL", "f"),
        ];
        Self::from_lookup(|k| {
            extra
                .iter()
                .chain(base.iter())
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        })
        .expect("the unit-test configuration is valid")
    }

    /// Every section from any lookup (tests pass a map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        use Section::*;
        Self::for_sections(
            &[
                Layout, Feeder, Jobs, Queues, Retry, Leases, Importer, Ingest, Archive,
            ],
            get,
        )
    }

    /// Only `sections` (plus the layout, which everything reads) are looked up; the others keep
    /// their defaults, and the Jobs and Queues sections stay unset.
    pub fn for_sections(
        sections: &[Section],
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let vars = Vars { get: &get };
        let wants = |s: Section| sections.contains(&s);
        let config = Self {
            stack: vars.or("GRANARY_STACK_NAME", "local"),
            layout: Layout::read(&vars)?,
            feeder: if wants(Section::Feeder) {
                Feeder::read(&vars)?
            } else {
                Feeder::default()
            },
            jobs: wants(Section::Jobs)
                .then(|| Jobs::read(&vars))
                .transpose()?,
            queues: wants(Section::Queues)
                .then(|| Queues::read(&vars))
                .transpose()?,
            retry_policy: if wants(Section::Retry) {
                sections::read_retry_policy(&vars)?
            } else {
                sections::default_retry_policy()
            },
            attempt_budget: if wants(Section::Retry) {
                sections::read_attempt_budget(&vars)?
            } else {
                sections::default_attempt_budget()
            },
            brake: if wants(Section::Retry) {
                sections::read_brake(&vars)?
            } else {
                Default::default()
            },
            leases: if wants(Section::Leases) {
                Leases::read(&vars)?
            } else if (wants(Section::Ingest) || wants(Section::Archive))
                && !crate::mutants::on("dispatcher-reads-no-timeout")
            {
                // The dispatchers hold no lease, but their ticks spend a budget of their timeout
                // (`handlers::ingest::tick`, `handlers::archive::tick`): without it, a tick runs
                // until Lambda kills it.
                Leases {
                    function_timeout: Leases::read_function_timeout(&vars)?,
                    ..Leases::default()
                }
            } else {
                Leases::default()
            },
            importer: if wants(Section::Importer) {
                ImporterConfig::read(&vars)?
            } else {
                ImporterConfig::default()
            },
            ingest: if wants(Section::Ingest) {
                ingest::IngestSettings::read(&vars)?
            } else {
                ingest::IngestSettings::default()
            },
            archive: if wants(Section::Archive) {
                archive::ArchiveSettings::read(&vars)?
            } else {
                archive::ArchiveSettings::default()
            },
        };
        // Only where the leases are settings. The dispatcher reads its timeout alone: its
        // processing claims keep the default lease (900 s), as long as its timeout, and each is
        // taken after its invocation started, so it outlasts the invocation all the same.
        if wants(Section::Leases) {
            config.leases.check()?;
        }
        Ok(config)
    }

    /// The retry queue's and the failure DLQ's names (URLs), or the variables that would set them.
    pub fn queue_names(&self) -> (String, String) {
        match &self.queues {
            Some(q) => (q.retry_queue_url.clone(), q.failure_dlq_url.clone()),
            None => (
                "GRANARY_RETRY_QUEUE_URL".to_owned(),
                "GRANARY_FAILURE_DLQ_URL".to_owned(),
            ),
        }
    }

    /// The item lifecycle's budgets for the importer's rules (the item sweeper's timeout
    /// recovery, re-validation): processing attempts up to the highest the attempt budget can
    /// reach, so a granule with Spot retries left is handed to the requeuer, which decides.
    pub fn item_retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_processing_attempts: self.attempt_budget.last_attempt(),
            ..self.retry_policy
        }
    }

    /// The attempt number past which a granule is dead-lettered (1 + GRANARY_MAX_RETRIES) when
    /// every retried end spends the one budget; the requeuer asks `attempt_budget`, which also
    /// knows Spot's own (`GRANARY_MAX_SPOT_RETRIES`). An ingest job's processing attempts spend
    /// this one alone.
    pub fn max_attempt(&self) -> u32 {
        self.retry_policy.max_processing_attempts
    }
}

#[cfg(test)]
mod tests;
