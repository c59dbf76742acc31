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
    /// The attempt ran out of memory (`domain::memory`).
    pub out_of_memory: bool,
}

mod memory;
pub use memory::{memory_needed, MemoryNeed};

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
mod tests;
