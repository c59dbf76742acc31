//! The operators' reports, computed from outcome logs. Same definitions as the Athena SQL in
//! `athena/` (the tests hold the two to identical numbers): a granule's latest outcome is its
//! highest attempt among logs not superseded, success first on a tie.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a report needs from one log object: its key's partitions and a few body fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogFact {
    pub granule_id: String,
    pub attempt: u32,
    /// `success` or `failure`.
    pub outcome: String,
    pub platform: String,
    /// `YYYY-MM-DD` or `unknown`.
    pub acquisition_date: String,
    pub reason: String,
    /// RFC 3339, as the monitor wrote it.
    pub logged_at: String,
    pub superseded: bool,
    /// A success a re-validation revoked: `outcome` says failure and `reason` the
    /// re-validation's, but it ranks as the success it was logged as (as the Athena view ranks
    /// by the log's partition).
    pub revoked: bool,
    /// What the attempt's Batch job reserved and ran for (`domain::cost`), when its detail says.
    pub usage: Option<crate::domain::cost::Usage>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlatformOutcome {
    pub platform: String,
    pub outcome: String,
    pub granules: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct YearOutcome {
    pub acquisition_year: String,
    pub outcome: String,
    pub granules: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReasonCount {
    pub reason: String,
    pub granules: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DayCount {
    pub day: String,
    pub granules: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MonthPlatform {
    pub acquisition_month: String,
    pub platform: String,
    pub granules: u64,
}

/// Every report, named as its SQL file in `athena/reports/`, rows in the SQL's order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reports {
    pub granules_by_platform_outcome: Vec<PlatformOutcome>,
    pub granules_by_acquisition_year: Vec<YearOutcome>,
    pub failures_by_reason: Vec<ReasonCount>,
    pub successes_per_day: Vec<DayCount>,
    pub successes_per_acquisition_month: Vec<MonthPlatform>,
}

/// Each granule's latest non-superseded log.
pub fn latest_outcomes(facts: &[LogFact]) -> Vec<&LogFact> {
    let mut latest: BTreeMap<&str, &LogFact> = BTreeMap::new();
    for f in facts.iter().filter(|f| !f.superseded) {
        fn rank(f: &LogFact) -> (u32, &str) {
            (f.attempt, if f.revoked { "success" } else { &f.outcome })
        }
        let better = |old: &LogFact| rank(f) > rank(old);
        latest
            .entry(f.granule_id.as_str())
            .and_modify(|old| {
                if better(old) {
                    *old = f;
                }
            })
            .or_insert(f);
    }
    latest.into_values().collect()
}

/// How granules' latest outcomes differ between two campaigns over the same inventory
/// (`granary report --compare`): granules that went from `from` in the first to `to` in the
/// second, a few of them named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutcomeChange {
    /// `success`, `failure`, or `not run` (no log in that campaign).
    pub from: String,
    pub to: String,
    pub granules: u64,
    /// Up to [`CHANGE_EXAMPLES`] of them, in id order.
    pub examples: Vec<String>,
}

/// How many granules an [`OutcomeChange`] names.
pub const CHANGE_EXAMPLES: usize = 3;

/// The outcome a granule has in a campaign that never logged it.
pub const NOT_RUN: &str = "not run";

/// Every (outcome in `first`, outcome in `second`) pair with its granules, most granules
/// first: the regressions (success → failure) and fixes (failure → success) an operator
/// looks for after reprocessing, and what one campaign ran that the other did not.
pub fn outcome_changes(first: &[LogFact], second: &[LogFact]) -> Vec<OutcomeChange> {
    let outcomes = |facts| -> BTreeMap<String, String> {
        latest_outcomes(facts)
            .into_iter()
            .map(|f| (f.granule_id.clone(), f.outcome.clone()))
            .collect()
    };
    let (a, b) = (outcomes(first), outcomes(second));
    let mut pairs: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let ids: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for id in ids {
        let from = a.get(id).map_or(NOT_RUN, String::as_str).to_owned();
        let to = b.get(id).map_or(NOT_RUN, String::as_str).to_owned();
        pairs.entry((from, to)).or_default().push(id.clone());
    }
    let mut changes: Vec<OutcomeChange> = pairs
        .into_iter()
        .map(|((from, to), ids)| OutcomeChange {
            from,
            to,
            granules: ids.len() as u64,
            examples: ids.into_iter().take(CHANGE_EXAMPLES).collect(),
        })
        .collect();
    changes.sort_by(|x, y| {
        y.granules
            .cmp(&x.granules)
            .then_with(|| (&x.from, &x.to).cmp(&(&y.from, &y.to)))
    });
    changes
}

/// Spot reasons name the reclaimed instance; masked, they count as one reason (as the
/// `granary_current_failures` view does with `regexp_replace`).
pub fn mask_instance(reason: &str) -> String {
    static INSTANCE: std::sync::LazyLock<Option<regex::Regex>> =
        std::sync::LazyLock::new(|| regex::Regex::new("i-[0-9a-f]+").ok());
    match INSTANCE.as_ref() {
        Some(re) => re.replace_all(reason, "i-*").into_owned(),
        None => reason.to_owned(),
    }
}

fn year(date: &str) -> String {
    if date == "unknown" {
        "unknown".to_owned()
    } else {
        date.chars().take(4).collect()
    }
}

pub fn compute(facts: &[LogFact]) -> Reports {
    let latest = latest_outcomes(facts);
    let mut platform_outcome: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut year_outcome: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut reasons: BTreeMap<String, u64> = BTreeMap::new();
    let mut days: BTreeMap<String, u64> = BTreeMap::new();
    let mut months: BTreeMap<(String, String), u64> = BTreeMap::new();
    for f in &latest {
        *platform_outcome
            .entry((f.platform.clone(), f.outcome.clone()))
            .or_default() += 1;
        *year_outcome
            .entry((year(&f.acquisition_date), f.outcome.clone()))
            .or_default() += 1;
        if f.outcome == "failure" {
            *reasons.entry(mask_instance(&f.reason)).or_default() += 1;
        } else {
            *days
                .entry(f.logged_at.chars().take(10).collect())
                .or_default() += 1;
            if f.acquisition_date != "unknown" {
                *months
                    .entry((
                        f.acquisition_date.chars().take(7).collect(),
                        f.platform.clone(),
                    ))
                    .or_default() += 1;
            }
        }
    }
    let mut failures: Vec<ReasonCount> = reasons
        .into_iter()
        .map(|(reason, granules)| ReasonCount { reason, granules })
        .collect();
    // ORDER BY granules DESC, reason
    failures.sort_by(|a, b| b.granules.cmp(&a.granules).then(a.reason.cmp(&b.reason)));
    Reports {
        granules_by_platform_outcome: platform_outcome
            .into_iter()
            .map(|((platform, outcome), granules)| PlatformOutcome {
                platform,
                outcome,
                granules,
            })
            .collect(),
        granules_by_acquisition_year: year_outcome
            .into_iter()
            .map(|((acquisition_year, outcome), granules)| YearOutcome {
                acquisition_year,
                outcome,
                granules,
            })
            .collect(),
        failures_by_reason: failures,
        successes_per_day: days
            .into_iter()
            .map(|(day, granules)| DayCount { day, granules })
            .collect(),
        successes_per_acquisition_month: months
            .into_iter()
            .map(|((acquisition_month, platform), granules)| MonthPlatform {
                acquisition_month,
                platform,
                granules,
            })
            .collect(),
    }
}

/// A campaign's cost from its logs (one a job): every job priced, the granules being those with a
/// latest outcome (`report::latest_outcomes`), the jobs of earlier attempts counted as retried.
pub fn cost_of_logs(
    facts: &[LogFact],
    prices: crate::domain::cost::ComputePrices,
    own: crate::domain::cost::OwnCostPerGranule,
) -> crate::domain::cost::CampaignCost {
    let latest: std::collections::HashSet<(&str, u32)> = latest_outcomes(facts)
        .into_iter()
        .map(|f| (f.granule_id.as_str(), f.attempt))
        .collect();
    let granules = latest.len() as u64;
    let jobs: Vec<crate::domain::cost::JobUsage> = facts
        .iter()
        .map(|f| crate::domain::cost::JobUsage {
            usage: f.usage,
            latest: latest.contains(&(f.granule_id.as_str(), f.attempt)),
        })
        .collect();
    crate::domain::cost::campaign_cost(&jobs, granules, prices, own)
}

#[cfg(test)]
mod tests {
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
}
