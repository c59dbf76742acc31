use super::*;
use crate::adapters::memory::MemoryStore;
use ItemState::*;

fn items() -> Items {
    Items::new(Arc::new(MemoryStore::new()), ItemPrefixes::default())
}

fn new_item(id: &str, state: ItemState) -> NewItem {
    NewItem {
        id: GranuleId::parse(id).unwrap(),
        name: id.into(),
        state,
        reason: "test".into(),
        raw_file_hash: None,
        size: None,
        checksum: None,
        source: None,
        source_modified: None,
    }
}

#[tokio::test]
async fn a_second_create_returns_the_existing_record_untouched() {
    let items = items();
    let Created::New(first) = items.create(new_item("a", Discovered), "t").await.unwrap() else {
        panic!("first create must create");
    };
    let second = items.create(new_item("a", Ready), "t").await.unwrap();
    assert_eq!(second, Created::Existing(first));
    assert_eq!(
        items
            .history(&GranuleId::parse("a").unwrap())
            .await
            .unwrap()
            .len(),
        1
    );
}

fn submitted(job: &str) -> Vec<Change> {
    vec![Change {
        job_id: Some(job.into()),
        ..Change::to(Processing, "submitted")
    }]
}

/// The feeder's known-granule check found no records just before: the batch does not read them
/// again, and a record made in between (an import) is kept and left to the caller, not
/// overwritten.
#[tokio::test]
async fn a_batch_known_absent_skips_its_reads_and_keeps_a_record_made_since() {
    let store = Arc::new(MemoryStore::new());
    let items = Items::new(store.clone(), ItemPrefixes::default());
    let at = "2026-11-24T10:00:00Z".parse::<DateTime<Utc>>().unwrap();
    items
        .create(new_item("since", Ready), "importer")
        .await
        .unwrap();
    let batch = ["a", "since"]
        .iter()
        .map(|id| (new_item(id, Ready), submitted(&format!("job-{id}"))))
        .collect();
    let made = items
        .create_batch(
            "w.1",
            at,
            "feeder",
            batch,
            BatchCalls {
                at_once: 2,
                known_absent: true,
            },
            |_| true,
        )
        .await
        .unwrap();
    assert_eq!(
        made.iter().map(Option::is_some).collect::<Vec<_>>(),
        vec![true, false],
        "the record made since is left to the caller (its in-step check needs a read)"
    );
    let since = GranuleId::parse("since").unwrap();
    let kept = items.get(&since).await.unwrap().unwrap().value;
    assert_eq!((kept.state, kept.seq), (Ready, 0), "not overwritten");
}

#[tokio::test]
async fn a_batch_creation_writes_a_record_each_and_one_history_object_per_state() {
    let store = Arc::new(MemoryStore::new());
    let items = Items::new(store.clone(), ItemPrefixes::default());
    let at = "2026-11-24T10:00:00Z".parse::<DateTime<Utc>>().unwrap();
    items.create(new_item("old", Ready), "t").await.unwrap();
    let batch = |ids: &[&str]| -> Vec<(NewItem, Vec<Change>)> {
        ids.iter()
            .map(|id| (new_item(id, Ready), submitted(&format!("job-{id}"))))
            .collect()
    };
    let made = items
        .create_batch(
            "w.1",
            at,
            "feeder",
            batch(&["a", "old", "b"]),
            BatchCalls {
                at_once: 4,
                known_absent: false,
            },
            |_| false,
        )
        .await
        .unwrap();
    assert_eq!(
        made.iter().map(Option::is_some).collect::<Vec<_>>(),
        vec![true, false, true],
        "the item with a record is left to the caller"
    );
    let objects: Vec<String> = store
        .list("history/")
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.key)
        .filter(|k| is_batch_history_key(k))
        .collect();
    assert_eq!(
        objects,
        vec![
            "history/date=2026-11-24/state=PROCESSING/_batch.w.1.jsonl",
            "history/date=2026-11-24/state=READY/_batch.w.1.jsonl"
        ]
    );
    assert!(
        items.inflight().await.unwrap().is_empty(),
        "no marker: the window's open marker stands for them"
    );
    let a = GranuleId::parse("a").unwrap();
    let record = items.get(&a).await.unwrap().unwrap().value;
    assert_eq!((record.state, record.seq), (Processing, 1));
    assert!(record.in_batch_state());
    let history = items.history(&a).await.unwrap();
    assert_eq!(
        history
            .iter()
            .map(|e| (e.seq, e.from, e.to))
            .collect::<Vec<_>>(),
        vec![(0, None, Ready), (1, Some(Ready), Processing)]
    );
    assert_eq!(
        history[1].record, record,
        "the line carries the record as written"
    );

    // A retry (the run died after the records) makes nothing and writes nothing new.
    let before = store.list("").await.unwrap().len();
    let again = items
        .create_batch(
            "w.1",
            at,
            "feeder",
            batch(&["a", "b"]),
            BatchCalls {
                at_once: 4,
                known_absent: false,
            },
            |_| false,
        )
        .await
        .unwrap();
    assert!(
        again.iter().all(Option::is_some),
        "made by this batch before: done, with nothing written"
    );
    assert_eq!(store.list("").await.unwrap().len(), before);

    // A no-op decision owes nothing (the entry is a line); the next transition gets its own
    // object and leaves the batch state.
    items.advance(&a, "t", |_| None).await.unwrap();
    items
        .advance(&a, "monitor", |_| Some(Change::to(Processed, "done")))
        .await
        .unwrap();
    let history = items.history(&a).await.unwrap();
    assert_eq!(
        history.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    assert!(!items.get(&a).await.unwrap().unwrap().value.in_batch_state());
}

