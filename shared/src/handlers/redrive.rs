//! Redrive: failure-DLQ messages back to the retry queue, all or filtered, at a capped rate.
//! A message leaves the DLQ only after it is on the retry queue, so an interrupted redrive loses
//! nothing (at worst a message is on both, and the requeuer's claims absorb the duplicate).

use crate::contracts::messages::{attribute, reason_of, Notice, Outcome, RetryMessage};
use crate::domain::granule::GranuleProcessingEvent;
use crate::ports::{OutgoingMessage, Queue, QueueError, ReceivedMessage};
use regex::Regex;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tokio::time::Instant;

/// Which DLQ messages to redrive; every filter set must match.
#[derive(Debug, Clone, Default)]
pub struct RedriveFilter {
    /// Matched against the message's `reason` attribute (the monitor's or requeuer's reason).
    pub reason: Option<Regex>,
    /// The failed attempt's number.
    pub attempt: Option<u32>,
    pub granule: Option<Regex>,
    /// Only these granules (an audit's list)...
    pub granules: Option<std::collections::HashSet<String>>,
    /// ...of this campaign (`None` inside: the unnamed one): the DLQ is the stack's, and another
    /// campaign may have dead-lettered the same granules.
    pub campaign: Option<Option<crate::domain::campaign::Campaign>>,
}

#[derive(Debug, Clone)]
pub struct RedriveOptions {
    pub dry_run: bool,
    /// Stop after this many redriven (or, in a dry run, matched) messages.
    pub max: Option<u64>,
    /// At most this many messages sent per second.
    pub per_second: f64,
    /// How long received messages stay hidden while the DLQ is walked; longer than the walk.
    pub visibility_secs: u32,
}

