//! The configuration sections: each reads its own variables, and each setting's default is a
//! constant here, used both when the variable is unset and when the section is not read at all.

use super::{ConfigError, Vars};
use crate::domain::campaign::Campaign;
use crate::domain::granule::IdParser;
use crate::domain::layout;
use crate::domain::lifecycle::RetryPolicy;
use crate::repositories::items::ItemPrefixes;
use std::time::Duration;

pub const DEFAULT_MAX_ACTIVE_JOBS: u64 = 10_000;
pub const DEFAULT_SUBMIT_CONCURRENCY: usize = 8;
/// Whether a window is one array job (`GRANARY_ARRAY_WINDOWS`).
pub const DEFAULT_ARRAY_WINDOWS: bool = false;
/// Retries after the first attempt: attempts go up to 1 + this.
pub const DEFAULT_MAX_RETRIES: u32 = 3;
pub const DEFAULT_MAX_DOWNLOAD_ATTEMPTS: u32 = 3;
pub const DEFAULT_DOWNLOAD_TIMEOUT_SECS: u32 = 240;
pub const DEFAULT_PROCESSING_TIMEOUT_SECS: u32 = 21_600;
pub const DEFAULT_CLAIM_LEASE_SECS: u64 = 900;
pub const DEFAULT_ROUTE_LEASE_SECS: u64 = 120;
pub const DEFAULT_RECONCILE_AFTER_SECS: u64 = 3_600;
pub const DEFAULT_DISCOVER_CONCURRENCY: usize = 8;
pub const DEFAULT_SLOT_PATTERN: &str = r"^[^.]+\.([^.]+)\.";
pub const DEFAULT_ELIGIBLE_PATTERN: &str = ".";

/// The bucket and where everything lives in it; read by every function and command.
///
/// Every prefix and key below except the inventories' and the hold's is a campaign's state: under a named
/// campaign (`GRANARY_CAMPAIGN`) it lives under `campaigns/<name>/` (`domain::campaign`), and
/// [`Layout::in_campaign`] gives the same layout for another campaign (the monitor handling a
/// job of the campaign before, the reconciler visiting every campaign).
#[derive(Debug, Clone)]
pub struct Layout {
    pub bucket: String,
    /// Whose state this is: `None` for the unnamed campaign (the bucket's root).
    pub campaign: Option<Campaign>,
    pub inventory_prefix: String,
    pub tracker_key: String,
    /// While this object exists the feeder submits nothing (`granary hold` / `granary release`).
    pub hold_key: String,
    pub log_prefix: String,
    pub claim_prefix: String,
    /// The open-claims index: one empty marker per submitted attempt whose end is not yet logged
    /// and routed. The reconciler reads only this, never every claim of a campaign.
    pub open_claim_prefix: String,
    /// Where poison inputs (unusable rows, events, messages, records) are kept, each with its
    /// reason, before they are dead-lettered: SQS keeps a message 14 days at most, S3 for good.
    pub reject_prefix: String,
    /// Where item records, their history and the in-flight index live.
    pub item_prefixes: ItemPrefixes,
    /// Whether the backfill loop keeps an item record per granule (costs ~3 S3 PUTs per transition).
    pub track_items: bool,
    /// Platform and acquisition date from a granule id (log keys, reports).
    pub id_parser: IdParser,
}

