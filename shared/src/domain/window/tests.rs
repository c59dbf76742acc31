use super::*;
use crate::domain::claim::FoundClaim;
use std::time::Duration;

#[test]
fn window_progress_reads_empty_and_broken_markers_as_nothing_known() {
    assert_eq!(WindowProgress::from_marker(b""), WindowProgress::default());
    assert_eq!(
        WindowProgress::from_marker(b"{nope"),
        WindowProgress::default()
    );
    let mut p = WindowProgress::default();
    assert!(p.mark(7) && p.mark(2) && !p.mark(7));
    assert!(p.is_handled(2) && p.is_handled(7) && !p.is_handled(3));
    let body = serde_json::to_vec(&p).unwrap();
    assert_eq!(WindowProgress::from_marker(&body), p);
}

fn g(id: &str) -> GranuleId {
    GranuleId::parse(id).unwrap()
}

fn window() -> WindowClaim {
    WindowClaim::new(
        None,
        "inventories/a.parquet",
        400,
        3,
        vec![
            g("HLS.S30.T18TYN.2022002T153012.v2.0"),
            g("HLS.L30.T18TYN.2022001T153012.v2.0"),
        ],
        "queue-feeder",
        Utc::now(),
    )
}

#[test]
fn a_found_window_is_done_in_flight_or_taken_over() {
    let lease = Duration::from_secs(900);
    let w = window();
    assert_eq!(w.on_found(w.lease.claimed_at, lease), FoundClaim::InFlight);
    let later = w.lease.claimed_at + chrono::Duration::seconds(901);
    assert_eq!(w.on_found(later, lease), FoundClaim::TakeOver);
    // Half recorded (a refusal part-way): still not done.
    let half = w.recording(&[Some("j1".into())], Utc::now());
    assert!(!half.is_submitted());
    assert_eq!(half.on_found(later, lease), FoundClaim::TakeOver);
    // The rest found later: the first job is kept, the second added.
    let whole = half.recording(&[Some("other".into()), Some("j2".into())], Utc::now());
    assert_eq!(whole.job_ids, vec![Some("j1".into()), Some("j2".into())]);
    assert_eq!(
        whole.on_found(w.lease.claimed_at, lease),
        FoundClaim::Submitted
    );
}

#[test]
fn an_empty_window_is_submitted_at_once() {
    let mut w = window();
    w.granules.clear();
    assert_eq!(
        w.on_found(w.lease.claimed_at, Duration::MAX),
        FoundClaim::Submitted
    );
}

#[test]
fn an_array_window_records_one_job_and_names_its_children() {
    let lease = Duration::from_secs(900);
    let w = window().in_array(true);
    assert!(w.array);
    assert_eq!(w.token.as_ref().map(String::len), Some(16));
    assert_eq!(w.recorded(), vec![None]);
    assert_eq!(
        w.lookup_name(0),
        w.lookup_name(1),
        "one array for the window"
    );
    let done = w.recording(&[Some("p".into())], Utc::now());
    assert_eq!(
        done.on_found(w.lease.claimed_at, lease),
        FoundClaim::Submitted
    );
    assert_eq!(done.job_id(0).as_deref(), Some("p:0"));
    assert_eq!(done.job_id(1).as_deref(), Some("p:1"));
    assert_eq!(done.job_id(2), None, "no third granule");
    // Whether a job is recorded, said without formatting it: as `job_id` says, for arrays
    // and single jobs, recorded, half recorded and not.
    let w_single = window();
    let half = w_single.recording(&[Some("j1".into())], Utc::now());
    for claim in [&w, &done, &w_single, &half] {
        for i in 0..4 {
            assert_eq!(claim.records_job(i), claim.job_id(i).is_some(), "{i}");
        }
    }
    assert_eq!(done.job_of_found(1, "q"), "q:1");
    // Recorded once: a later recording keeps the first array.
    let again = done.recording(&[Some("other".into())], Utc::now());
    assert_eq!(again.array_job_id.as_deref(), Some("p"));
    // Its JSON says so, and a claim written before arrays existed reads as single jobs.
    let json = serde_json::to_value(&done).unwrap();
    assert_eq!(
        (json["array"].clone(), json["array_job_id"].clone()),
        (true.into(), "p".into())
    );
    let single = serde_json::to_value(window()).unwrap();
    assert!(single.get("array").is_none());
    let read: WindowClaim = serde_json::from_value(single).unwrap();
    assert!(!read.array);
}

#[test]
fn only_windows_of_two_to_ten_thousand_granules_become_arrays() {
    let mut w = window();
    assert!(!w.clone().in_array(false).array);
    w.granules.truncate(1);
    assert!(
        !w.clone().in_array(true).array,
        "Batch refuses an array of one"
    );
    let g = w.granules[0].clone();
    w.granules = vec![g; 10_001];
    assert!(!w.clone().in_array(true).array, "nor one past 10,000");
    w.granules.truncate(10_000);
    assert!(w.in_array(true).array);
}

#[test]
fn every_granule_is_at_its_first_attempt() {
    assert!(window().attempts().all(|a| a.attempt == 1));
}

#[test]
fn a_looked_for_window_drops_the_known_granules_and_stays_an_array_only_while_it_can() {
    let now = chrono::Utc::now();
    let window = WindowClaim::new(None, "inv", 0, 5, vec![g("a"), g("b"), g("c")], "t", now)
        .in_array(true)
        .with_records_at_end(true)
        .with_screen(true);
    assert!(window.screen_pending && window.array && window.records_at_end);
    let known: std::collections::HashSet<GranuleId> = [g("b")].into();
    let less = window.without(&known);
    assert_eq!(less.granules, vec![g("a"), g("c")]);
    assert!(less.array && less.records_at_end && !less.screen_pending);
    assert_eq!((less.token.clone(), less.rows), (window.token.clone(), 5));
    // One granule left: a single job, its record made at submission; none left: nothing to
    // submit, and the claim counts as submitted.
    let one = window.without(&[g("a"), g("b")].into());
    assert_eq!(one.granules, vec![g("c")]);
    assert!(!one.array && one.token.is_none() && !one.records_at_end);
    let none = window.without(&[g("a"), g("b"), g("c")].into());
    assert!(none.granules.is_empty() && none.is_submitted());
    // A window of retries is never looked for: its granules have their records.
    let retries = WindowClaim::of_retries(None, 1, vec![], "t", now).with_screen(true);
    assert!(!retries.screen_pending);
}
