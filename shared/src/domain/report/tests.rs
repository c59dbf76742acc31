use super::*;

fn fact(g: &str, attempt: u32, outcome: &str, superseded: bool) -> LogFact {
    LogFact {
        granule_id: g.into(),
        attempt,
        outcome: outcome.into(),
        platform: if g.starts_with('s') { "S30" } else { "L30" }.into(),
        acquisition_date: if g.ends_with('u') {
            "unknown"
        } else {
            "2022-08-14"
        }
        .into(),
        reason: if outcome == "success" {
            "succeeded"
        } else {
            "exit 2"
        }
        .into(),
        logged_at: format!("2026-11-2{attempt}T10:00:00.123Z"),
        superseded,
        revoked: false,
        usage: None,
        out_of_memory: false,
    }
}

#[test]
fn a_comparison_counts_each_granules_move_between_campaigns() {
    let v1 = vec![
        fact("s1", 1, "success", false),
        fact("s2", 1, "failure", true),
        fact("s2", 2, "success", false),
        fact("s3", 1, "failure", false),
        fact("s4", 1, "success", false),
        fact("s5", 1, "success", false),
    ];
    let v2 = vec![
        fact("s1", 1, "success", false),
        fact("s2", 1, "failure", false),
        fact("s3", 1, "success", false),
        fact("s4", 1, "success", false),
        fact("s6", 1, "success", false),
    ];
    let changes = outcome_changes(&v1, &v2);
    let moved = |from: &str, to: &str| {
        changes
            .iter()
            .find(|c| c.from == from && c.to == to)
            .map(|c| (c.granules, c.examples.clone()))
    };
    assert_eq!(
        moved("success", "success"),
        Some((2, vec!["s1".into(), "s4".into()]))
    );
    // s2 succeeded on its retry in v1 (the superseded failure does not count) and failed in v2.
    assert_eq!(moved("success", "failure"), Some((1, vec!["s2".into()])));
    assert_eq!(moved("failure", "success"), Some((1, vec!["s3".into()])));
    assert_eq!(moved("success", NOT_RUN), Some((1, vec!["s5".into()])));
    assert_eq!(moved(NOT_RUN, "success"), Some((1, vec!["s6".into()])));
    assert_eq!(changes.len(), 5);
    assert_eq!(changes[0].granules, 2, "most granules first");
    let total: u64 = changes.iter().map(|c| c.granules).sum();
    assert_eq!(total, 6);
}

/// An attempt timed out (its failure logged) that then succeeded late, and whose success a
/// re-validation revoked: the revoked success ranks as the success it was logged as (as the
/// Athena view ranks by the log's partition) and says failure, for its own reason.
#[test]
fn a_revoked_success_ranks_as_logged_and_reads_as_its_failure() {
    let timed_out = fact("t1", 3, "failure", false);
    let revoked = LogFact {
        revoked: true,
        reason: "re-validation failed: gone".into(),
        ..fact("t1", 3, "failure", false)
    };
    for facts in [
        vec![timed_out.clone(), revoked.clone()],
        vec![revoked.clone(), timed_out.clone()],
    ] {
        let latest = latest_outcomes(&facts);
        assert_eq!(latest.len(), 1);
        assert_eq!(
            (latest[0].outcome.as_str(), latest[0].reason.as_str()),
            ("failure", "re-validation failed: gone")
        );
    }
}

