//! An event bus (EventBridge): the Batch simulator and granary's notifications publish here.

use async_trait::async_trait;

#[derive(Debug, thiserror::Error)]
#[error("event bus: {0}")]
pub struct EventBusError(pub String);

#[derive(Debug, Clone, PartialEq)]
pub struct BusEvent {
    pub source: String,
    pub detail_type: String,
    pub detail: serde_json::Value,
    pub resources: Vec<String>,
}

#[async_trait]
pub trait EventBus: Send + Sync {
    /// Publishes events (any number; the adapter batches as the service requires).
    async fn put_events(&self, events: Vec<BusEvent>) -> Result<(), EventBusError>;
}
