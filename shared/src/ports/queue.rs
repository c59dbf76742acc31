//! A message queue bound to one queue (retry queue, failure DLQ, events buffer).

use async_trait::async_trait;
use std::collections::BTreeMap;

#[derive(Debug, thiserror::Error)]
#[error("queue {queue}: {message}")]
pub struct QueueError {
    pub queue: String,
    pub message: String,
    /// The SDK's error itself, when there is one.
    #[source]
    pub source: Option<super::BoxError>,
}

impl QueueError {
    pub fn new(queue: &str, e: impl std::fmt::Display) -> Self {
        Self {
            queue: queue.to_owned(),
            message: e.to_string(),
            source: None,
        }
    }

    /// The same error with the underlying error kept as its source.
    pub fn with_source(self, e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self {
            source: Some(Box::new(e)),
            ..self
        }
    }
}

/// A message to send: body plus string attributes (outcome, reason, ...).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OutgoingMessage {
    pub body: String,
    pub attributes: BTreeMap<String, String>,
}

impl OutgoingMessage {
    pub fn new(body: impl Into<String>) -> Self {
        Self {
            body: body.into(),
            attributes: BTreeMap::new(),
        }
    }

    pub fn with_attribute(mut self, name: &str, value: impl Into<String>) -> Self {
        self.attributes.insert(name.to_owned(), value.into());
        self
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedMessage {
    pub message_id: String,
    pub receipt_handle: String,
    pub body: String,
    pub attributes: BTreeMap<String, String>,
    /// How many times this message has been received, this time included.
    pub receive_count: u32,
    pub sent_at_ms: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct QueueDepth {
    pub visible: u64,
    pub in_flight: u64,
}

#[async_trait]
pub trait Queue: Send + Sync {
    /// A name for errors and logs (the queue URL for SQS).
    fn name(&self) -> &str;
    async fn send(&self, message: OutgoingMessage) -> Result<(), QueueError>;
    async fn receive(
        &self,
        max: u32,
        visibility_timeout_secs: u32,
        wait_secs: u32,
    ) -> Result<Vec<ReceivedMessage>, QueueError>;
    async fn delete(&self, receipt_handle: &str) -> Result<(), QueueError>;
    /// Makes a received message visible again at once (visibility timeout 0).
    async fn release(&self, receipt_handle: &str) -> Result<(), QueueError>;
    async fn depth(&self) -> Result<QueueDepth, QueueError>;
}
