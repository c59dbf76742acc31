use super::pollers::once_per_round;
use super::schedules::feeder_may_run;
use granary::ports::ReceivedMessage;

fn received(id: &str, receipt: &str) -> ReceivedMessage {
    ReceivedMessage {
        message_id: id.into(),
        receipt_handle: receipt.into(),
        body: String::new(),
        attributes: Default::default(),
        receive_count: 1,
        sent_at_ms: None,
    }
}

/// Each message is invoked once a round, with its newest receipt; distinct messages (a
/// duplicated delivery is one) all stay, in their order; a batch left empty goes.
#[test]
fn a_message_received_twice_in_a_round_is_invoked_once_with_its_latest_receipt() {
    let round = vec![
        vec![received("a", "a1"), received("b", "b1")],
        vec![received("c", "c1")],
        vec![received("a", "a2"), received("d", "d1")],
        vec![received("b", "b2")],
    ];
    let kept: Vec<Vec<(String, String)>> = once_per_round(round)
        .into_iter()
        .map(|batch| {
            batch
                .into_iter()
                .map(|m| (m.message_id, m.receipt_handle))
                .collect()
        })
        .collect();
    let pair = |id: &str, receipt: &str| (id.to_owned(), receipt.to_owned());
    assert_eq!(
        kept,
        vec![
            vec![pair("c", "c1")],
            vec![pair("a", "a2"), pair("d", "d1")],
            vec![pair("b", "b2")],
        ]
    );
    let distinct = vec![vec![received("x", "x1"), received("y", "y1")]];
    assert_eq!(once_per_round(distinct.clone()), distinct);
}

#[test]
fn the_feeder_waits_while_more_than_two_runs_of_ends_are_unhandled() {
    assert!(feeder_may_run(0, 10_000));
    assert!(feeder_may_run(20_000, 10_000));
    assert!(!feeder_may_run(20_001, 10_000));
    // A count too large to double waits for nothing (the backlog cannot pass it).
    assert!(feeder_may_run(u64::MAX, u64::MAX / 2 + 1));
    assert!(!feeder_may_run(u64::MAX, u64::MAX / 2 - 1));
}
