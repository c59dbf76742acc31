use super::*;

#[test]
fn ids_are_the_sample_rows_and_each_has_its_place() {
    let list = GranuleList::sample(7, 500);
    let ids: Vec<String> = list.iter().collect();
    let rows: Vec<String> = sample_granules(500, 7)
        .into_iter()
        .map(|r| r.granule_id)
        .collect();
    assert_eq!(ids, rows);
    assert_eq!(list.len(), 500);
    let places = list.places().unwrap();
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(places.of(id), Some(i), "{id}");
    }
    assert_eq!(places.of("HLS.S30.T10SEG.1999001T000000.v2.0"), None);
    assert!(GranuleList::default().is_empty());
}

#[test]
fn an_id_of_a_listed_time_that_is_not_listed_has_no_place() {
    let list = GranuleList::sample(7, 300);
    let places = list.places().unwrap();
    for (i, id) in list.iter().enumerate() {
        assert_eq!(places.of(&id), Some(i), "{id}");
        // The same time on another tile, and a second before it (between two listed ids,
        // in the same step of 30 s as one of them, or the next).
        let other = id.replacen(".T", ".TX", 1);
        assert_eq!(places.of(&other), None, "{other}");
        let time = id.split('.').nth(3).unwrap();
        let t = chrono::NaiveDateTime::parse_from_str(time, "%Y%jT%H%M%S").unwrap()
            - chrono::Duration::seconds(1);
        let earlier = id.replace(time, &t.format("%Y%jT%H%M%S").to_string());
        assert_eq!(places.of(&earlier), None, "{earlier}");
    }
    assert_eq!(places.of("HLS.S30.T10SEG.2030001T000000.v2.0"), None);
    assert_eq!(places.of("not an id"), None);
}
