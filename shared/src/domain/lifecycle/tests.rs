use super::*;
use crate::domain::machine::check;
use crate::domain::machine::State;
use proptest::prelude::*;

/// The seed's table, written out independently of `TRANSITIONS` so the two check each other,
/// and the one edge granary adds: an operator sends an abandoned item round again.
fn listed(from: ItemState, to: ItemState) -> bool {
    matches!(
        (from, to),
        (Discovered, Downloading)
            | (Discovered, Downloaded)
            | (Downloading, DownloadingFailed)
            | (Downloading, Downloaded)
            | (DownloadingFailed, Downloading)
            | (DownloadingFailed, Ignore)
            | (Downloaded, DownloadingFailed)
            | (Downloaded, Skipped)
            | (Downloaded, Ready)
            | (Ready, Processing)
            | (Processing, ProcessingFailed)
            | (Processing, Processed)
            | (ProcessingFailed, Ready)
            | (ProcessingFailed, Abandoned)
            | (Processed, ProcessingFailed)
            | (Abandoned, Ready)
    )
}

#[test]
fn the_full_matrix_allows_exactly_the_listed_transitions() {
    let mut allowed = 0;
    for from in ItemState::ALL {
        for to in ItemState::ALL {
            let result = check(from, to);
            if listed(from, to) {
                let by = if from == Abandoned {
                    Cause::Operator
                } else {
                    Cause::Automatic
                };
                assert_eq!(result, Ok(by), "{from} → {to} must be allowed");
                allowed += 1;
            } else {
                let err = result.expect_err("unlisted transition allowed");
                assert_eq!((err.from, err.to), (from, to));
                assert_eq!(
                    err.to_string(),
                    format!("an item cannot go from {from} to {to}")
                );
            }
        }
    }
    assert_eq!(allowed, 16);
}

#[test]
fn four_terminal_states_and_only_processed_and_abandoned_have_a_way_out() {
    let terminal: Vec<_> = ItemState::ALL
        .into_iter()
        .filter(|s| s.is_terminal())
        .collect();
    assert_eq!(terminal, vec![Ignore, Skipped, Processed, Abandoned]);
    for s in terminal {
        let next: Vec<_> = s.successors().collect();
        if s == Processed {
            assert_eq!(next, vec![ProcessingFailed]);
        } else if s == Abandoned {
            assert_eq!(next, vec![Ready]);
            assert_eq!(check(Abandoned, Ready), Ok(Cause::Operator));
        } else {
            assert!(next.is_empty(), "{s} has successors {next:?}");
        }
    }
}

#[test]
fn states_parse_from_their_names_and_reject_others() {
    for s in ItemState::ALL {
        assert_eq!(s.as_str().parse::<ItemState>(), Ok(s));
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            format!("\"{}\"", s.as_str())
        );
    }
    assert_eq!(
        "processing-failed".parse::<ItemState>(),
        Ok(ProcessingFailed)
    );
    assert!("DONE".parse::<ItemState>().is_err());
}

fn policy() -> RetryPolicy {
    RetryPolicy {
        max_download_attempts: 3,
        max_processing_attempts: 2,
        download_timeout: Duration::minutes(10),
        processing_timeout: Duration::hours(1),
    }
}

#[test]
fn retries_are_immediate_below_the_limit_and_give_up_at_it() {
    let p = policy();
    assert_eq!(p.after_download_failure(1), Downloading);
    assert_eq!(p.after_download_failure(2), Downloading);
    assert_eq!(p.after_download_failure(3), Ignore);
    assert_eq!(p.after_download_failure(4), Ignore);
    assert_eq!(p.after_processing_failure(1), Ready);
    assert_eq!(p.after_processing_failure(2), Abandoned);
}

#[test]
fn attempts_are_counted_when_an_attempt_begins() {
    let t = Utc::now();
    let mut a = Attempts::default();
    a.begin(Downloaded, t);
    a.begin(Ready, t);
    assert_eq!(a, Attempts::default());
    a.begin(Downloading, t);
    a.begin(Processing, t);
    a.begin(Processing, t);
    assert_eq!((a.download, a.processing), (1, 2));
    assert_eq!(a.processing_started_at, Some(t));
}