#[test]
fn the_latest_non_superseded_attempt_wins() {
    let facts = vec![
        fact("s1", 1, "failure", true),
        fact("s1", 2, "success", false),
        // a late failure of an earlier attempt, filed as superseded
        fact("s1", 1, "failure", true),
        fact("l2", 1, "failure", false),
        fact("l2", 2, "failure", false),
        fact("s3u", 1, "success", false),
    ];
    let latest = latest_outcomes(&facts);
    let got: Vec<(&str, u32, &str)> = latest
        .iter()
        .map(|f| (f.granule_id.as_str(), f.attempt, f.outcome.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("l2", 2, "failure"),
            ("s1", 2, "success"),
            ("s3u", 1, "success")
        ]
    );
    let r = compute(&facts);
    assert_eq!(
        r.granules_by_platform_outcome,
        vec![
            PlatformOutcome {
                platform: "L30".into(),
                outcome: "failure".into(),
                granules: 1
            },
            PlatformOutcome {
                platform: "S30".into(),
                outcome: "success".into(),
                granules: 2
            },
        ]
    );
    assert_eq!(
        r.granules_by_acquisition_year
            .iter()
            .map(|y| (y.acquisition_year.as_str(), y.granules))
            .collect::<Vec<_>>(),
        vec![("2022", 1), ("2022", 1), ("unknown", 1)]
    );
    assert_eq!(
        r.failures_by_reason,
        vec![ReasonCount {
            reason: "exit 2".into(),
            granules: 1
        }]
    );
    assert_eq!(
        r.successes_per_day,
        vec![
            DayCount {
                day: "2026-11-21".into(),
                granules: 1
            },
            DayCount {
                day: "2026-11-22".into(),
                granules: 1
            }
        ]
    );
    // unknown acquisition dates are not charted
    assert_eq!(r.successes_per_acquisition_month.len(), 1);
    assert_eq!(
        r.successes_per_acquisition_month[0].acquisition_month,
        "2022-08"
    );
}

#[test]
fn spot_reasons_are_one_reason_whatever_the_instance() {
    let mut facts = Vec::new();
    for (i, inst) in ["i-0abc", "i-0def12"].iter().enumerate() {
        let mut f = fact(&format!("l{i}"), 1, "failure", false);
        f.reason = format!("spot interruption: Host EC2 (instance {inst}) terminated.");
        facts.push(f);
    }
    let r = compute(&facts);
    assert_eq!(
        r.failures_by_reason,
        vec![ReasonCount {
            reason: "spot interruption: Host EC2 (instance i-*) terminated.".into(),
            granules: 2
        }]
    );
}

#[test]
fn failure_reasons_sort_by_count_then_name() {
    let mut facts = Vec::new();
    for (i, reason) in ["b", "a", "b", "c", "a", "b"].iter().enumerate() {
        let mut f = fact(&format!("l{i}"), 1, "failure", false);
        f.reason = (*reason).into();
        facts.push(f);
    }
    let r = compute(&facts);
    let got: Vec<(&str, u64)> = r
        .failures_by_reason
        .iter()
        .map(|c| (c.reason.as_str(), c.granules))
        .collect();
    assert_eq!(got, vec![("b", 3), ("a", 2), ("c", 1)]);
}

#[test]
fn memory_needed_counts_each_success_by_what_it_reserved_and_the_ooms_before() {
    let usage = |mib| {
        Some(crate::domain::cost::Usage {
            milli_vcpus: 1000,
            memory_mib: mib,
            run_ms: 1,
        })
    };
    let oom = LogFact {
        out_of_memory: true,
        ..fact("s1", 1, "failure", true)
    };
    let facts = vec![
        oom,
        LogFact {
            usage: usage(4096),
            ..fact("s1", 2, "success", false)
        },
        LogFact {
            usage: usage(2048),
            ..fact("s2", 1, "success", false)
        },
        LogFact {
            usage: usage(2048),
            ..fact("s3", 1, "success", false)
        },
        fact("s4", 1, "failure", false),
    ];
    let rows = memory_needed(&facts);
    let brief: Vec<_> = rows
        .iter()
        .map(|r| {
            (
                r.memory_mib,
                r.granules,
                r.after_out_of_memory,
                r.out_of_memory_ends,
            )
        })
        .collect();
    assert_eq!(brief, [(Some(2048), 2, 0, 0), (Some(4096), 1, 1, 1)]);
}
