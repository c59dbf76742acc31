//! Redrive: failure-DLQ messages back to the retry queue, all or filtered, at a capped rate.
//! A message leaves the DLQ only after it is on the retry queue, so an interrupted redrive loses
//! nothing (at worst a message is on both, and the requeuer's claims absorb the duplicate).

use crate::domain::granule::GranuleProcessingEvent;
use crate::ports::{OutgoingMessage, Queue, QueueError, ReceivedMessage};
use regex::Regex;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Which DLQ messages to redrive; every filter set must match.
#[derive(Debug, Clone, Default)]
pub struct RedriveFilter {
    /// Matched against the message's `reason` attribute (the monitor's or requeuer's reason).
    pub reason: Option<Regex>,
    /// The failed attempt's number.
    pub attempt: Option<u32>,
    pub granule: Option<Regex>,
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
    /// Messages that are not a granule (an invalid inventory row, a timed-out import item):
    /// they need a human, never a retry.
    pub not_granules: u64,
    pub not_matching: u64,
}

/// The retry message a redrive sends: the granule's event, flagged so the requeuer grants the
/// next attempt even past the attempt budget (an operator asked for it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryMessage {
    #[serde(flatten)]
    pub event: GranuleProcessingEvent,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub redrive: bool,
}

impl RedriveFilter {
    fn matches(&self, event: &GranuleProcessingEvent, reason: &str) -> bool {
        self.reason.as_ref().is_none_or(|r| r.is_match(reason))
            && self.attempt.is_none_or(|a| a == event.attempt)
            && self
                .granule
                .as_ref()
                .is_none_or(|g| g.is_match(event.granule_id.as_str()))
    }
}

pub async fn redrive(
    dlq: &dyn Queue,
    retry: &dyn Queue,
    filter: &RedriveFilter,
    opts: &RedriveOptions,
    progress: &(dyn Fn(&RedriveSummary) + Sync),
) -> Result<RedriveSummary, QueueError> {
    let mut walk_state = Walk::default();
    let result = walk(dlq, retry, filter, opts, progress, &mut walk_state).await;
    let Walk {
        summary,
        held,
        moved,
    } = walk_state;
    // Whatever happened (an error included), every message received and not moved goes back on
    // view now, not at its visibility timeout.
    for m in held.iter().filter(|m| !moved.contains(&m.receipt_handle)) {
        if let Err(e) = dlq.release(&m.receipt_handle).await {
            tracing::warn!(error = %e, "a kept message stays hidden until its visibility timeout");
        }
    }
    result.map(|()| summary)
}

/// What a walk over the DLQ has seen: the summary, every message received, those moved.
#[derive(Default)]
struct Walk {
    summary: RedriveSummary,
    held: Vec<ReceivedMessage>,
    moved: std::collections::HashSet<String>,
}

