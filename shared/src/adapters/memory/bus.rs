use crate::ports::{BusEvent, EventBus, EventBusError};
use async_trait::async_trait;
use std::sync::Mutex;

/// In-memory event bus: keeps what was published.
#[derive(Debug, Default)]
pub struct MemoryEventBus {
    events: Mutex<Vec<BusEvent>>,
}

impl MemoryEventBus {
    pub fn events(&self) -> Vec<BusEvent> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[async_trait]
impl EventBus for MemoryEventBus {
    async fn put_events(&self, events: Vec<BusEvent>) -> Result<(), EventBusError> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(events);
        Ok(())
    }
}