impl Layout {
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::read(&Vars {
            get: &|k| std::env::var(k).ok(),
        })
    }

    /// The id parser GRANARY_ID_PATTERN and GRANARY_ID_DATE_FORMAT name (HLS ids when unset),
    /// from the environment: what reads ids without a bucket (`granary-local demo
    /// --inventory`) parses them as the stack will.
    pub fn id_parser_from_env() -> Result<IdParser, ConfigError> {
        Self::id_parser_from(&Vars {
            get: &|k| std::env::var(k).ok(),
        })
    }

    fn id_parser_from(v: &Vars) -> Result<IdParser, ConfigError> {
        Ok(IdParser::new(
            &v.or("GRANARY_ID_PATTERN", IdParser::HLS_PATTERN),
            &v.or("GRANARY_ID_DATE_FORMAT", IdParser::HLS_DATE_FORMAT),
        )?)
    }

    pub(crate) fn read(v: &Vars) -> Result<Self, ConfigError> {
        let campaign = v
            .get("GRANARY_CAMPAIGN")
            .map(|name| {
                Campaign::parse(&name).map_err(|e| ConfigError::Invalid {
                    var: "GRANARY_CAMPAIGN",
                    value: name,
                    why: e.to_string(),
                })
            })
            .transpose()?;
        let unnamed = Self {
            bucket: v.required(
                "GRANARY_BUCKET",
                "the S3 bucket holding inventories, tracker, claims and logs",
            )?,
            campaign: None,
            inventory_prefix: layout::INVENTORY_PREFIX.to_owned(),
            tracker_key: layout::TRACKER_KEY.to_owned(),
            hold_key: layout::HOLD_KEY.to_owned(),
            log_prefix: layout::LOG_PREFIX.to_owned(),
            claim_prefix: layout::CLAIM_PREFIX.to_owned(),
            open_claim_prefix: layout::OPEN_CLAIM_PREFIX.to_owned(),
            reject_prefix: layout::REJECT_PREFIX.to_owned(),
            item_prefixes: ItemPrefixes::default(),
            track_items: v.flag("GRANARY_ITEM_RECORDS", true)?,
            id_parser: Self::id_parser_from(v)?,
        };
        Ok(unnamed.in_campaign(campaign.as_ref()))
    }

    /// This layout for `campaign`'s state: every key but the inventories' moved under its
    /// root. The one place that knows which keys are a campaign's.
    pub fn in_campaign(&self, campaign: Option<&Campaign>) -> Self {
        let from = self.campaign.as_ref();
        let moved = |key: &str| crate::domain::campaign::rerooted(key, from, campaign);
        Self {
            bucket: self.bucket.clone(),
            campaign: campaign.cloned(),
            inventory_prefix: self.inventory_prefix.clone(),
            tracker_key: moved(&self.tracker_key),
            // The hold is the stack's feeder's, whichever campaign it feeds: an operator who
            // holds it before a switch still holds it after.
            hold_key: self.hold_key.clone(),
            log_prefix: moved(&self.log_prefix),
            claim_prefix: moved(&self.claim_prefix),
            open_claim_prefix: moved(&self.open_claim_prefix),
            reject_prefix: moved(&self.reject_prefix),
            item_prefixes: ItemPrefixes {
                items: moved(&self.item_prefixes.items),
                history: moved(&self.item_prefixes.history),
                inflight: moved(&self.item_prefixes.inflight),
            },
            track_items: self.track_items,
            id_parser: self.id_parser.clone(),
        }
    }
}

/// The queue feeder's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Feeder {
    pub inventory_id_column: String,
    /// The feeder submits nothing while this many jobs are unfinished.
    pub max_active_jobs: u64,
    pub submit_concurrency: usize,
    /// Each window of two or more granules is submitted as one array job
    /// (`GRANARY_ARRAY_WINDOWS`; the container then follows docs/array-windows.md). Off: one
    /// job per granule, the contract every container already follows.
    pub array_windows: bool,
    /// The queue downstream of granary whose backlog holds the feeder back
    /// (`GRANARY_DOWNSTREAM_QUEUE_URL`, `GRANARY_DOWNSTREAM_MAX_MESSAGES`); `None`: none.
    pub downstream: Option<crate::domain::downstream::DownstreamGate>,
}

impl Default for Feeder {
    fn default() -> Self {
        Self {
            inventory_id_column: crate::domain::granule::INVENTORY_ID_COLUMN.to_owned(),
            max_active_jobs: DEFAULT_MAX_ACTIVE_JOBS,
            submit_concurrency: DEFAULT_SUBMIT_CONCURRENCY,
            array_windows: DEFAULT_ARRAY_WINDOWS,
            downstream: None,
        }
    }
}

impl Feeder {
    pub(crate) fn read(v: &Vars) -> Result<Self, ConfigError> {
        let d = Self::default();
        let submit_concurrency = v.number("GRANARY_SUBMIT_CONCURRENCY", d.submit_concurrency)?;
        if submit_concurrency == 0 {
            return Err(ConfigError::Invalid {
                var: "GRANARY_SUBMIT_CONCURRENCY",
                value: "0".into(),
                why: "must be at least 1".into(),
            });
        }
        Ok(Self {
            inventory_id_column: v.or("GRANARY_INVENTORY_ID_COLUMN", &d.inventory_id_column),
            max_active_jobs: v.number("GRANARY_MAX_ACTIVE_JOBS", d.max_active_jobs)?,
            submit_concurrency,
            array_windows: v.flag("GRANARY_ARRAY_WINDOWS", d.array_windows)?,
            downstream: Self::read_downstream(v)?,
        })
    }