#[test]
fn timeout_recovery_at_its_boundaries() {
    let p = policy();
    let t0 = Utc::now();
    let downloading = |n| Attempts {
        download: n,
        download_started_at: Some(t0),
        ..Attempts::default()
    };
    let at = |d| t0 + d;
    // exactly at the timeout: not yet
    assert_eq!(
        p.timeout_recovery(Downloading, &downloading(1), at(Duration::minutes(10))),
        None
    );
    let late = at(Duration::minutes(10) + Duration::seconds(1));
    assert_eq!(
        p.timeout_recovery(Downloading, &downloading(2), late),
        Some(vec![DownloadingFailed])
    );
    assert_eq!(
        p.timeout_recovery(Downloading, &downloading(3), late),
        Some(vec![DownloadingFailed, Ignore])
    );
    let processing = |n| Attempts {
        processing: n,
        processing_started_at: Some(t0),
        ..Attempts::default()
    };
    assert_eq!(
        p.timeout_recovery(Processing, &processing(1), at(Duration::hours(1))),
        None
    );
    let late = at(Duration::hours(1) + Duration::seconds(1));
    assert_eq!(
        p.timeout_recovery(Processing, &processing(1), late),
        Some(vec![ProcessingFailed])
    );
    assert_eq!(
        p.timeout_recovery(Processing, &processing(2), late),
        Some(vec![ProcessingFailed, Abandoned])
    );
    // other states are never timed out
    for s in ItemState::ALL
        .into_iter()
        .filter(|s| !matches!(s, Downloading | Processing))
    {
        assert_eq!(p.timeout_recovery(s, &processing(9), late), None);
    }
    // no start time recorded: overdue
    assert_eq!(
        p.timeout_recovery(Processing, &Attempts::default(), t0),
        Some(vec![ProcessingFailed])
    );
}

/// Facts whose checks fail with plain words.
fn facts() -> AdmissionFacts<&'static str, &'static str, &'static str> {
    AdmissionFacts {
        validation: Ok(()),
        eligibility: Ok(()),
        slot: Some("S30".into()),
        prerequisites: Ok(()),
    }
}

#[test]
fn admission_needs_all_three_conditions() {
    let all = ActiveSlots::All;
    let s30 = ActiveSlots::parse("S30, L30");
    assert_eq!(decide_admission(&facts(), &all), Admission::Ready);
    assert_eq!(decide_admission(&facts(), &s30), Admission::Ready);
    let only_l = ActiveSlots::parse("L30");
    assert_eq!(
        decide_admission(&facts(), &only_l),
        Admission::Skip("slot S30 is not ACTIVE".into())
    );
    let mut f = facts();
    f.slot = None;
    assert!(matches!(decide_admission(&f, &only_l), Admission::Skip(_)));
    assert_eq!(decide_admission(&f, &all), Admission::Ready);
    let mut f = facts();
    f.prerequisites = Err("ancillary data missing");
    assert_eq!(
        decide_admission(&f, &all),
        Admission::Wait("ancillary data missing".into())
    );
    assert_eq!(decide_admission(&f, &all).target(), None);
    let mut f = facts();
    f.eligibility = Err("outdated");
    f.prerequisites = Err("x");
    assert_eq!(decide_admission(&f, &all).target(), Some(Skipped));
    // corruption wins over everything
    f.validation = Err("size 3 ≠ 5");
    assert_eq!(
        decide_admission(&f, &only_l),
        Admission::Corrupt("size 3 ≠ 5".into())
    );
    assert_eq!(decide_admission(&f, &all).target(), Some(DownloadingFailed));
    assert_eq!(ActiveSlots::parse(" * "), ActiveSlots::All);
    assert_eq!(ActiveSlots::parse(""), ActiveSlots::All);
}

fn any_state() -> impl Strategy<Value = ItemState> {
    (0usize..11).prop_map(|i| ItemState::ALL[i])
}

proptest! {
    /// Every failure rule lands on a state the table allows from the failed state.
    #[test]
    fn failure_rules_only_pick_legal_transitions(n in 0u32..10, max in 1u32..6) {
        let p = RetryPolicy { max_download_attempts: max, max_processing_attempts: max, ..policy() };
        check(DownloadingFailed, p.after_download_failure(n)).unwrap();
        check(ProcessingFailed, p.after_processing_failure(n)).unwrap();
        prop_assert_eq!(p.after_download_failure(n) == Ignore, n >= max);
    }

    #[test]
    fn timeout_recovery_only_picks_legal_transitions(
        s in any_state(), n in 0u32..6, mins in 0i64..1000,
    ) {
        let p = policy();
        let t0 = Utc::now();
        let a = Attempts { download: n, download_started_at: Some(t0), processing: n, processing_started_at: Some(t0) };
        if let Some(path) = p.timeout_recovery(s, &a, t0 + Duration::minutes(mins)) {
            let mut from = s;
            for to in path {
                check(from, to).unwrap();
                from = to;
            }
            let max = if s == Downloading { p.max_download_attempts } else { p.max_processing_attempts };
            prop_assert!(from.is_terminal() == (n >= max), "gives up exactly at the limit");
        }
    }
}
