//! Pacing by what comes after: the feeder holds back while the system that takes granary's
//! products (an archive's intake queue, a catalogue's ingest) has more waiting than it can take.
//! The original campaign's real bottleneck was its archive, not Batch: feeding faster than the
//! archive ingests only moves the backlog from one queue to another and ages it there.
//!
//! The signal is an SQS queue's backlog: `ApproximateNumberOfMessages`, the messages available
//! for retrieval (Amazon SQS API Reference, GetQueueAttributes). Messages in flight are work the
//! consumer has already taken, so they do not count. SQS calls every count approximate and says
//! it may take a minute after producers stop to settle; a feeder that runs every few minutes
//! reads it once a run, which is all the precision a brake needs.

/// The downstream queue the feeder waits on (`GRANARY_DOWNSTREAM_QUEUE_URL`) and the backlog it
/// tolerates (`GRANARY_DOWNSTREAM_MAX_MESSAGES`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DownstreamGate {
    pub queue_url: String,
    /// The feeder submits nothing while more than this many messages wait in the queue.
    pub max_messages: u64,
}

/// The backlog a downstream queue may hold before the feeder waits, unless configured: about
/// a feeder run's worth of granules at the template's default submit count.
pub const DEFAULT_MAX_MESSAGES: u64 = 1_000;

/// Why the feeder waits this run, or `None` when the downstream queue can take more. `waiting`
/// is the queue's backlog (messages available for retrieval).
pub fn feeder_waits(gate: &DownstreamGate, waiting: u64) -> Option<String> {
    (waiting > gate.max_messages).then(|| {
        format!(
            "downstream queue {} holds {waiting} messages waiting, over its limit of {} \
             (GRANARY_DOWNSTREAM_MAX_MESSAGES): the feeder waits for it to drain",
            queue_name(&gate.queue_url),
            gate.max_messages
        )
    })
}

/// The queue's name: the last segment of its URL.
fn queue_name(url: &str) -> &str {
    url.trim_end_matches('/').rsplit('/').next().unwrap_or(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(max: u64) -> DownstreamGate {
        DownstreamGate {
            queue_url: "https://sqs.us-east-1.amazonaws.com/123456789012/archive-intake".into(),
            max_messages: max,
        }
    }

    #[test]
    fn the_feeder_waits_only_past_the_limit_and_says_which_queue_and_how_full() {
        assert_eq!(feeder_waits(&gate(100), 0), None);
        assert_eq!(feeder_waits(&gate(100), 100), None, "at the limit: feeds");
        let why = feeder_waits(&gate(100), 101).unwrap();
        assert!(why.contains("archive-intake"), "{why}");
        assert!(why.contains("101 messages"), "{why}");
        assert!(why.contains("limit of 100"), "{why}");
    }

    #[test]
    fn a_limit_of_zero_waits_for_an_empty_queue() {
        assert_eq!(feeder_waits(&gate(0), 0), None);
        assert!(feeder_waits(&gate(0), 1).is_some());
    }
}
