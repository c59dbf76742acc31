//! An event bus (EventBridge): the Batch simulator and granary's notifications publish here.

use async_trait::async_trait;

#[derive(Debug, thiserror::Error)]
#[error("event bus: {message}")]
pub struct EventBusError {
    pub message: String,
    /// The SDK's or the handler's own error, when there is one.
    #[source]
    pub source: Option<super::BoxError>,
}

impl EventBusError {
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
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
