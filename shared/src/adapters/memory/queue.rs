use crate::ports::{OutgoingMessage, Queue, QueueDepth, QueueError, ReceivedMessage};
use async_trait::async_trait;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
struct Held {
    id: u64,
    message: OutgoingMessage,
    receive_count: u32,
    invisible_until: Option<Instant>,
    receipt: Option<String>,
}

/// In-memory queue with SQS's visibility-timeout semantics (no long polling).
#[derive(Debug)]
pub struct MemoryQueue {
    name: String,
    state: Mutex<(u64, Vec<Held>)>,
}

impl MemoryQueue {
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            state: Mutex::new((0, Vec::new())),
        }
    }

    /// Every message still held, visible or not.
    pub fn bodies(&self) -> Vec<String> {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.1.iter().map(|h| h.message.body.clone()).collect()
    }

    /// Every visibility timeout runs out now: in-flight messages become visible again, as they do
    /// on SQS once their timeout passes (the crash-point harness moves time on with this).
    pub fn expire_visibility(&self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        for h in st.1.iter_mut() {
            h.invisible_until = None;
        }
    }

    pub fn messages(&self) -> Vec<OutgoingMessage> {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.1.iter().map(|h| h.message.clone()).collect()
    }
}

#[async_trait]
impl Queue for MemoryQueue {
    fn name(&self) -> &str {
        &self.name
    }

    async fn send(&self, message: OutgoingMessage) -> Result<(), QueueError> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.0 += 1;
        let id = st.0;
        st.1.push(Held {
            id,
            message,
            receive_count: 0,
            invisible_until: None,
            receipt: None,
        });
        Ok(())
    }

    async fn receive(
        &self,
        max: u32,
        visibility_timeout_secs: u32,
        _wait: u32,
    ) -> Result<Vec<ReceivedMessage>, QueueError> {
        let now = Instant::now();
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        for h in st.1.iter_mut() {
            if out.len() >= max as usize {
                break;
            }
            if h.invisible_until.is_some_and(|t| t > now) {
                continue;
            }
            h.receive_count += 1;
            h.invisible_until = Some(now + Duration::from_secs(u64::from(visibility_timeout_secs)));
            let receipt = format!("{}-{}", h.id, h.receive_count);
            h.receipt = Some(receipt.clone());
            out.push(ReceivedMessage {
                message_id: h.id.to_string(),
                receipt_handle: receipt,
                body: h.message.body.clone(),
                attributes: h.message.attributes.clone(),
                receive_count: h.receive_count,
                sent_at_ms: None,
            });
        }
        Ok(out)
    }

    async fn delete(&self, receipt_handle: &str) -> Result<(), QueueError> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.1.retain(|h| h.receipt.as_deref() != Some(receipt_handle));
        Ok(())
    }

    async fn release(&self, receipt_handle: &str) -> Result<(), QueueError> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        for h in st.1.iter_mut() {
            if h.receipt.as_deref() == Some(receipt_handle) {
                h.invisible_until = None;
            }
        }
        Ok(())
    }

    async fn depth(&self) -> Result<QueueDepth, QueueError> {
        let now = Instant::now();
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let in_flight =
            st.1.iter()
                .filter(|h| h.invisible_until.is_some_and(|t| t > now))
                .count() as u64;
        Ok(QueueDepth {
            visible: st.1.len() as u64 - in_flight,
            in_flight,
        })
    }
}
