use super::describe;
use crate::ports::{BusEvent, EventBus, EventBusError};
use async_trait::async_trait;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;

/// An EventBridge bus ("default" or a custom one).
#[derive(Clone, Debug)]
pub struct EventBridgeBus {
    client: aws_sdk_eventbridge::Client,
    bus_name: String,
}

impl EventBridgeBus {
    pub fn new(client: aws_sdk_eventbridge::Client, bus_name: impl Into<String>) -> Self {
        Self {
            client,
            bus_name: bus_name.into(),
        }
    }
}

/// PutEvents takes at most 10 entries per call.
const MAX_ENTRIES: usize = 10;

#[async_trait]
impl EventBus for EventBridgeBus {
    async fn put_events(&self, events: Vec<BusEvent>) -> Result<(), EventBusError> {
        for chunk in events.chunks(MAX_ENTRIES) {
            let entries = chunk
                .iter()
                .map(|e| {
                    PutEventsRequestEntry::builder()
                        .event_bus_name(&self.bus_name)
                        .source(&e.source)
                        .detail_type(&e.detail_type)
                        .detail(e.detail.to_string())
                        .set_resources(Some(e.resources.clone()))
                        .build()
                })
                .collect::<Vec<_>>();
            let out = self
                .client
                .put_events()
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| {
                    EventBusError::new(format!("PutEvents: {}", describe(&e))).with_source(e)
                })?;
            if out.failed_entry_count > 0 {
                let why: Vec<String> = out
                    .entries
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|e| e.error_message)
                    .collect();
                return Err(EventBusError::new(format!(
                    "PutEvents: {} entries failed: {}",
                    out.failed_entry_count,
                    why.join("; ")
                )));
            }
        }
        Ok(())
    }
}
