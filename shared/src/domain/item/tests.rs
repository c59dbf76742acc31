use super::*;
use crate::domain::layout::items::{inflight_key, record_key};
use chrono::Duration;
use ItemState::*;

fn new(state: ItemState) -> ItemRecord {
    NewItem {
        id: GranuleId::parse("g1").unwrap(),
        name: "file one.h5".into(),
        state,
        reason: "found".into(),
        raw_file_hash: Some("ab".into()),
        size: Some(5),
        checksum: None,
        source: Some("https://example/x".into()),
        source_modified: None,
    }
    .into_record(Utc::now(), "discover")
}

#[test]
fn applying_a_listed_transition_updates_state_seq_attempts_and_log() {
    let r = new(Discovered);
    assert_eq!((r.seq, r.attempts.download), (0, 0));
    let t = r.created + Duration::seconds(5);
    let n = r
        .apply(&Change::to(Downloading, "begin"), t, "download")
        .unwrap();
    assert_eq!(n.state, Downloading);
    assert_eq!(n.previous_state, Some(Discovered));
    assert_eq!((n.seq, n.attempts.download), (1, 1));
    assert_eq!(n.attempts.download_started_at, Some(t));
    assert_eq!(n.created, r.created, "created never changes");
    assert_eq!(n.last_updated, t);
    assert!(n
        .log_messages
        .last()
        .unwrap()
        .ends_with("DISCOVERED → DOWNLOADING: begin"));
    assert!(!n.workflow_complete);
    let e = HistoryEntry::of(&n);
    assert_eq!(
        (e.from, e.to, e.seq, e.attempt),
        (Some(Discovered), Downloading, 1, 1)
    );
    assert_eq!(e.record, n);
}

#[test]
fn an_illegal_change_is_refused_and_names_both_states() {
    let r = new(Discovered);
    let err = r
        .apply(&Change::to(Processed, "?"), Utc::now(), "x")
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "an item cannot go from DISCOVERED to PROCESSED"
    );
}

#[test]
fn only_a_stored_product_completes_the_workflow_and_corruption_reopens_it() {
    let mut r = new(Ready);
    for (to, complete, terminal) in [
        (Processing, false, false),
        (Processed, true, true),
        (ProcessingFailed, false, false),
        (Abandoned, false, true),
    ] {
        r = r.apply(&Change::to(to, "x"), Utc::now(), "t").unwrap();
        assert_eq!(
            (r.workflow_complete, r.terminal),
            (complete, terminal),
            "{to}"
        );
    }
    assert_eq!(r.attempts.processing, 1);
    let skipped = new(Skipped);
    assert_eq!((skipped.workflow_complete, skipped.terminal), (false, true));
}

#[test]
fn a_field_only_change_keeps_state_and_seq() {
    let r = new(Downloaded);
    let n = r
        .apply(
            &Change {
                reason: "waiting for ancillary data".into(),
                ..Change::default()
            },
            Utc::now(),
            "admit",
        )
        .unwrap();
    assert_eq!((n.state, n.seq), (Downloaded, 0));
    assert_eq!(n.log_messages.len(), 2);
}

#[test]
fn log_messages_are_capped_keeping_the_newest() {
    let mut r = new(Downloaded);
    for i in 0..(MAX_LOG_MESSAGES + 7) {
        r = r
            .apply(
                &Change {
                    reason: format!("note {i}"),
                    ..Change::default()
                },
                Utc::now(),
                "t",
            )
            .unwrap();
    }
    assert_eq!(r.log_messages.len(), MAX_LOG_MESSAGES);
    assert!(r
        .log_messages
        .last()
        .unwrap()
        .ends_with(&format!("note {}", MAX_LOG_MESSAGES + 6)));
}

#[test]
fn keys_are_hive_partitioned_and_unique_per_transition() {
    let r = new(Discovered);
    let e = HistoryEntry::of(&r);
    let day = r.created.format("%Y-%m-%d");
    assert_eq!(
        e.key("history/"),
        format!("history/date={day}/state=DISCOVERED/g1.00000.json")
    );
    assert_eq!(record_key("items/", &r.id), "items/g1.json");
    assert_eq!(
        inflight_key("inflight/", Processing, &r.id),
        "inflight/PROCESSING/g1"
    );
}

#[test]
fn ids_from_hashes_are_key_safe_and_stable() {
    let a = id_from_hash("sha256:0123456789abcdef0123456789abcdef0123456789").unwrap();
    assert_eq!(a.as_str(), "f0123456789abcdef0123456789abcdef");
    assert_eq!(
        a,
        id_from_hash("sha256:0123456789abcdef0123456789abcdef0123456789").unwrap()
    );
}

#[test]
fn finders_match_on_every_field_given() {
    let r = new(Downloaded);
    let all = ItemQuery::default();
    assert!(all.matches(&r));
    let q = |f: &dyn Fn(&mut ItemQuery)| {
        let mut q = ItemQuery::default();
        f(&mut q);
        q.matches(&r)
    };
    assert!(q(&|q| q.name = Some("file one.h5".into())));
    assert!(!q(&|q| q.name = Some("file".into())));
    assert!(q(&|q| q.state = Some(Downloaded)));
    assert!(!q(&|q| q.state = Some(Ready)));
    assert!(q(&|q| q.workflow_complete = Some(false)));
    assert!(q(
        &|q| q.updated_after = Some(r.last_updated - Duration::seconds(1))
    ));
    assert!(!q(&|q| q.updated_after = Some(r.last_updated)));
    assert!(q(
        &|q| q.log_message = Some(Regex::new("created DOWN").unwrap())
    ));
    assert!(!q(&|q| q.log_message = Some(Regex::new("^nope").unwrap())));
    assert!(q(&|q| q.created_on = Some(r.created.date_naive())));
    assert!(!q(&|q| q.created_on = r.created.date_naive().pred_opt()));
}
