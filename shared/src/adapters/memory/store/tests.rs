use super::*;

#[tokio::test]
async fn conditional_writes() {
    let s = MemoryStore::new();
    let e1 = s
        .put("k", Bytes::from_static(b"1"), PutCondition::IfAbsent)
        .await
        .unwrap();
    assert!(matches!(
        s.put("k", Bytes::from_static(b"2"), PutCondition::IfAbsent)
            .await,
        Err(StoreError::Conflict { .. })
    ));
    let e2 = s
        .put(
            "k",
            Bytes::from_static(b"2"),
            PutCondition::IfMatch(e1.clone()),
        )
        .await
        .unwrap();
    assert!(matches!(
        s.put("k", Bytes::from_static(b"3"), PutCondition::IfMatch(e1))
            .await,
        Err(StoreError::Conflict { .. })
    ));
    assert_eq!(s.get("k").await.unwrap().unwrap().etag, e2);
    // If-Match where no object is: S3 answers 404, and so does the twin.
    assert!(matches!(
        s.put(
            "gone",
            Bytes::from_static(b"1"),
            PutCondition::IfMatch(e2.clone())
        )
        .await,
        Err(StoreError::NotFound { .. })
    ));
    assert_eq!(
        s.get_suffix("k", 10).await.unwrap(),
        (Bytes::from_static(b"2"), 1)
    );
    s.put("k2", Bytes::from_static(b"abcdef"), PutCondition::Overwrite)
        .await
        .unwrap();
    assert_eq!(
        s.get_range("k2", 1..3).await.unwrap(),
        Bytes::from_static(b"bc")
    );
    assert_eq!(s.list("k").await.unwrap().len(), 2);
}

#[tokio::test]
async fn folders_under_a_prefix_are_those_a_listing_of_every_key_names() {
    let store = MemoryStore::default();
    for key in [
        "campaigns/v1/claims/a/1.json",
        "campaigns/v1/logs/x.json",
        "campaigns/v2/tracker.json",
        "campaigns/loose.json",
        "campaignsx/v9/a.json",
        "claims/a/1.json",
    ] {
        store
            .put(key, Bytes::from_static(b"{}"), PutCondition::Overwrite)
            .await
            .unwrap();
    }
    let want = vec!["campaigns/v1/".to_owned(), "campaigns/v2/".to_owned()];
    assert_eq!(store.list_folders("campaigns/").await.unwrap(), want);
    let every = store.list("campaigns/").await.unwrap();
    assert_eq!(
        crate::ports::object_store::folders_of("campaigns/", every.iter().map(|m| m.key.as_str())),
        want
    );
    assert!(store.list_folders("nothing/").await.unwrap().is_empty());
}

#[tokio::test]
async fn listing_by_any_prefix_matches_a_plain_filter_of_every_key() {
    let keys = [
        "a",
        "a/b",
        "a/b/c",
        "a/b/c/d",
        "a/bb/c",
        "items/x.json",
        "items/y.json",
        "logs/o=s/p=1/g=1/at=1.json",
        "logs/o=s/p=1/g=1/at=2.json",
        "logs/o=s/p=1/g=2/at=1.json",
        "logs/o=s/p=2/g=3/at=1.json",
        "logs/o=s/p=10/g=3/at=1.json",
        "history/date=D/state=S/x.00001.json",
        "tracker",
    ];
    let s = MemoryStore::new();
    for k in keys {
        s.put(k, Bytes::from_static(b"x"), PutCondition::Overwrite)
            .await
            .unwrap();
    }
    s.delete("a/b/c").await.unwrap();
    let mut all: Vec<&str> = keys.iter().copied().filter(|k| *k != "a/b/c").collect();
    all.sort();
    for prefix in [
        "",
        "a",
        "a/",
        "a/b",
        "a/b/",
        "a/b/c",
        "a/b/c/",
        "i",
        "items/",
        "items/x",
        "logs/",
        "logs/o=s/p=1",
        "logs/o=s/p=1/",
        "logs/o=s/p=1/g=1",
        "logs/o=s/p=1/g=1/",
        "logs/o=s/p=1/g=1/at=2",
        "history/date=D/state=S/",
        "t",
        "zz",
    ] {
        let listed: Vec<String> = s
            .list(prefix)
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.key)
            .collect();
        let wanted: Vec<&str> = all
            .iter()
            .copied()
            .filter(|k| k.starts_with(prefix))
            .collect();
        assert_eq!(listed, wanted, "prefix {prefix:?}");
        // A page from any point, of any size, is the filter's next keys.
        let starts = all
            .iter()
            .flat_map(|k| [k.to_string(), k[..k.len() - 1].to_string()])
            .chain(["", "a/b/", "m", "zzz"].map(String::from));
        for start in starts {
            let after: Vec<&str> = wanted
                .iter()
                .copied()
                .filter(|k| *k > start.as_str())
                .collect();
            for max in 1..4 {
                let (page, truncated) = s.lock().list_page(prefix, &start, max);
                let page: Vec<String> = page.into_iter().map(|m| m.key).collect();
                let want = &after[..after.len().min(max)];
                assert_eq!(page, want, "prefix {prefix:?} after {start:?} max {max}");
                assert_eq!(truncated, after.len() > max, "{prefix:?} {start:?} {max}");
            }
        }
        // Paging through the port's pages gives the whole listing.
        let page = s.list_page(prefix, "").await.unwrap();
        assert!(!page.truncated);
        let paged: Vec<String> = page.objects.into_iter().map(|m| m.key).collect();
        assert_eq!(paged, wanted, "prefix {prefix:?}");
    }
    assert!(s.get("a/b/c").await.unwrap().is_none());
    assert!(s.get("a/b/c/d").await.unwrap().is_some());
}