#[tokio::test]
async fn a_batch_written_before_its_records_is_completed_by_the_retry() {
    let store = Arc::new(MemoryStore::new());
    let items = Items::new(store.clone(), ItemPrefixes::default());
    let at = "2026-11-24T10:00:00Z".parse::<DateTime<Utc>>().unwrap();
    let batch = vec![(new_item("a", Ready), submitted("job-a"))];
    items
        .create_batch(
            "w.2",
            at,
            "feeder",
            batch.clone(),
            BatchCalls {
                at_once: 1,
                known_absent: false,
            },
            |_| false,
        )
        .await
        .unwrap();
    // As if the run had died after the batch objects: the record is gone, the lines stay.
    store.delete("items/a.json").await.unwrap();
    let made = items
        .create_batch(
            "w.2",
            at,
            "feeder",
            batch,
            BatchCalls {
                at_once: 1,
                known_absent: false,
            },
            |_| false,
        )
        .await
        .unwrap();
    assert!(made[0].is_some());
    let a = GranuleId::parse("a").unwrap();
    let history = items.history(&a).await.unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(
        history[1].record,
        items.get(&a).await.unwrap().unwrap().value,
        "the retry's record equals the line the first run wrote"
    );
}

#[tokio::test]
async fn timed_states_are_indexed_while_the_item_is_in_them() {
    let items = items();
    let id = GranuleId::parse("a").unwrap();
    items.create(new_item("a", Ready), "t").await.unwrap();
    items
        .advance(&id, "t", |_| Some(Change::to(Processing, "go")))
        .await
        .unwrap();
    assert_eq!(
        items.inflight().await.unwrap(),
        vec![(Processing, id.clone())]
    );
    items
        .advance(&id, "t", |_| Some(Change::to(Processed, "ok")))
        .await
        .unwrap();
    assert!(items.inflight().await.unwrap().is_empty());
    let h = items.history(&id).await.unwrap();
    let path: Vec<_> = h.iter().map(|e| (e.from, e.to)).collect();
    assert_eq!(
        path,
        vec![
            (None, Ready),
            (Some(Ready), Processing),
            (Some(Processing), Processed)
        ]
    );
}

#[tokio::test]
async fn an_illegal_decision_is_an_error_and_changes_nothing() {
    let items = items();
    let id = GranuleId::parse("a").unwrap();
    items.create(new_item("a", Discovered), "t").await.unwrap();
    let err = items
        .advance(&id, "t", |_| Some(Change::to(Processed, "?")))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "item a: an item cannot go from DISCOVERED to PROCESSED"
    );
    assert_eq!(
        items.get(&id).await.unwrap().unwrap().value.state,
        Discovered
    );
}

