//! A campaign's outcome: every granule accounted for from its logs and the failure DLQ, with
//! the Batch simulator's and the request counters' figures.

use super::{dlq_message_of, peek_each, Campaign};
use crate::granule_list::Places;
use anyhow::Result;
use granary::contracts::messages::ItemNotice;
use granary::domain::granule::{GranuleId, GranuleProcessingEvent};
use granary::domain::layout::logs::{LogKey, LogOutcome};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// What the granules' logs say, by each granule's place in the campaign's list.
struct LogsRead {
    /// The attempt at which each granule succeeded (0: never), in 16 bits (a granule's
    /// attempts are a handful; 65,535 at most are told apart): 20 MB less at ten million
    /// granules, whose accounting sets the bench's peak RSS.
    success_attempt: Vec<u16>,
    /// Whether each granule has a log under outcome=failure.
    still_failing: Vec<bool>,
    /// Log objects read.
    logs: u64,
}

/// What the failure DLQ holds for this campaign.
struct DlqRead {
    messages: u64,
    by_reason: BTreeMap<String, u64>,
    /// By place, as the logs are: a dead letter of a granule not in the list is no outcome of
    /// this campaign's (a set of 200,000 ids was ~20 MB at the accounting's peak).
    dead: Vec<bool>,
    stale_parked_retries: u64,
    /// The messages themselves, when the campaign keeps them.
    kept: Vec<granary::ports::ReceivedMessage>,
}

impl Campaign {
    pub async fn summarize(&self, wall: Duration) -> Result<Summary> {
        let parser = &self.runtime.ctx.config.layout.id_parser;
        // Per granule, by its place in the campaign's list: a million granules' logs are read
        // one partition folder at a time, never all keys at once.
        let places = self.granules.places()?;
        let LogsRead {
            success_attempt,
            still_failing,
            logs,
        } = self.read_logs(&places).await?;
        let dlq = self.read_dlq(&places, &success_attempt).await?;
        let platform = |g: &str| {
            GranuleId::parse(g)
                .map(|id| parser.facts(&id).platform_label().to_owned())
                .unwrap_or_default()
        };
        let dead = &dlq.dead;
        let mut per_platform: BTreeMap<String, PlatformCounts> = BTreeMap::new();
        let mut attempts_histogram: BTreeMap<u32, u64> = BTreeMap::new();
        let mut succeeded = 0u64;
        for (g, &attempt) in self.granules.iter().zip(&success_attempt) {
            if attempt == 0 {
                continue;
            }
            succeeded += 1;
            per_platform.entry(platform(&g)).or_default().succeeded += 1;
            *attempts_histogram.entry(u32::from(attempt)).or_default() += 1;
        }
        for (g, _) in self.granules.iter().zip(dead).filter(|(_, &d)| d) {
            per_platform.entry(platform(&g)).or_default().dead_lettered += 1;
        }
        let unaccounted = success_attempt
            .iter()
            .zip(dead)
            .filter(|(&attempt, &d)| attempt == 0 && !d)
            .count() as u64;
        let ended_twice = success_attempt
            .iter()
            .zip(dead)
            .filter(|(&attempt, &d)| attempt > 0 && d)
            .count() as u64;
        let events_dlq = self.events_dlq.depth().await?;
        let n = self.granules.len().max(1) as f64;
        let secs = wall.as_secs_f64().max(1e-9);
        let sim = &self.runtime.simulator.stats;
        Ok(Summary {
            granules: self.granules.len() as u64,
            succeeded,
            dead_lettered: dead.iter().filter(|d| **d).count() as u64,
            dlq_messages: dlq.messages,
            stale_parked_retries: dlq.stale_parked_retries,
            still_failing_logs: still_failing.iter().filter(|f| **f).count() as u64,
            unaccounted,
            ended_twice,
            per_platform,
            attempts_histogram,
            dlq_by_reason: dlq.by_reason,
            events_dlq: events_dlq.visible + events_dlq.in_flight,
            log_objects: logs,
            batch_jobs: sim.jobs,
            batch_internal_retries: sim.batch_internal_retries,
            events_emitted: sim.events,
            duplicate_events: sim.duplicates,
            delayed_events: sim.delayed,
            wall_secs: secs,
            granules_per_sec: n / secs,
            s3_requests: self.counts.s3_total(),
            sqs_requests: self.counts.sqs_total(),
            s3_per_granule: self.counts.s3_total() as f64 / n,
            sqs_per_granule: self.counts.sqs_total() as f64 / n,
            dlq: dlq.kept,
        })
    }

    /// Every log of the campaign's granules, one partition folder at a time.
    async fn read_logs(&self, places: &Places) -> Result<LogsRead> {
        let ctx = &self.runtime.ctx;
        let prefix = &ctx.config.layout.log_prefix;
        let parser = &ctx.config.layout.id_parser;
        let mut success_attempt: Vec<u16> = vec![0; self.granules.len()];
        let attempt_of = |a: u32| u16::try_from(a).unwrap_or(u16::MAX);
        let mut still_failing: Vec<bool> = vec![false; self.granules.len()];
        let mut partitions: BTreeSet<String> = BTreeSet::new();
        for g in self.granules.iter() {
            let Ok(id) = GranuleId::parse(&g) else {
                continue;
            };
            let facts = parser.facts(&id);
            for outcome in [LogOutcome::Success, LogOutcome::Failure] {
                partitions.insert(LogKey::new(outcome, &facts, &id, 1).partition_prefix(prefix));
            }
        }
        let mut logs = 0u64;
        for partition in &partitions {
            for meta in ctx.store.list(partition).await? {
                let Ok(key) = LogKey::parse(prefix, &meta.key) else {
                    continue;
                };
                logs += 1;
                let Some(i) = places.of(key.granule_id.as_str()) else {
                    continue;
                };
                match key.outcome {
                    LogOutcome::Success => {
                        success_attempt[i] = success_attempt[i].max(attempt_of(key.attempt))
                    }
                    LogOutcome::Failure => still_failing[i] = true,
                }
            }
        }
        Ok(LogsRead {
            success_attempt,
            still_failing,
            logs,
        })
    }