#[tokio::test]
async fn held_bodies_are_let_go_with_their_objects() {
    let s = MemoryStore::new();
    for body in [&b"first"[..], b"second"] {
        s.put("a", Bytes::from_static(body), PutCondition::Overwrite)
            .await
            .unwrap();
    }
    s.put("b", Bytes::from_static(b"gone"), PutCondition::IfAbsent)
        .await
        .unwrap();
    s.delete("b").await.unwrap();
    s.put("c", Bytes::new(), PutCondition::IfAbsent)
        .await
        .unwrap();
    assert_eq!(s.get("a").await.unwrap().unwrap().body, &b"second"[..]);
    assert!(s.get("b").await.unwrap().is_none());
    assert!(s.get("c").await.unwrap().unwrap().body.is_empty());
    // Only `a`'s latest body is held: replaced, deleted and empty ones are not.
    assert_eq!(s.lock().held.len(), 1);
    assert_eq!(std::mem::size_of::<Entry>(), 16);
}

#[tokio::test]
async fn a_spilling_store_reads_back_what_it_wrote() {
    let s = MemoryStore::spilling(super::super::scratch::tests::tempfile_in_temp_dir());
    let long = Bytes::from((0..200u8).collect::<Vec<u8>>());
    let e1 = s
        .put("a", long.clone(), PutCondition::IfAbsent)
        .await
        .unwrap();
    s.put("b", Bytes::from_static(b"short"), PutCondition::IfAbsent)
        .await
        .unwrap();
    let replaced = Bytes::from(vec![7u8; 100]);
    s.put("a", replaced.clone(), PutCondition::IfMatch(e1.clone()))
        .await
        .unwrap();
    assert_eq!(s.get("a").await.unwrap().unwrap().body, replaced);
    assert_eq!(
        s.get("b").await.unwrap().unwrap().body,
        Bytes::from_static(b"short")
    );
    assert_eq!(
        s.get_range("a", 98..500).await.unwrap(),
        Bytes::from(vec![7u8; 2])
    );
    assert_eq!(
        s.get_suffix("a", 3).await.unwrap(),
        (Bytes::from(vec![7u8; 3]), 100)
    );
    s.copy("a", "c").await.unwrap();
    assert_eq!(s.get("c").await.unwrap().unwrap().body, replaced);
    let sizes: Vec<u64> = s.list("").await.unwrap().iter().map(|m| m.size).collect();
    assert_eq!(sizes, vec![100, 5, 100]);
    // Each write its own ETag (a spilled body's is its frame): the first one no longer
    // matches, the copy is not its source's version.
    let stale = s.put("a", long.clone(), PutCondition::IfMatch(e1.clone()));
    assert!(matches!(stale.await, Err(StoreError::Conflict { .. })));
    let (a, c) = (
        s.get("a").await.unwrap().unwrap(),
        s.get("c").await.unwrap().unwrap(),
    );
    assert!(a.etag != c.etag && a.etag != e1 && c.etag != e1);
    let short = s.get("b").await.unwrap().unwrap().etag;
    s.put(
        "b",
        Bytes::from_static(b"again"),
        PutCondition::IfMatch(short.clone()),
    )
    .await
    .unwrap();
    assert_ne!(s.get("b").await.unwrap().unwrap().etag, short);
}