/// A multi-step write (PROCESSING_FAILED → READY → PROCESSING) holds the entries of its steps
/// in the record; the next transition writes them as objects, with the bodies the history showed
/// while the record held them, before it moves the record.
#[tokio::test]
async fn a_multi_step_writes_entries_become_objects_when_the_record_moves_on() {
    let store = Arc::new(MemoryStore::new());
    let items = Items::new(store.clone(), ItemPrefixes::default());
    let id = GranuleId::parse("a").unwrap();
    items.create(new_item("a", Ready), "t").await.unwrap();
    let step = |to: ItemState| move |_: &ItemRecord| vec![Change::to(to, "step")];
    items
        .advance_steps(&id, "t", step(Processing))
        .await
        .unwrap();
    items
        .advance_steps(&id, "t", step(ProcessingFailed))
        .await
        .unwrap();
    items
        .advance_steps(&id, "t", |_| {
            vec![
                Change::to(Ready, "retry"),
                Change::to(Processing, "submit 2"),
            ]
        })
        .await
        .unwrap();
    let objects = || async { store.list("history/").await.unwrap().len() };
    let before = items.history(&id).await.unwrap();
    assert_eq!(before.len(), 5);
    assert_eq!(objects().await, 3, "entries 3 and 4 are the record's");
    items
        .advance_steps(&id, "t", step(Processed))
        .await
        .unwrap();
    let after = items.history(&id).await.unwrap();
    assert_eq!(
        after[..5],
        before[..],
        "the held entries, written unchanged"
    );
    assert_eq!(after.len(), 6);
    assert_eq!(objects().await, 5);
    let none = items.advance_steps(&id, "t", |_| Vec::new()).await.unwrap();
    assert!(matches!(none, Changed::Unchanged(_)));
    assert_eq!(items.history(&id).await.unwrap(), after);
    assert_eq!(objects().await, 5, "a no-op writes nothing");
    // The record holds only the last write's earlier steps; its entries carry none.
    let record = items.get(&id).await.unwrap().unwrap().value;
    assert!(record.earlier_steps.is_empty());
    assert!(after.iter().all(|e| e.record.earlier_steps.is_empty()));
}

/// A record holds the entries of its latest write: nothing is written for them until the record
/// moves on, a no-op writes nothing, the next transition writes them as objects before the
/// record moves, and the history reads the objects and the record together.
#[tokio::test]
async fn a_record_holds_its_latest_entries_until_it_moves_on() {
    let store = Arc::new(MemoryStore::new());
    let items = Items::new(store.clone(), ItemPrefixes::default());
    let id = GranuleId::parse("a").unwrap();
    let objects = || async {
        let mut seqs = Vec::new();
        for meta in store.list("history/").await.unwrap() {
            let body = store.get(&meta.key).await.unwrap().unwrap().body;
            seqs.push(serde_json::from_slice::<HistoryEntry>(&body).unwrap().seq);
        }
        seqs.sort_unstable();
        seqs
    };
    let seqs = |h: Vec<HistoryEntry>| h.iter().map(|e| e.seq).collect::<Vec<_>>();
    items.create(new_item("a", Discovered), "t").await.unwrap();
    assert_eq!(
        objects().await,
        Vec::<u32>::new(),
        "a creation writes no entry"
    );
    assert_eq!(seqs(items.history(&id).await.unwrap()), vec![0]);
    items
        .advance(&id, "t", |_| Some(Change::to(Downloading, "go")))
        .await
        .unwrap();
    assert_eq!(objects().await, vec![0], "the creation's entry, moved past");
    let none = items.advance(&id, "t", |_| None).await.unwrap();
    assert!(matches!(none, Changed::Unchanged(_)));
    assert_eq!(objects().await, vec![0], "a no-op writes nothing");
    items
        .advance(&id, "t", |_| Some(Change::to(Downloaded, "stored")))
        .await
        .unwrap();
    assert_eq!(objects().await, vec![0, 1]);
    let history = items.history(&id).await.unwrap();
    assert_eq!(seqs(history.clone()), vec![0, 1, 2]);
    let record = items.get(&id).await.unwrap().unwrap().value;
    assert_eq!(history.last(), Some(&HistoryEntry::of(&record)));
}