    /// A limit without a queue would hold nothing back: refused, so the mistake shows.
    fn read_downstream(
        v: &Vars,
    ) -> Result<Option<crate::domain::downstream::DownstreamGate>, ConfigError> {
        use crate::domain::downstream::{DownstreamGate, DEFAULT_MAX_MESSAGES};
        let limit = "GRANARY_DOWNSTREAM_MAX_MESSAGES";
        match v.get("GRANARY_DOWNSTREAM_QUEUE_URL") {
            Some(queue_url) => Ok(Some(DownstreamGate {
                queue_url,
                max_messages: v.number(limit, DEFAULT_MAX_MESSAGES)?,
            })),
            None => match v.get(limit) {
                Some(value) => Err(ConfigError::Invalid {
                    var: limit,
                    value,
                    why: "set GRANARY_DOWNSTREAM_QUEUE_URL too: a limit needs the queue it \
                          applies to"
                        .into(),
                }),
                None => Ok(None),
            },
        }
    }
}

/// Where jobs are submitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Jobs {
    pub job_queue: String,
    pub job_definition: String,
    /// The least time between two SubmitJob calls of this invocation: one over its share of
    /// the account's budget (`GRANARY_SUBMIT_JOB_RATE`, calls a second; unset: unpaced). See
    /// `adapters::paced`.
    pub submit_spacing: Option<std::time::Duration>,
    /// The job queue a granule's last chance goes to (`GRANARY_LAST_ATTEMPT_JOB_QUEUE`: an
    /// on-demand queue, where no Spot reclaim ends it; `domain::attempt_budget`). Unset or
    /// empty: every attempt goes to `job_queue`.
    pub last_attempt_queue: Option<String>,
    /// Retries gathered into array jobs (with `GRANARY_ARRAY_WINDOWS`): the requeuer
    /// parks an ordinary retry and the feeder submits the parked ones as one window of retries
    /// before its inventory windows (`domain::window::RETRY_WINDOWS`), so retries spend
    /// Batch's SubmitJob quota by the window, not by the granule.
    pub array_retries: bool,
    /// What the job definition reserves and the most an out-of-memory retry asks for
    /// (`GRANARY_JOB_MEMORY_MIB`, `domain::memory`).
    pub memory: crate::domain::memory::MemoryLimits,
}

impl Jobs {
    /// The queues besides `job_queue` that granary's jobs may be on: ListJobs asks each (it
    /// lists one queue a call, AWS Batch API Reference, "ListJobs"), so a job submitted to the
    /// last-attempt queue is found by its name and counted among the active.
    pub fn other_queues(&self) -> Vec<String> {
        if crate::mutants::on("last-attempt-queue-not-listed") {
            return Vec::new();
        }
        self.last_attempt_queue.iter().cloned().collect()
    }

    pub fn from_env() -> Result<Self, ConfigError> {
        Self::read(&Vars {
            get: &|k| std::env::var(k).ok(),
        })
    }

    pub(crate) fn read(v: &Vars) -> Result<Self, ConfigError> {
        Ok(Self {
            job_queue: v.required("GRANARY_JOB_QUEUE", "the AWS Batch job queue (name or ARN)")?,
            job_definition: v.required(
                "GRANARY_JOB_DEFINITION",
                "the AWS Batch job definition (name, name:revision or ARN)",
            )?,
            last_attempt_queue: v.get("GRANARY_LAST_ATTEMPT_JOB_QUEUE"),
            memory: {
                let raw = v.or("GRANARY_JOB_MEMORY_MIB", DEFAULT_JOB_MEMORY);
                crate::domain::memory::MemoryLimits::parse(&raw).map_err(|why| {
                    ConfigError::Invalid {
                        var: "GRANARY_JOB_MEMORY_MIB",
                        value: raw.clone(),
                        why: why.to_string(),
                    }
                })?
            },
            // Retries gather into windows wherever first attempts do: the container follows
            // the child contract already. Apart only in benchmarks that compare the two.
            array_retries: v.flag(
                "GRANARY_ARRAY_RETRIES",
                v.flag("GRANARY_ARRAY_WINDOWS", DEFAULT_ARRAY_WINDOWS)?,
            )?,
            submit_spacing: match v.get("GRANARY_SUBMIT_JOB_RATE") {
                None => None,
                Some(raw) => Some(
                    raw.parse::<f64>()
                        .ok()
                        .filter(|r| r.is_finite() && *r > 0.0 && *r <= 50.0)
                        .map(|r| std::time::Duration::from_secs_f64(1.0 / r))
                        .ok_or(ConfigError::Invalid {
                            var: "GRANARY_SUBMIT_JOB_RATE",
                            value: raw.clone(),
                            why: "calls a second: a number above 0 and at most Batch's 50".into(),
                        })?,
                ),
            },
        })
    }
}