async fn walk(
    dlq: &dyn Queue,
    retry: &dyn Queue,
    filter: &RedriveFilter,
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
    loop {
        let batch = dlq.receive(10, opts.visibility_secs, 0).await?;
        if batch.is_empty() {
            return Ok(());
        }
        held.extend(batch.iter().cloned());
        for m in batch {
            if opts
                .max
                .is_some_and(|max| summary.matched.len() as u64 >= max)
            {
                continue;
            }
            summary.examined += 1;
            let Ok(event) = serde_json::from_str::<GranuleProcessingEvent>(&m.body) else {
                summary.not_granules += 1;
                continue;
            };
            let reason = m.attributes.get("reason").cloned().unwrap_or_default();
            if !filter.matches(&event, &reason) {
                summary.not_matching += 1;
                continue;
            }
            summary.matched.push(Redriven {
                granule_id: event.granule_id.to_string(),
                attempt: event.attempt,
                reason: reason.clone(),
            });
            if opts.dry_run {
                continue;
            }
            let now = Instant::now();
            if next_send > now {
                tokio::time::sleep(next_send - now).await;
            }
            next_send = Instant::now().max(next_send) + spacing;
            let body = serde_json::to_string(&RetryMessage {
                event,
                redrive: true,
            })
            .unwrap_or_default();
            retry
                .send(
                    OutgoingMessage::new(body)
                        .with_attribute("outcome", "REDRIVEN")
                        .with_attribute("reason", format!("redriven from the DLQ: {reason}")),
                )
                .await?;
            // Only now does it leave the DLQ.
            dlq.delete(&m.receipt_handle).await?;
            moved.insert(m.receipt_handle);
            summary.redriven += 1;
            progress(summary);
        }
        if opts
            .max
            .is_some_and(|max| summary.matched.len() as u64 >= max)
        {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::memory::MemoryQueue;
    use crate::domain::granule::GranuleId;

    async fn dlq_with(messages: &[(&str, u32, &str)]) -> MemoryQueue {
        let q = MemoryQueue::new("dlq");
        for (g, a, reason) in messages {
            let e = GranuleProcessingEvent {
                granule_id: GranuleId::parse(g).unwrap(),
                attempt: *a,
            };
            q.send(
                OutgoingMessage::new(serde_json::to_string(&e).unwrap())
                    .with_attribute("reason", *reason),
            )
            .await
            .unwrap();
        }
        q.send(OutgoingMessage::new(
            r#"{"raw_granule_id":null,"inventory_key":"i","row":3}"#,
        ))
        .await
        .unwrap();
        q
    }

    #[tokio::test]
    async fn filters_combine_and_a_dry_run_moves_nothing() {
        let dlq = dlq_with(&[
            ("HLS.S30.A", 1, "exit code 2"),
            ("HLS.L30.B", 4, "attempts exhausted"),
            ("HLS.S30.C", 4, "attempts exhausted"),
        ])
        .await;
        let retry = MemoryQueue::new("retry");
        let filter = RedriveFilter {
            reason: Some(Regex::new("exhausted").unwrap()),
            granule: Some(Regex::new(r"^HLS\.S30\.").unwrap()),
            ..RedriveFilter::default()
        };
        let dry = RedriveOptions {
            dry_run: true,
            ..RedriveOptions::default()
        };
        let s = redrive(&dlq, &retry, &filter, &dry, &|_| {}).await.unwrap();
        assert_eq!(
            s.matched
                .iter()
                .map(|m| m.granule_id.as_str())
                .collect::<Vec<_>>(),
            ["HLS.S30.C"]
        );
        assert_eq!(
            (s.examined, s.redriven, s.not_granules, s.not_matching),
            (4, 0, 1, 2)
        );
        assert_eq!(dlq.depth().await.unwrap().visible, 4, "all back on view");
        assert_eq!(retry.depth().await.unwrap().visible, 0);

        let s = redrive(&dlq, &retry, &filter, &RedriveOptions::default(), &|_| {})
            .await
            .unwrap();
        assert_eq!(s.redriven, 1);
        assert_eq!(dlq.depth().await.unwrap().visible, 3);
        let sent = retry.receive(10, 30, 0).await.unwrap();
        let m: RetryMessage = serde_json::from_str(&sent[0].body).unwrap();
        assert_eq!(
            (m.event.granule_id.as_str(), m.event.attempt, m.redrive),
            ("HLS.S30.C", 4, true)
        );
    }

    #[tokio::test]
    async fn attempt_filter_and_max() {
        let dlq = dlq_with(&[("A", 1, "x"), ("B", 1, "x"), ("C", 2, "x")]).await;
        let retry = MemoryQueue::new("retry");
        let filter = RedriveFilter {
            attempt: Some(1),
            ..RedriveFilter::default()
        };
        let opts = RedriveOptions {
            max: Some(1),
            ..RedriveOptions::default()
        };
        let s = redrive(&dlq, &retry, &filter, &opts, &|_| {})
            .await
            .unwrap();
        assert_eq!(s.redriven, 1);
        assert_eq!(dlq.depth().await.unwrap().visible, 3);
        let s = redrive(&dlq, &retry, &filter, &RedriveOptions::default(), &|_| {})
            .await
            .unwrap();
        assert_eq!(s.redriven, 1, "the other attempt-1 message");
        assert_eq!(retry.depth().await.unwrap().visible, 2);
    }

    #[test]
    fn retry_messages_without_the_flag_read_as_plain_events() {
        let m: RetryMessage = serde_json::from_str(r#"{"granule_id":"G","attempt":2}"#).unwrap();
        assert!(!m.redrive);
        let plain = serde_json::to_string(&RetryMessage {
            event: m.event.clone(),
            redrive: false,
        })
        .unwrap();
        assert_eq!(plain, r#"{"granule_id":"G","attempt":2}"#);
    }
}
