use crate::ports::{OutgoingMessage, Queue, QueueDepth, QueueError, ReceivedMessage};
use async_trait::async_trait;
use std::collections::BTreeMap;
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

/// In-memory queue with SQS's visibility-timeout semantics (no long polling) and, when given
/// one, its redrive policy: "When the ReceiveCount for a message exceeds the maxReceiveCount for
/// a queue, Amazon SQS moves the message to the dead-letter-queue" (SQS API reference,
/// SetQueueAttributes, RedrivePolicy). The move happens on the receive that would have been
/// one too many; the message keeps its body and attributes.
#[derive(Debug)]
pub struct MemoryQueue {
    name: String,
    /// The last id given, and the messages held by id: in the order they were sent, and found
    /// from a receipt handle (`{id}-{receive}`) without a scan, so a queue ten thousand events
    /// deep costs no more per delete than one.
    state: Mutex<(u64, BTreeMap<u64, Held>)>,
    redrive: Option<(std::sync::Arc<MemoryQueue>, u32)>,
}

impl MemoryQueue {
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            state: Mutex::new((0, BTreeMap::new())),
            redrive: None,
        }
    }

    /// The same queue with a redrive policy: after `max_receive_count` receives without a
    /// delete, a message moves to `dead_letters`.
    pub fn with_redrive(
        mut self,
        dead_letters: std::sync::Arc<MemoryQueue>,
        max_receive_count: u32,
    ) -> Self {
        self.redrive = Some((dead_letters, max_receive_count.max(1)));
        self
    }

    fn push(&self, message: OutgoingMessage) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.0 += 1;
        let id = st.0;
        st.1.insert(
            id,
            Held {
                id,
                message,
                receive_count: 0,
                invisible_until: None,
                receipt: None,
            },
        );
    }

    /// Every message still held, visible or not.
    pub fn bodies(&self) -> Vec<String> {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.1.values().map(|h| h.message.body.clone()).collect()
    }

    /// Every visibility timeout runs out now: in-flight messages become visible again, as they do
    /// on SQS once their timeout passes (the crash-point harness moves time on with this).
    pub fn expire_visibility(&self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        for h in st.1.values_mut() {
            h.invisible_until = None;
        }
    }

    pub fn messages(&self) -> Vec<OutgoingMessage> {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.1.values().map(|h| h.message.clone()).collect()
    }
}

/// The message a receipt handle names, while that handle is its latest (an older receive's
/// handle names nothing, as the message was received again since).
fn held_by(held: &BTreeMap<u64, Held>, receipt_handle: &str) -> Option<u64> {
    let id = receipt_handle.split_once('-')?.0.parse().ok()?;
    let h = held.get(&id)?;
    (h.receipt.as_deref() == Some(receipt_handle)).then_some(id)
}

#[async_trait]
impl Queue for MemoryQueue {
    fn name(&self) -> &str {
        &self.name
    }

    async fn send(&self, message: OutgoingMessage) -> Result<(), QueueError> {
        self.push(message);
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
        let mut moved = Vec::new();
        let max_receives = self.redrive.as_ref().map(|(_, m)| *m);
        for h in st.1.values_mut() {
            if out.len() >= max as usize {
                break;
            }
            if h.invisible_until.is_some_and(|t| t > now) {
                continue;
            }
            // The receive that would be one too many moves the message instead.
            if max_receives.is_some_and(|m| h.receive_count >= m) {
                moved.push(h.id);
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
        let moved: Vec<Held> = moved.iter().filter_map(|id| st.1.remove(id)).collect();
        drop(st);
        if let Some((dead_letters, _)) = &self.redrive {
            for h in moved {
                dead_letters.push(h.message);
            }
        }
        Ok(out)
    }

    async fn delete(&self, receipt_handle: &str) -> Result<(), QueueError> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(id) = held_by(&st.1, receipt_handle) {
            st.1.remove(&id);
        }
        Ok(())
    }

    async fn release(&self, receipt_handle: &str) -> Result<(), QueueError> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = held_by(&st.1, receipt_handle).and_then(|id| st.1.get_mut(&id)) {
            h.invisible_until = None;
        }
        Ok(())
    }

    async fn depth(&self) -> Result<QueueDepth, QueueError> {
        let now = Instant::now();
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let in_flight =
            st.1.values()
                .filter(|h| h.invisible_until.is_some_and(|t| t > now))
                .count() as u64;
        Ok(QueueDepth {
            visible: st.1.len() as u64 - in_flight,
            in_flight,
        })
    }
}

#[cfg(test)]
mod redrive_tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn a_message_received_max_receive_count_times_moves_to_the_dead_letter_queue() {
        let dlq = Arc::new(MemoryQueue::new("dlq"));
        let q = MemoryQueue::new("q").with_redrive(dlq.clone(), 2);
        q.send(OutgoingMessage::new("m").with_attribute("reason", "r"))
            .await
            .unwrap();
        for n in 1..=2 {
            let got = q.receive(10, 30, 0).await.unwrap();
            assert_eq!((got.len(), got[0].receive_count), (1, n));
            q.expire_visibility();
        }
        // The third receive would exceed maxReceiveCount: the message moves instead.
        assert!(q.receive(10, 30, 0).await.unwrap().is_empty());
        assert!(q.bodies().is_empty());
        let parked = dlq.messages();
        assert_eq!(parked.len(), 1);
        assert_eq!(
            (
                parked[0].body.as_str(),
                parked[0].attributes["reason"].as_str()
            ),
            ("m", "r")
        );
    }
}