/// The job definition's memory and an out-of-memory retry's cap, MiB (the template's default).
pub const DEFAULT_JOB_MEMORY: &str = "2048:16384";

/// The retry queue and the failure dead-letter queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queues {
    pub retry_queue_url: String,
    pub failure_dlq_url: String,
}

impl Queues {
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::read(&Vars {
            get: &|k| std::env::var(k).ok(),
        })
    }

    pub(crate) fn read(v: &Vars) -> Result<Self, ConfigError> {
        Ok(Self {
            retry_queue_url: v.required("GRANARY_RETRY_QUEUE_URL", "the SQS retry queue URL")?,
            failure_dlq_url: v.required(
                "GRANARY_FAILURE_DLQ_URL",
                "the SQS failure dead-letter queue URL",
            )?,
        })
    }
}

/// Attempt budgets and state timeouts: GRANARY_MAX_RETRIES is the one knob for processing
/// attempts (1 + retries).
pub(crate) fn read_retry_policy(v: &Vars) -> Result<RetryPolicy, ConfigError> {
    let retries: u32 = v.number("GRANARY_MAX_RETRIES", DEFAULT_MAX_RETRIES)?;
    let attempts: u32 = v.number(
        "GRANARY_MAX_DOWNLOAD_ATTEMPTS",
        DEFAULT_MAX_DOWNLOAD_ATTEMPTS,
    )?;
    let secs = |var: &'static str, default: u32| -> Result<chrono::Duration, ConfigError> {
        Ok(chrono::Duration::seconds(i64::from(
            v.number::<u32>(var, default)?,
        )))
    };
    Ok(RetryPolicy {
        max_download_attempts: attempts.max(1),
        max_processing_attempts: retries.saturating_add(1),
        download_timeout: secs(
            "GRANARY_DOWNLOAD_TIMEOUT_SECS",
            DEFAULT_DOWNLOAD_TIMEOUT_SECS,
        )?,
        processing_timeout: secs(
            "GRANARY_PROCESSING_TIMEOUT_SECS",
            DEFAULT_PROCESSING_TIMEOUT_SECS,
        )?,
    })
}

/// The retries of a granule's attempts: `GRANARY_MAX_RETRIES` after any end, unless
/// `GRANARY_MAX_SPOT_RETRIES` gives Spot reclaims and capacity cancels a budget of their own
/// (`shared`, the default, or empty: they spend the one budget).
pub(crate) fn read_attempt_budget(
    v: &Vars,
) -> Result<crate::domain::attempt_budget::AttemptBudget, ConfigError> {
    let spot_retries = match v.get("GRANARY_MAX_SPOT_RETRIES") {
        None => None,
        Some(raw) if raw == "shared" => None,
        Some(raw) => Some(raw.parse::<u32>().map_err(|_| ConfigError::Invalid {
            var: "GRANARY_MAX_SPOT_RETRIES",
            value: raw.clone(),
            why: "a number of retries after Spot or capacity ends, or `shared`".into(),
        })?),
    };
    Ok(crate::domain::attempt_budget::AttemptBudget {
        retries: v.number("GRANARY_MAX_RETRIES", DEFAULT_MAX_RETRIES)?,
        spot_retries,
    })
}

pub(crate) fn default_attempt_budget() -> crate::domain::attempt_budget::AttemptBudget {
    crate::domain::attempt_budget::AttemptBudget {
        retries: DEFAULT_MAX_RETRIES,
        spot_retries: None,
    }
}

/// The automatic brake's settings (`domain::brake`): the window of ends judged, and the
/// application and capacity thresholds in percent of it (`off`: never). No judgement before a
/// quarter of the window has ended.
pub(crate) fn read_brake(v: &Vars) -> Result<crate::domain::brake::BrakeSettings, ConfigError> {
    let d = crate::domain::brake::BrakeSettings::default();
    let window: usize = v.number("GRANARY_BRAKE_WINDOW_ENDS", d.window)?;
    if window < 4 {
        return Err(ConfigError::Invalid {
            var: "GRANARY_BRAKE_WINDOW_ENDS",
            value: window.to_string(),
            why: "judge at least 4 ends".into(),
        });
    }
    let percent = |var: &'static str, default: Option<f64>| -> Result<Option<f64>, ConfigError> {
        match v.get(var) {
            None => Ok(default),
            Some(raw) if raw.eq_ignore_ascii_case("off") => Ok(None),
            Some(raw) => match raw.parse::<f64>() {
                Ok(p) if p > 0.0 && p <= 100.0 => Ok(Some(p)),
                _ => Err(ConfigError::Invalid {
                    var,
                    value: raw,
                    why: "a percent above 0 and at most 100, or off".into(),
                }),
            },
        }
    };
    Ok(crate::domain::brake::BrakeSettings {
        window,
        min_ends: window / 4,
        application_percent: percent("GRANARY_BRAKE_APPLICATION_PERCENT", d.application_percent)?,
        capacity_percent: percent("GRANARY_BRAKE_CAPACITY_PERCENT", d.capacity_percent)?,
        evidence: d.evidence,
    })
}