#[tokio::test]
async fn a_creation_along_changes_names_its_earlier_steps_until_the_next_transition() {
    let items = items();
    let id = GranuleId::parse("a").unwrap();
    let Created::New(r) = items
        .create_along(new_item("a", Ready), &submitted("job-a"), "t")
        .await
        .unwrap()
    else {
        panic!("must create");
    };
    let owed: Vec<u32> = r.earlier_steps.iter().map(|e| e.seq).collect();
    assert_eq!(owed, vec![0]);
    let moved = items
        .advance(&id, "t", |_| Some(Change::to(Processed, "ok")))
        .await
        .unwrap();
    assert!(moved.record().unwrap().earlier_steps.is_empty());
}

#[tokio::test]
async fn several_steps_are_one_write_with_a_history_entry_each() {
    let items = items();
    let id = GranuleId::parse("a").unwrap();
    items.create(new_item("a", Ready), "t").await.unwrap();
    items
        .advance(&id, "t", |_| Some(Change::to(Processing, "submit 1")))
        .await
        .unwrap();
    items
        .advance(&id, "t", |_| Some(Change::to(ProcessingFailed, "spot")))
        .await
        .unwrap();
    let retry = |r: &ItemRecord| {
        if r.state == ProcessingFailed {
            vec![
                Change::to(Ready, "retry"),
                Change::to(Processing, "submit 2"),
            ]
        } else {
            Vec::new()
        }
    };
    let out = items.advance_steps(&id, "t", retry).await.unwrap();
    let r = out.record().unwrap();
    assert_eq!((r.state, r.seq, r.attempts.processing), (Processing, 4, 2));
    // again: nothing to do, nothing written twice
    let again = items.advance_steps(&id, "t", retry).await.unwrap();
    assert!(matches!(again, Changed::Unchanged(_)));
    let path: Vec<_> = items
        .history(&id)
        .await
        .unwrap()
        .iter()
        .map(|e| (e.seq, e.to))
        .collect();
    assert_eq!(
        path,
        vec![
            (0, Ready),
            (1, Processing),
            (2, ProcessingFailed),
            (3, Ready),
            (4, Processing)
        ]
    );
    // an illegal step anywhere refuses the whole decision
    let err = items
        .advance_steps(&id, "t", |_| {
            vec![Change::to(Processed, "ok"), Change::to(Ready, "?")]
        })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("from PROCESSED to READY"), "{err}");
    assert_eq!(
        items.get(&id).await.unwrap().unwrap().value.state,
        Processing
    );
}

mod looking_for_records {
    use super::*;
    use crate::adapters::tap::counting::RequestCounts;
    use crate::adapters::tap::TappedStore;
    use proptest::prelude::*;
    use std::sync::atomic::Ordering;

    fn id(n: u32) -> GranuleId {
        GranuleId::parse(&format!("HLS.S30.T{n:06}.2022001")).unwrap()
    }

    /// Items over a store holding records for `with_records`, and the store's request counts.
    async fn store_with(with_records: &[u32]) -> (Items, Arc<RequestCounts>) {
        let memory = Arc::new(MemoryStore::new());
        for n in with_records {
            let key = record_key("items/", &id(*n));
            memory
                .put(&key, Bytes::from_static(b"{}"), PutCondition::Overwrite)
                .await
                .unwrap();
        }
        let counts = Arc::new(RequestCounts::default());
        let store: Arc<dyn ObjectStore> = Arc::new(TappedStore {
            inner: memory,
            tap: counts.clone(),
        });
        (Items::new(store, ItemPrefixes::default()), counts)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// Whatever lies between the keys sought (records thick or thin, pages cut anywhere,
        /// the pages running out), each granule is found exactly when its record is there.
        #[test]
        fn each_granule_is_found_exactly_when_its_record_exists(
            records in proptest::collection::btree_set(0u32..6_000, 0..3_000),
            sought in proptest::collection::vec(0u32..6_000, 0..400),
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
            runtime.block_on(async {
                let records: Vec<u32> = records.into_iter().collect();
                let (items, _) = store_with(&records).await;
                let ids: Vec<GranuleId> = sought.iter().map(|n| id(*n)).collect();
                let found = items.exist(&ids).await.unwrap();
                let truth: Vec<bool> =
                    sought.iter().map(|n| records.binary_search(n).is_ok()).collect();
                assert_eq!(found, truth);
            });
        }
    }