impl Default for RedriveOptions {
    fn default() -> Self {
        Self {
            dry_run: false,
            max: None,
            per_second: 50.0,
            visibility_secs: 300,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Redriven {
    pub granule_id: String,
    pub attempt: u32,
    pub reason: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedriveSummary {
    pub examined: u64,
    /// Messages matching the filters (redriven, or listed in a dry run).
    pub matched: Vec<Redriven>,
    pub redriven: u64,
    /// Messages that are not a granule (an invalid inventory row, an item timed out downloading):
    /// they need a human, never a retry.
    pub not_granules: u64,
    pub not_matching: u64,
}

impl RedriveFilter {
    fn matches(
        &self,
        event: &GranuleProcessingEvent,
        campaign: Option<&crate::domain::campaign::Campaign>,
        reason: &str,
    ) -> bool {
        self.campaign
            .as_ref()
            .is_none_or(|c| c.as_ref() == campaign)
            && self.matches_attempt(event, reason)
    }

    fn matches_attempt(&self, event: &GranuleProcessingEvent, reason: &str) -> bool {
        self.reason.as_ref().is_none_or(|r| r.is_match(reason))
            && self.attempt.is_none_or(|a| a == event.attempt)
            && self
                .granule
                .as_ref()
                .is_none_or(|g| g.is_match(event.granule_id.as_str()))
            && self
                .granules
                .as_ref()
                .is_none_or(|g| g.contains(event.granule_id.as_str()))
    }
}

pub async fn redrive(
    dlq: &dyn Queue,
    retry: &dyn Queue,
    filter: &RedriveFilter,
    opts: &RedriveOptions,
    progress: &(dyn Fn(&RedriveSummary) + Sync),
) -> Result<RedriveSummary, QueueError> {
    let pick = |m: &ReceivedMessage| -> Result<Pick, QueueError> {
        let Ok(parked) = serde_json::from_str::<RetryMessage>(&m.body) else {
            return Ok(Pick::NotGranule);
        };
        // It goes back as the same campaign's attempt (`domain::campaign`).
        let campaign = parked.campaign;
        // The Spot ends so far go back with it: the redriven attempt is past the budget, so a
        // last chance (`domain::attempt_budget`), and its job carries the count on.
        let spot_ends = parked.spot_ends;
        // The memory it last had comes back with it: an out-of-memory end goes again with
        // more (at the cap, at the cap: an operator decided).
        let (memory_mib, out_of_memory) = (parked.memory_mib, parked.out_of_memory);
        let event = parked.event;
        let reason = reason_of(&m.attributes).to_owned();
        if !filter.matches(&event, campaign.as_ref(), &reason) {
            return Ok(Pick::NotMatching);
        }
        let listed = Redriven {
            granule_id: event.granule_id.to_string(),
            attempt: event.attempt,
            reason: reason.clone(),
        };
        let notice = Notice::new(
            Outcome::Redriven,
            format!("redriven from the DLQ: {reason}"),
        );
        let message = RetryMessage::redriven(event)
            .with_spot_ends(spot_ends)
            .with_memory(memory_mib, out_of_memory)
            .of_campaign(campaign)
            .to_message(&notice)
            .map_err(|e| QueueError::new(retry.name(), e))?;
        Ok(Pick::Move { listed, message })
    };
    walk_and_release(dlq, retry, &pick, opts, progress).await
}

/// Moves Batch events parked in the events DLQ back onto the events queue, unchanged, for the job
/// monitor to handle again: events the monitor failed on five times (a bug since fixed, an
/// outage) and events EventBridge could not deliver (it adds ERROR_CODE / ERROR_MESSAGE
/// attributes, kept as they are). Listed by job name.
pub async fn redrive_events(
    events_dlq: &dyn Queue,
    events_queue: &dyn Queue,
    opts: &RedriveOptions,
    progress: &(dyn Fn(&RedriveSummary) + Sync),
) -> Result<RedriveSummary, QueueError> {
    let pick = |m: &ReceivedMessage| -> Result<Pick, QueueError> {
        let event: Option<serde_json::Value> = serde_json::from_str(&m.body).ok();
        let job_name = event
            .as_ref()
            .and_then(|e| e["detail"]["jobName"].as_str())
            .unwrap_or("(not a Batch event: the monitor will record and dead-letter it)");
        let reason = m
            .attributes
            .get(attribute::EVENTBRIDGE_ERROR_MESSAGE)
            .map(|e| format!("EventBridge could not deliver it: {e}"))
            .unwrap_or_else(|| "the job monitor failed on it repeatedly".to_owned());
        let mut message = OutgoingMessage::new(m.body.clone());
        message.attributes = m.attributes.clone();
        Ok(Pick::Move {
            listed: Redriven {
                granule_id: job_name.to_owned(),
                attempt: 0,
                reason,
            },
            message,
        })
    };
    walk_and_release(events_dlq, events_queue, &pick, opts, progress).await
}

/// Import-queue messages parked in the import DLQ (an import step failed on them as many times
/// as the import queue's redrive policy allows: most often an admission waiting for
/// prerequisites) back onto the import queue, unchanged, for the importer, which decides the
/// item's step again from its record. `items` keeps only the items whose id it matches. Sent
/// before deleted, like every redrive.
pub async fn redrive_imports(
    import_dlq: &dyn Queue,
    import_queue: &dyn Queue,
    items: Option<&Regex>,
    opts: &RedriveOptions,
    progress: &(dyn Fn(&RedriveSummary) + Sync),
) -> Result<RedriveSummary, QueueError> {
    let pick = |m: &ReceivedMessage| -> Result<Pick, QueueError> {
        let parsed: Option<crate::contracts::messages::ImportMessage> =
            serde_json::from_str(&m.body).ok();
        let (item, reason) = match &parsed {
            Some(message) => (
                message.item_id.to_string(),
                match message.step {
                    Some(step) => format!("the importer's {step:?} step failed on it repeatedly"),
                    None => "the importer failed on it repeatedly".to_owned(),
                },
            ),
            // The importer records and dead-letters what is not an import message.
            None => (
                "(not an import message: the importer will record and dead-letter it)".to_owned(),
                "unreadable".to_owned(),
            ),
        };
        if items.is_some_and(|re| !re.is_match(&item)) {
            return Ok(Pick::NotMatching);
        }
        let mut message = OutgoingMessage::new(m.body.clone());
        message.attributes = m.attributes.clone();
        Ok(Pick::Move {
            listed: Redriven {
                granule_id: item,
                attempt: 0,
                reason,
            },
            message,
        })
    };
    walk_and_release(import_dlq, import_queue, &pick, opts, progress).await
}

/// What a redrive does with one message.
enum Pick {
    NotGranule,
    NotMatching,
    Move {
        listed: Redriven,
        message: OutgoingMessage,
    },
}

type Picker<'a> = dyn Fn(&ReceivedMessage) -> Result<Pick, QueueError> + Sync + 'a;

async fn walk_and_release(
    from: &dyn Queue,
    to: &dyn Queue,
    pick: &Picker<'_>,
    opts: &RedriveOptions,
    progress: &(dyn Fn(&RedriveSummary) + Sync),
) -> Result<RedriveSummary, QueueError> {
    let mut walk_state = Walk::default();
    let result = walk(from, to, pick, opts, progress, &mut walk_state).await;
    let Walk {
        summary,
        held,
        moved,
    } = walk_state;
    // Whatever happened (an error included), every message received and not moved goes back on
    // view now, not at its visibility timeout.
    for m in held.iter().filter(|m| !moved.contains(&m.receipt_handle)) {
        if let Err(e) = from.release(&m.receipt_handle).await {
            tracing::warn!(error = %e, "a kept message stays hidden until its visibility timeout");
        }
    }
    result.map(|()| summary)
}

/// What a walk over a DLQ has seen: the summary, every message received, those moved.
#[derive(Default)]
struct Walk {
    summary: RedriveSummary,
    held: Vec<ReceivedMessage>,
    moved: std::collections::HashSet<String>,
}

/// A redrive's receives long-poll, for the least wait SQS allows: a short poll (wait 0) asks only
/// a subset of SQS's servers and may answer empty while messages wait, and the walk ends at the
/// first empty answer, leaving them behind. A long poll asks every server (Amazon SQS Developer
/// Guide, "Amazon SQS short and long polling"; "Setting-up long polling": a wait of 1 second is
/// the minimum). The walk's last, empty, receive costs that second.
const LONG_POLL_SECS: u32 = 1;

async fn walk(
    from: &dyn Queue,
    to: &dyn Queue,
    pick: &Picker<'_>,
    opts: &RedriveOptions,
    progress: &(dyn Fn(&RedriveSummary) + Sync),
    state: &mut Walk,
) -> Result<(), QueueError> {
    let Walk {
        summary,
        held,
        moved,
    } = state;
    let spacing = Duration::from_secs_f64(1.0 / opts.per_second.max(0.001));
    let mut next_send = Instant::now();
    let full = |s: &RedriveSummary| opts.max.is_some_and(|max| s.matched.len() as u64 >= max);
    loop {
        let batch = from
            .receive(10, opts.visibility_secs, LONG_POLL_SECS)
            .await?;
        if batch.is_empty() {
            return Ok(());
        }
        held.extend(batch.iter().cloned());
        for m in batch {
            if full(summary) {
                continue;
            }
            summary.examined += 1;
            let (listed, message) = match pick(&m)? {
                Pick::NotGranule => {
                    summary.not_granules += 1;
                    continue;
                }
                Pick::NotMatching => {
                    summary.not_matching += 1;
                    continue;
                }
                Pick::Move { listed, message } => (listed, message),
            };
            summary.matched.push(listed);
            if opts.dry_run {
                continue;
            }
            let now = Instant::now();
            if next_send > now {
                tokio::time::sleep(next_send - now).await;
            }
            next_send = Instant::now().max(next_send) + spacing;
            to.send(message).await?;
            // Only now does it leave the DLQ.
            from.delete(&m.receipt_handle).await?;
            moved.insert(m.receipt_handle);
            summary.redriven += 1;
            progress(summary);
        }
        if full(summary) {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests;