pub(crate) fn default_retry_policy() -> RetryPolicy {
    RetryPolicy {
        max_download_attempts: DEFAULT_MAX_DOWNLOAD_ATTEMPTS,
        max_processing_attempts: DEFAULT_MAX_RETRIES + 1,
        download_timeout: chrono::Duration::seconds(i64::from(DEFAULT_DOWNLOAD_TIMEOUT_SECS)),
        processing_timeout: chrono::Duration::seconds(i64::from(DEFAULT_PROCESSING_TIMEOUT_SECS)),
    }
}

/// Leases and the function's own timeout, which the leases must outlast.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leases {
    /// How long a claim without a job id belongs to whoever made it; longer than any Lambda runs.
    pub claim_lease: Duration,
    /// How long a logged-but-unrouted failure belongs to the delivery that logged it; longer than
    /// the monitor's Lambda timeout. A duplicate arriving inside it is retried later, not routed.
    pub route_lease: Duration,
    /// How old an open claim must be before the reconciler asks Batch about its job: longer than
    /// EventBridge normally takes to deliver an end, so it only catches events that were lost.
    pub reconcile_after: Duration,
    /// The running function's timeout (`GRANARY_FUNCTION_TIMEOUT_SECS`, set per function by the
    /// template). When set, both leases must outlast it: a lease that can expire while its holder
    /// still runs lets a second invocation submit the same attempt or route the same end.
    pub function_timeout: Option<Duration>,
}

impl Default for Leases {
    fn default() -> Self {
        Self {
            claim_lease: Duration::from_secs(DEFAULT_CLAIM_LEASE_SECS),
            route_lease: Duration::from_secs(DEFAULT_ROUTE_LEASE_SECS),
            reconcile_after: Duration::from_secs(DEFAULT_RECONCILE_AFTER_SECS),
            function_timeout: None,
        }
    }
}

impl Leases {
    pub(crate) fn read(v: &Vars) -> Result<Self, ConfigError> {
        let secs = |var: &'static str, default: u64| -> Result<Duration, ConfigError> {
            Ok(Duration::from_secs(v.number(var, default)?))
        };
        Ok(Self {
            claim_lease: secs("GRANARY_CLAIM_LEASE_SECS", DEFAULT_CLAIM_LEASE_SECS)?,
            route_lease: secs("GRANARY_ROUTE_LEASE_SECS", DEFAULT_ROUTE_LEASE_SECS)?,
            reconcile_after: secs("GRANARY_RECONCILE_AFTER_SECS", DEFAULT_RECONCILE_AFTER_SECS)?,
            function_timeout: Self::read_function_timeout(v)?,
        })
    }

    /// `GRANARY_FUNCTION_TIMEOUT_SECS`, when the template sets it.
    pub(crate) fn read_function_timeout(v: &Vars) -> Result<Option<Duration>, ConfigError> {
        Ok(match v.get("GRANARY_FUNCTION_TIMEOUT_SECS") {
            Some(_) => Some(Duration::from_secs(
                v.number("GRANARY_FUNCTION_TIMEOUT_SECS", 0)?,
            )),
            None => None,
        })
    }

    /// Refuses leases that do not outlast the function holding them.
    pub(crate) fn check(&self) -> Result<(), ConfigError> {
        let Some(timeout) = self.function_timeout else {
            return Ok(());
        };
        for (var, lease) in [
            ("GRANARY_CLAIM_LEASE_SECS", self.claim_lease),
            ("GRANARY_ROUTE_LEASE_SECS", self.route_lease),
        ] {
            if lease <= timeout {
                return Err(ConfigError::Invalid {
                    var,
                    value: lease.as_secs().to_string(),
                    why: format!(
                        "a lease must outlast the function's timeout ({}s, GRANARY_FUNCTION_TIMEOUT_SECS), or a second invocation can take over work the first is still doing",
                        timeout.as_secs()
                    ),
                });
            }
        }
        Ok(())
    }
}
