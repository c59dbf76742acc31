use crate::ports::{OutgoingMessage, Queue, QueueDepth, QueueError, ReceivedMessage};
use async_trait::async_trait;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

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
    state: Mutex<State>,
    redrive: Option<(std::sync::Arc<MemoryQueue>, u32)>,
}

/// The messages, and two indexes so that no request walks the whole queue: a receive looks at
/// visible messages only, a delete finds its message from the receipt handle, and the depth is
/// two counts (a campaign of ten million granules parks 200,000 messages on its DLQ, whose depth
/// the runner asks every round).
#[derive(Debug, Default)]
struct State {
    /// The last id given.
    last_id: u64,
    /// Every message held, by id (in the order they were sent), found from a receipt handle
    /// (`{id}-{receive}`).
    held: BTreeMap<u64, Held>,
    /// The messages that can be received, in the order they were sent.
    visible: BTreeSet<u64>,
    /// The received ones, by when their visibility timeout runs out (each also as its
    /// `invisible_until`).
    in_flight: BTreeSet<(Instant, u64)>,
}

impl State {
    /// Messages whose visibility timeout has run out by `now` are visible again.
    fn wake(&mut self, now: Instant) {
        while let Some(&(until, id)) = self.in_flight.first() {
            if until > now {
                break;
            }
            self.in_flight.pop_first();
            if let Some(h) = self.held.get_mut(&id) {
                h.invisible_until = None;
                self.visible.insert(id);
            }
        }
    }

    /// `id` visible again at once (released, or every timeout run out).
    fn make_visible(&mut self, id: u64) {
        if let Some(h) = self.held.get_mut(&id) {
            if let Some(until) = h.invisible_until.take() {
                self.in_flight.remove(&(until, id));
            }
            self.visible.insert(id);
        }
    }

    fn remove(&mut self, id: u64) -> Option<Held> {
        let h = self.held.remove(&id)?;
        self.visible.remove(&id);
        if let Some(until) = h.invisible_until {
            self.in_flight.remove(&(until, id));
        }
        Some(h)
    }
}

impl MemoryQueue {
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            state: Mutex::new(State::default()),
            redrive: None,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A poisoned lock means a test thread panicked mid-request; the state is still whole.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
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
        let mut st = self.lock();
        st.last_id += 1;
        let id = st.last_id;
        st.visible.insert(id);
        st.held.insert(
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
        self.lock()
            .held
            .values()
            .map(|h| h.message.body.clone())
            .collect()
    }

    /// Every visibility timeout runs out now: in-flight messages become visible again, as they do
    /// on SQS once their timeout passes (the crash-point harness moves time on with this).
    pub fn expire_visibility(&self) {
        let mut st = self.lock();
        let received: Vec<u64> = st.in_flight.iter().map(|&(_, id)| id).collect();
        for id in received {
            st.make_visible(id);
        }
    }

    pub fn messages(&self) -> Vec<OutgoingMessage> {
        self.lock()
            .held
            .values()
            .map(|h| h.message.clone())
            .collect()
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
        let mut st = self.lock();
        st.wake(now);
        let mut out = Vec::new();
        let mut moved = Vec::new();
        let max_receives = self.redrive.as_ref().map(|(_, m)| *m);
        let mut taken = Vec::new();
        for &id in &st.visible {
            if taken.len() >= max as usize {
                break;
            }
            // The receive that would be one too many moves the message instead.
            let too_many = st
                .held
                .get(&id)
                .is_some_and(|h| max_receives.is_some_and(|m| h.receive_count >= m));
            if too_many {
                moved.push(id);
            } else {
                taken.push(id);
            }
        }
        let until = now + Duration::from_secs(u64::from(visibility_timeout_secs));
        for id in taken {
            st.visible.remove(&id);
            let Some(h) = st.held.get_mut(&id) else {
                continue;
            };
            h.receive_count += 1;
            h.invisible_until = Some(until);
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
            st.in_flight.insert((until, id));
        }
        let moved: Vec<Held> = moved.into_iter().filter_map(|id| st.remove(id)).collect();
        drop(st);
        if let Some((dead_letters, _)) = &self.redrive {
            for h in moved {
                dead_letters.push(h.message);
            }
        }
        Ok(out)
    }

    async fn delete(&self, receipt_handle: &str) -> Result<(), QueueError> {
        let mut st = self.lock();
        if let Some(id) = held_by(&st.held, receipt_handle) {
            st.remove(id);
        }
        Ok(())
    }

    async fn release(&self, receipt_handle: &str) -> Result<(), QueueError> {
        let mut st = self.lock();
        if let Some(id) = held_by(&st.held, receipt_handle) {
            st.make_visible(id);
        }
        Ok(())
    }

    async fn depth(&self) -> Result<QueueDepth, QueueError> {
        let mut st = self.lock();
        st.wake(Instant::now());
        Ok(QueueDepth {
            visible: st.visible.len() as u64,
            in_flight: st.in_flight.len() as u64,
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

    #[tokio::test]
    async fn visibility_release_and_delete_keep_the_order_and_the_depth() {
        let q = MemoryQueue::new("q");
        for body in ["a", "b", "c"] {
            q.send(OutgoingMessage::new(body)).await.unwrap();
        }
        let depth = |v, f| QueueDepth {
            visible: v,
            in_flight: f,
        };
        let first = q.receive(2, 30, 0).await.unwrap();
        let bodies: Vec<&str> = first.iter().map(|m| m.body.as_str()).collect();
        assert_eq!(bodies, ["a", "b"], "in the order sent");
        assert_eq!(q.depth().await.unwrap(), depth(1, 2));
        // Released: visible at once, and first again (sent first).
        q.release(&first[0].receipt_handle).await.unwrap();
        assert_eq!(q.depth().await.unwrap(), depth(2, 1));
        let again = q.receive(1, 30, 0).await.unwrap();
        assert_eq!((again[0].body.as_str(), again[0].receive_count), ("a", 2));
        // The first receive's handle no longer names the message.
        q.delete(&first[0].receipt_handle).await.unwrap();
        assert_eq!(q.depth().await.unwrap(), depth(1, 2));
        q.delete(&again[0].receipt_handle).await.unwrap();
        assert_eq!(q.depth().await.unwrap(), depth(1, 1));
        // A timeout of 0: visible again at the next request.
        let c = q.receive(5, 0, 0).await.unwrap();
        assert_eq!(c.len(), 1);
        assert_eq!(q.depth().await.unwrap(), depth(1, 1));
        q.expire_visibility();
        assert_eq!(q.depth().await.unwrap(), depth(2, 0));
        let rest: Vec<String> = q
            .receive(10, 30, 0)
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.body)
            .collect();
        assert_eq!(rest, ["b", "c"]);
    }
}