    /// The failure DLQ's messages of this campaign, each granule's dead letter told from a
    /// stale parked retry by the attempt it succeeded at.
    async fn read_dlq(&self, places: &Places, success_attempt: &[u16]) -> Result<DlqRead> {
        let ctx = &self.runtime.ctx;
        let mut read = DlqRead {
            messages: 0,
            by_reason: BTreeMap::new(),
            dead: vec![false; self.granules.len()],
            stale_parked_retries: 0,
            kept: Vec::new(),
        };
        peek_each(ctx.failure_dlq.as_ref(), |m| {
            // Another campaign's dead letters are not this one's outcomes.
            if !dlq_message_of(ctx.campaign(), &m.body) {
                return;
            }
            read.messages += 1;
            *read
                .by_reason
                .entry(
                    m.attributes
                        .get("reason")
                        .cloned()
                        .unwrap_or_else(|| "(no reason)".into()),
                )
                .or_default() += 1;
            if let Ok(e) = serde_json::from_str::<GranuleProcessingEvent>(&m.body) {
                let at = places.of(e.granule_id.as_str());
                if is_stale_parked_retry(&m, at.map(|i| u32::from(success_attempt[i]))) {
                    read.stale_parked_retries += 1;
                } else if let Some(i) = at {
                    read.dead[i] = true;
                }
            } else if let Ok(n) = serde_json::from_str::<ItemNotice>(&m.body) {
                // An imported file whose downloads were spent (IGNORE): its item notice.
                if let Some(i) = places.of(n.item_id.as_str()) {
                    read.dead[i] = true;
                }
            }
            if self.keep_dlq_messages {
                read.kept.push(m);
            }
        })
        .await?;
        Ok(read)
    }
}

#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct PlatformCounts {
    pub succeeded: u64,
    pub dead_lettered: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub granules: u64,
    pub succeeded: u64,
    pub dead_lettered: u64,
    pub dlq_messages: u64,
    /// Retry messages SQS parked on the failure DLQ (the requeuer failed on them
    /// maxReceiveCount times) for granules that then succeeded through another copy: stale,
    /// neither dead-lettered nor lost ([`is_stale_parked_retry`]).
    pub stale_parked_retries: u64,
    /// Granules with logs under outcome=failure (should equal the dead-lettered ones).
    pub still_failing_logs: u64,
    /// Granules neither succeeded nor dead-lettered: lost work. Must be 0.
    pub unaccounted: u64,
    /// Granules both succeeded and dead-lettered (a dead letter that is not a stale parked
    /// retry): an end handled twice, two ways. Must be 0.
    pub ended_twice: u64,
    pub per_platform: BTreeMap<String, PlatformCounts>,
    /// The attempt at which each successful granule succeeded.
    pub attempts_histogram: BTreeMap<u32, u64>,
    pub dlq_by_reason: BTreeMap<String, u64>,
    /// Events that failed the monitor five times (should be 0).
    pub events_dlq: u64,
    pub log_objects: u64,
    pub batch_jobs: u64,
    pub batch_internal_retries: u64,
    pub events_emitted: u64,
    pub duplicate_events: u64,
    pub delayed_events: u64,
    pub wall_secs: f64,
    pub granules_per_sec: f64,
    pub s3_requests: u64,
    pub sqs_requests: u64,
    pub s3_per_granule: f64,
    pub sqs_per_granule: f64,
    /// The DLQ's messages as read for this summary, when the campaign keeps them
    /// ([`Campaign::keep_dlq_messages`]; reading hides them for a while, so callers use these
    /// rather than reading again).
    #[serde(skip)]
    pub dlq: Vec<granary::ports::ReceivedMessage>,
}

/// A retry message on the failure DLQ that the retry queue's redrive policy moved there (its
/// outcome is RETRYABLE: the requeuer failed on it maxReceiveCount times, "Amazon SQS moves the
/// message to a dead-letter queue", Amazon SQS Developer Guide, "Using dead-letter queues"),
/// for a granule that succeeded at or after the attempt it retried: another copy of the same
/// message (SQS delivers at least once; the monitor may send twice) went through. It is not a
/// final failure: `granary redrive` of it finds the next attempt already submitted.
pub fn is_stale_parked_retry(
    m: &granary::ports::ReceivedMessage,
    succeeded_at: Option<u32>,
) -> bool {
    let retried = serde_json::from_str::<GranuleProcessingEvent>(&m.body).map(|e| e.attempt);
    parked_by_sqs(m) && matches!((retried, succeeded_at), (Ok(a), Some(s)) if s > a)
}

/// A message on the failure DLQ that the retry queue's redrive policy moved there, not one
/// granary sent: it keeps the monitor's attributes, outcome RETRYABLE (granary's own dead
/// letters are NON_RETRYABLE).
pub fn parked_by_sqs(m: &granary::ports::ReceivedMessage) -> bool {
    use granary::contracts::messages::{attribute, Outcome};
    m.attributes.get(attribute::OUTCOME).map(String::as_str) == Some(Outcome::Retryable.as_str())
}
