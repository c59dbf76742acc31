//! The EventBridge rule's twin: Batch's terminal events of one job queue into an SQS queue.

use super::{ACCOUNT, REGION};
use async_trait::async_trait;
use granary::ports::{BusEvent, EventBus, EventBusError, OutgoingMessage, Queue};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The EventBridge rule that buffers Batch events in SQS: terminal state changes of one job
/// queue, delivered as the full event envelope, which is what the job monitor reads.
pub struct RuleToQueue {
    queue: Arc<dyn Queue>,
    job_queue_arn: String,
    serial: AtomicU64,
}

impl RuleToQueue {
    pub fn new(queue: Arc<dyn Queue>, job_queue_arn: &str) -> Self {
        Self {
            queue,
            job_queue_arn: job_queue_arn.to_owned(),
            serial: AtomicU64::new(0),
        }
    }

    /// The rule's pattern: source aws.batch, "Batch Job State Change", this queue, terminal.
    fn matches(&self, e: &BusEvent) -> bool {
        e.source == "aws.batch"
            && e.detail_type == "Batch Job State Change"
            && e.detail["jobQueue"] == self.job_queue_arn.as_str()
            && matches!(e.detail["status"].as_str(), Some("SUCCEEDED" | "FAILED"))
    }
}

/// The envelope EventBridge delivers to a rule's target, in the order of the EventBridge user
/// guide's example ("Amazon EventBridge events").
#[derive(serde::Serialize)]
struct Envelope<'a> {
    version: &'a str,
    id: &'a str,
    #[serde(rename = "detail-type")]
    detail_type: &'a str,
    source: &'a str,
    account: &'a str,
    time: &'a str,
    region: &'a str,
    resources: &'a [String],
    detail: &'a serde_json::Value,
}

#[async_trait]
impl EventBus for RuleToQueue {
    async fn put_events(&self, events: Vec<BusEvent>) -> Result<(), EventBusError> {
        for e in events.into_iter().filter(|e| self.matches(e)) {
            let n = self.serial.fetch_add(1, Ordering::Relaxed) + 1;
            let time = granary::clock::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            // Written straight from the event: `json!` would copy the detail's whole tree
            // before writing it out (~2% of a campaign's CPU, perf).
            let envelope = serde_json::to_string(&Envelope {
                version: "0",
                id: &format!("{n:08x}-0000-4000-8000-000000000000"),
                detail_type: &e.detail_type,
                source: &e.source,
                account: ACCOUNT,
                time: &time,
                region: REGION,
                resources: &e.resources,
                detail: &e.detail,
            })
            .map_err(|err| EventBusError::new(err.to_string()))?;
            self.queue
                .send(OutgoingMessage::new(envelope))
                .await
                .map_err(|err| EventBusError::new(err.to_string()).with_source(err))?;
        }
        Ok(())
    }
}
