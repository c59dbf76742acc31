use super::is_stale_parked_retry;
use granary::ports::ReceivedMessage;

fn on_dlq(outcome: &str, attempt: u32) -> ReceivedMessage {
    ReceivedMessage {
        message_id: "m".into(),
        receipt_handle: "r".into(),
        body: format!(
            r#"{{"granule_id":"HLS.S30.T30DIB.2025039T000129.v2.0","attempt":{attempt}}}"#
        ),
        attributes: [("outcome".to_owned(), outcome.to_owned())].into(),
        receive_count: 1,
        sent_at_ms: None,
    }
}

#[test]
fn only_a_parked_retry_of_a_granule_that_later_succeeded_is_stale() {
    assert!(is_stale_parked_retry(&on_dlq("RETRYABLE", 1), Some(2)));
    // Not yet succeeded, or succeeded at the very attempt that failed: a real question.
    assert!(!is_stale_parked_retry(&on_dlq("RETRYABLE", 1), None));
    assert!(!is_stale_parked_retry(&on_dlq("RETRYABLE", 2), Some(2)));
    // A final failure is never stale, whatever else happened.
    assert!(!is_stale_parked_retry(&on_dlq("NON_RETRYABLE", 1), Some(2)));
}
