use super::*;
use crate::adapters::memory::MemoryQueue;
use crate::domain::granule::GranuleId;

async fn dlq_with(messages: &[(&str, u32, &str)]) -> MemoryQueue {
    let q = MemoryQueue::new("dlq");
    for (g, a, reason) in messages {
        let e = GranuleProcessingEvent {
            granule_id: GranuleId::parse(g).unwrap(),
            attempt: *a,
        };
        q.send(
            OutgoingMessage::new(serde_json::to_string(&e).unwrap())
                .with_attribute(attribute::REASON, *reason),
        )
        .await
        .unwrap();
    }
    q.send(OutgoingMessage::new(
        r#"{"raw_granule_id":null,"inventory_key":"i","row":3}"#,
    ))
    .await
    .unwrap();
    q
}

#[tokio::test]
async fn filters_combine_and_a_dry_run_moves_nothing() {
    let dlq = dlq_with(&[
        ("HLS.S30.A", 1, "exit code 2"),
        ("HLS.L30.B", 4, "attempts exhausted"),
        ("HLS.S30.C", 4, "attempts exhausted"),
    ])
    .await;
    let retry = MemoryQueue::new("retry");
    let filter = RedriveFilter {
        reason: Some(Regex::new("exhausted").unwrap()),
        granule: Some(Regex::new(r"^HLS\.S30\.").unwrap()),
        ..RedriveFilter::default()
    };
    let dry = RedriveOptions {
        dry_run: true,
        ..RedriveOptions::default()
    };
    let s = redrive(&dlq, &retry, &filter, &dry, &|_| {}).await.unwrap();
    assert_eq!(
        s.matched
            .iter()
            .map(|m| m.granule_id.as_str())
            .collect::<Vec<_>>(),
        ["HLS.S30.C"]
    );
    assert_eq!(
        (s.examined, s.redriven, s.not_granules, s.not_matching),
        (4, 0, 1, 2)
    );
    assert_eq!(dlq.depth().await.unwrap().visible, 4, "all back on view");
    assert_eq!(
        retry.depth().await.unwrap(),
        crate::ports::QueueDepth::default()
    );

    let s = redrive(&dlq, &retry, &filter, &RedriveOptions::default(), &|_| {})
        .await
        .unwrap();
    assert_eq!(s.redriven, 1);
    assert_eq!(dlq.depth().await.unwrap().visible, 3);
    let sent = retry.receive(10, 30, 0).await.unwrap();
    let m: RetryMessage = serde_json::from_str(&sent[0].body).unwrap();
    assert_eq!(
        (m.event.granule_id.as_str(), m.event.attempt, m.redrive),
        ("HLS.S30.C", 4, true)
    );
}

#[tokio::test]
async fn attempt_filter_and_max() {
    let dlq = dlq_with(&[("A", 1, "x"), ("B", 1, "x"), ("C", 2, "x")]).await;
    let retry = MemoryQueue::new("retry");
    let filter = RedriveFilter {
        attempt: Some(1),
        ..RedriveFilter::default()
    };
    let opts = RedriveOptions {
        max: Some(1),
        ..RedriveOptions::default()
    };
    let s = redrive(&dlq, &retry, &filter, &opts, &|_| {})
        .await
        .unwrap();
    assert_eq!(s.redriven, 1);
    assert_eq!(dlq.depth().await.unwrap().visible, 3);
    let s = redrive(&dlq, &retry, &filter, &RedriveOptions::default(), &|_| {})
        .await
        .unwrap();
    assert_eq!(s.redriven, 1, "the other attempt-1 message");
    assert_eq!(retry.depth().await.unwrap().visible, 2);
}

#[tokio::test]
async fn parked_events_go_back_to_the_events_queue_unchanged() {
    let dlq = MemoryQueue::new("events-dlq");
    let event = r#"{"detail-type":"Batch Job State Change","detail":{"jobName":"HLS_S30_A-a1-x"}}"#;
    dlq.send(
        OutgoingMessage::new(event)
            .with_attribute(attribute::EVENTBRIDGE_ERROR_MESSAGE, "KMS access denied"),
    )
    .await
    .unwrap();
    dlq.send(OutgoingMessage::new("not json")).await.unwrap();
    let events = MemoryQueue::new("events");
    let dry = RedriveOptions {
        dry_run: true,
        ..RedriveOptions::default()
    };
    let s = redrive_events(&dlq, &events, &dry, &|_| {}).await.unwrap();
    assert_eq!((s.examined, s.redriven, s.matched.len()), (2, 0, 2));
    assert_eq!(
        dlq.depth().await.unwrap().visible,
        2,
        "a dry run moves nothing"
    );
    let s = redrive_events(&dlq, &events, &RedriveOptions::default(), &|_| {})
        .await
        .unwrap();
    assert_eq!(s.redriven, 2);
    assert!(s.matched[0].reason.contains("KMS access denied"));
    assert_eq!(
        dlq.depth().await.unwrap(),
        crate::ports::QueueDepth::default()
    );
    let moved = events.receive(10, 30, 0).await.unwrap();
    assert_eq!(moved[0].body, event);
    assert_eq!(
        moved[0].attributes[attribute::EVENTBRIDGE_ERROR_MESSAGE],
        "KMS access denied"
    );
    assert_eq!(moved[1].body, "not json");
}

#[tokio::test]
async fn parked_import_messages_go_back_to_the_import_queue_filtered_by_item() {
    let dlq = MemoryQueue::new("import-dlq");
    for (item, step) in [
        ("fa", Some("admit")),
        ("fb", None),
        ("gc", Some("download")),
    ] {
        let body = match step {
            Some(step) => format!(r#"{{"item_id":"{item}","step":"{step}"}}"#),
            None => format!(r#"{{"item_id":"{item}"}}"#),
        };
        dlq.send(OutgoingMessage::new(body)).await.unwrap();
    }
    let queue = MemoryQueue::new("import");
    let only_f = Regex::new("^f").unwrap();
    let s = redrive_imports(
        &dlq,
        &queue,
        Some(&only_f),
        &RedriveOptions::default(),
        &|_| {},
    )
    .await
    .unwrap();
    assert_eq!((s.examined, s.redriven, s.not_matching), (3, 2, 1));
    assert!(s.matched[0].reason.contains("Admit"), "{:?}", s.matched);
    let moved = queue.receive(10, 30, 0).await.unwrap();
    let items: Vec<String> = moved
        .iter()
        .map(|m| {
            serde_json::from_str::<crate::contracts::messages::ImportMessage>(&m.body)
                .unwrap()
                .item_id
                .to_string()
        })
        .collect();
    assert_eq!(items, vec!["fa", "fb"]);
    assert_eq!(dlq.depth().await.unwrap().visible, 1, "gc stays parked");
}