    #[tokio::test]
    async fn a_window_of_a_sorted_inventory_is_looked_at_with_a_few_list_pages() {
        // A campaign's records below and above the window, none in it but every tenth.
        let mut records: Vec<u32> = (0..20_000).chain(40_000..60_000).collect();
        records.extend((20_000..30_000).step_by(10));
        let (items, counts) = store_with(&records).await;
        let window: Vec<GranuleId> = (20_000..30_000).map(id).collect();
        let found = items.exist(&window).await.unwrap();
        assert_eq!(found.iter().filter(|f| **f).count(), 1_000);
        assert!(found.iter().step_by(10).all(|f| *f));
        assert_eq!(counts.s3_get.load(Ordering::Relaxed), 0, "no GET a granule");
        // 10,000 keys at 1,000 a page, each page starting at the next key sought.
        let pages = counts.s3_list.load(Ordering::Relaxed);
        assert!(pages <= 11, "{pages} LIST pages for a window of 10,000");
    }

    #[tokio::test]
    async fn records_thick_between_the_keys_sought_fall_back_to_a_get_each() {
        // Every granule of the campaign has a record; the window is every 1,000th (an
        // inventory in no order over them): each page answers for one key only.
        let records: Vec<u32> = (0..60_000).collect();
        let (items, counts) = store_with(&records).await;
        let window: Vec<GranuleId> = (0..60_000).step_by(2_000).map(id).collect();
        let found = items.exist(&window).await.unwrap();
        assert!(found.iter().all(|f| *f));
        let pages = counts.s3_list.load(Ordering::Relaxed) as usize;
        let gets = counts.s3_get.load(Ordering::Relaxed) as usize;
        assert_eq!(
            pages, 1,
            "a page that answered for one key stops the listing"
        );
        assert_eq!(pages + gets, window.len(), "one request a key after all");
    }
}

/// The reconciler's light read agrees with the whole record at every step of a retry: created,
/// submitted, failed and submitted again (the steps move the state and the processing attempt
/// the light read reports), and says nothing of a record that is not there.
#[tokio::test]
async fn a_records_standing_is_its_state_and_processing_attempt() {
    let items = items();
    let id = GranuleId::parse("a").unwrap();
    assert_eq!(items.standing(&id).await.unwrap(), None);
    items.create(new_item("a", Ready), "t").await.unwrap();
    let steps: [Vec<Change>; 3] = [
        submitted("j1"),
        vec![Change::to(ProcessingFailed, "spot")],
        vec![Change::to(Ready, "retry"), Change::to(Processing, "again")],
    ];
    let mut seen = Vec::new();
    for step in std::iter::once(Vec::new()).chain(steps) {
        if !step.is_empty() {
            items
                .advance_steps(&id, "t", |_| step.clone())
                .await
                .unwrap();
        }
        let whole = items.look(&id).await.unwrap().unwrap();
        let standing = items.standing(&id).await.unwrap().unwrap();
        assert_eq!(
            (standing.state, standing.processing),
            (whole.state, whole.attempts.processing)
        );
        seen.push((standing.state, standing.processing));
    }
    assert_eq!(
        seen,
        vec![
            (Ready, 0),
            (Processing, 1),
            (ProcessingFailed, 1),
            (Processing, 2)
        ]
    );
}

/// A record is past an attempt once it is at a later attempt, or at that attempt's end (any
/// state but PROCESSING there); a record still PROCESSING it, or at an earlier attempt, is not.
#[test]
fn a_record_is_past_an_attempt_at_its_end_or_a_later_attempt() {
    let at = |state, processing| Standing { state, processing };
    let cases = [
        (at(Processing, 1), 1, false),
        (at(Processing, 1), 2, false),
        (at(Ready, 0), 1, false),
        (at(ProcessingFailed, 1), 1, true),
        (at(Processed, 1), 1, true),
        (at(Abandoned, 1), 1, true),
        (at(Ready, 1), 1, true),
        (at(Processing, 2), 1, true),
        (at(ProcessingFailed, 1), 2, false),
    ];
    for (standing, attempt, past) in cases {
        assert_eq!(standing.past(attempt), past, "{standing:?} at {attempt}");
    }
}
