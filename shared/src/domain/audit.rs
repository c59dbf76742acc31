//! The completeness audit's rules. Three tables say what happened to a campaign: the
//! inventories (what was asked), the logs (how each attempt ended) and the products (what is in
//! the bucket). The audit reads each into [`Seen`] facts keyed by granule, sorts them so one
//! granule's facts meet, and [`judge`] decides, for that granule alone, where it stands and what
//! is wrong with it. Nothing here reads a store: `granary audit` streams the tables in.
//!
//! A granule stands in exactly one [`Standing`]; the [`AuditList`]s are what an operator acts on.

use super::attempt_budget::{is_spot_end, AttemptBudget, Ends};
use super::classify::Route;
use super::job_tags::spot_ends_before;
use super::layout::logs::{LogOutcome, LogRecord};
use super::memory::{memory_of, next_memory, MemoryLimits, MemoryStep};

mod lines;
mod products;
#[cfg(test)]
mod tests;

pub use lines::{BadFactLine, FactLine};
pub use products::{BadProductTemplate, ProductTemplate};

/// The lists the audit writes, each a file an operator can rerun from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AuditList {
    /// Fed, with no outcome and nothing in flight: nothing will move it.
    Missing,
    /// Succeeded, but a product is absent or empty.
    ProductMissing,
    /// A product no inventory row explains.
    OrphanProduct,
    /// Two successes, or two products for one template.
    Doubled,
    /// Dead-lettered: by the monitor, or its attempts spent at the requeuer.
    DeadLetter,
}

impl AuditList {
    pub const ALL: [AuditList; 5] = [
        AuditList::Missing,
        AuditList::ProductMissing,
        AuditList::OrphanProduct,
        AuditList::Doubled,
        AuditList::DeadLetter,
    ];

    /// The list's file name stem (`missing.csv`, `missing.parquet`).
    pub fn name(self) -> &'static str {
        match self {
            AuditList::Missing => "missing",
            AuditList::ProductMissing => "product_missing",
            AuditList::OrphanProduct => "orphan_products",
            AuditList::Doubled => "doubled",
            AuditList::DeadLetter => "dead_letters",
        }
    }
}

/// Where one granule stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Standing {
    Succeeded,
    DeadLettered,
    /// An open claim, window or parked retry holds an attempt that has not ended.
    InFlight,
    /// Its latest attempt was ended by `granary cancel` (`granary resume --cancelled`).
    Cancelled,
    Missing,
    /// In an inventory, past the rows the feeder has passed.
    NotFed,
    /// In no inventory (a product's or a log's granule only).
    NotInventoried,
}

impl Standing {
    pub fn name(self) -> &'static str {
        match self {
            Standing::Succeeded => "succeeded",
            Standing::DeadLettered => "dead_lettered",
            Standing::InFlight => "in_flight",
            Standing::Cancelled => "cancelled",
            Standing::Missing => "missing",
            Standing::NotFed => "not_fed",
            Standing::NotInventoried => "not_inventoried",
        }
    }
}

/// One log, as the audit needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSeen {
    pub attempt: u32,
    /// Filed under `outcome=success`.
    pub success_side: bool,
    /// A failure a later success superseded (`domain::layout::logs::Supersession`).
    pub superseded: bool,
    /// A success re-validation revoked.
    pub revoked: bool,
    pub route: Route,
    /// The granule's ends through this attempt, as the requeuer's budget counts them.
    pub ends: Ends,
    /// The attempt ran out of memory, and the memory it had (`domain::memory`).
    pub out_of_memory: bool,
    pub memory_mib: Option<u32>,
    pub reason: String,
}

impl LogSeen {
    /// A log as the audit reads it: its ends counted as the monitor counted them for the
    /// requeuer (`handlers::monitor::end`).
    pub fn of(record: &LogRecord) -> Self {
        let before = record
            .spot_ends_before
            .unwrap_or_else(|| spot_ends_before(&record.job));
        let this = u32::from(is_spot_end(record.classification.failure.as_ref()));
        let out_of_memory = matches!(
            record.classification.failure,
            Some(super::classify::FailureKind::OutOfMemory)
        );
        Self {
            attempt: record.attempt,
            success_side: record.outcome == LogOutcome::Success,
            superseded: record.superseded.is_some(),
            revoked: record.revoked.is_some(),
            route: record.route,
            ends: Ends {
                attempt: record.attempt,
                spot_ends: before.saturating_add(this),
            },
            out_of_memory,
            memory_mib: memory_of(&record.job),
            reason: match &record.revoked {
                Some(r) => r.reason.clone(),
                None => record.classification.reason.clone(),
            },
        }
    }

    /// A success that stands.
    pub fn is_success(&self) -> bool {
        self.success_side && !self.superseded && !self.revoked
    }
}

/// What one source says of one granule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// An inventory row; `fed` once the feeder has passed it.
    Row {
        fed: bool,
    },
    Log(LogSeen),
    /// An object that template `template` maps to the granule.
    Product {
        template: usize,
        key: String,
        bytes: u64,
    },
    /// An attempt an open claim, window or parked retry holds.
    InFlight {
        attempt: u32,
    },
    /// An attempt `granary cancel` ended or held back, listed for `granary resume --cancelled`.
    CancelListed {
        attempt: u32,
    },
}

/// What the judge needs besides the facts.
#[derive(Debug, Clone)]
pub struct Rules {
    pub budget: AttemptBudget,
    /// `GRANARY_JOB_MEMORY_MIB`: an out-of-memory end at the cap is dead-lettered.
    pub memory: MemoryLimits,
    /// `GRANARY_PRODUCT_KEYS`, parsed; empty: products are not audited.
    pub products: Vec<ProductTemplate>,
}

/// One row of one list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub list: AuditList,
    pub granule_id: String,
    /// The latest attempt logged (1, the fed attempt, when none is); a rerun sends it round and
    /// the next one is made.
    pub attempt: u32,
    pub detail: String,
}

/// One granule's standing and findings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    pub standing: Standing,
    pub findings: Vec<Finding>,
    /// For a dead letter: its reason (the summary counts them by reason).
    pub dead_letter_reason: Option<String>,
}

/// The decision for one granule, from every fact the three tables hold of it.
pub fn judge(granule_id: &str, seen: &[Seen], rules: &Rules) -> Judged {
    let rows: Vec<bool> = seen
        .iter()
        .filter_map(|s| match s {
            Seen::Row { fed } => Some(*fed),
            _ => None,
        })
        .collect();
    let logs: Vec<&LogSeen> = seen
        .iter()
        .filter_map(|s| match s {
            Seen::Log(l) => Some(l),
            _ => None,
        })
        .collect();
    // A fed granule's first attempt is 1, whether or not its end was logged: nothing holds it
    // open, so a rerun sends it round from there.
    let latest = logs.iter().map(|l| l.attempt).max().unwrap_or(1);
    let finding = |list, detail: String| Finding {
        list,
        granule_id: granule_id.to_owned(),
        attempt: latest,
        detail,
    };
    let (standing, reason) = standing_of(&rows, &logs, seen, rules);
    let mut findings = Vec::new();
    let mut successes: Vec<u32> = logs
        .iter()
        .filter(|l| l.is_success())
        .map(|l| l.attempt)
        .collect();
    successes.sort_unstable();
    successes.dedup();
    if successes.len() > 1 {
        findings.push(finding(
            AuditList::Doubled,
            format!("successes at attempts {}", join(&successes)),
        ));
    }
    match (standing, &reason) {
        (Standing::Missing, Some(why)) => findings.push(finding(AuditList::Missing, why.clone())),
        (Standing::DeadLettered, Some(why)) => {
            findings.push(finding(AuditList::DeadLetter, why.clone()))
        }
        _ => {}
    }
    for detail in product_findings(granule_id, seen, rules, standing) {
        findings.push(finding(detail.0, detail.1));
    }
    Judged {
        standing,
        findings,
        dead_letter_reason: (standing == Standing::DeadLettered)
            .then(|| reason.map(|r| dead_letter_group(&r)))
            .flatten(),
    }
}

/// The granule's standing, and the reason for a missing or dead-lettered one.
fn standing_of(
    rows: &[bool],
    logs: &[&LogSeen],
    seen: &[Seen],
    rules: &Rules,
) -> (Standing, Option<String>) {
    if rows.is_empty() {
        return (Standing::NotInventoried, None);
    }
    if logs.iter().any(|l| l.is_success()) {
        return (Standing::Succeeded, None);
    }
    // An attempt held open whose end is not logged: it will move by itself.
    let logged = |a: u32| logs.iter().any(|l| l.attempt == a);
    if seen
        .iter()
        .any(|s| matches!(s, Seen::InFlight { attempt } if !logged(*attempt)))
    {
        return (Standing::InFlight, None);
    }
    // Listed by a cancel at or past its latest end: the cancel's (a retry its hold took back
    // still has a log saying retry_queue).
    let latest = logs.iter().map(|l| l.attempt).max().unwrap_or(0);
    if seen
        .iter()
        .any(|s| matches!(s, Seen::CancelListed { attempt } if *attempt >= latest))
    {
        return (Standing::Cancelled, None);
    }
    let last = logs
        .iter()
        .filter(|l| !l.superseded)
        .max_by_key(|l| (l.attempt, !l.success_side));
    let Some(last) = last else {
        return if rows.iter().any(|fed| *fed) {
            let why = "fed; no end logged and nothing in flight".to_owned();
            (Standing::Missing, Some(why))
        } else {
            (Standing::NotFed, None)
        };
    };
    if last.revoked {
        let why = format!(
            "success at attempt {} revoked ({}); nothing in flight",
            last.attempt, last.reason
        );
        return (Standing::Missing, Some(why));
    }
    match last.route {
        Route::FailureDlq => (Standing::DeadLettered, Some(last.reason.clone())),
        Route::Cancelled => (Standing::Cancelled, None),
        Route::RetryQueue if exhausted(&rules.budget, last) => (
            Standing::DeadLettered,
            Some(format!("{EXHAUSTED} (the last end: {})", last.reason)),
        ),
        Route::RetryQueue if cap_spent(rules.memory, last).is_some() => {
            (Standing::DeadLettered, cap_spent(rules.memory, last))
        }
        Route::RetryQueue | Route::Done => (Standing::Missing, Some(retry_reason(last))),
    }
}

/// The requeuer's reason for a granule whose attempts are spent (`handlers::requeuer`).
pub const EXHAUSTED: &str = "attempts exhausted";

/// The reason a dead letter is counted under: the DLQ's own (`attempts exhausted` for the
/// requeuer's, whatever the last end was).
fn dead_letter_group(detail: &str) -> String {
    if detail.starts_with(EXHAUSTED) {
        EXHAUSTED.to_owned()
    } else {
        detail.to_owned()
    }
}

/// A retried end with nothing in flight: spent (the requeuer dead-lettered it) or stranded.
fn retry_reason(last: &LogSeen) -> String {
    format!(
        "attempt {} ended ({}) and was sent to be retried; nothing in flight",
        last.attempt, last.reason
    )
}

/// The requeuer's reason, when it dead-letters this out-of-memory end at the memory cap.
fn cap_spent(limits: MemoryLimits, last: &LogSeen) -> Option<String> {
    match next_memory(last.memory_mib, last.out_of_memory, limits, false) {
        MemoryStep::CapSpent { had } => Some(super::memory::cap_spent_reason(had, limits)),
        _ => None,
    }
}

/// Whether the requeuer dead-letters the retry of this end (its budget spent).
pub fn exhausted(budget: &AttemptBudget, last: &LogSeen) -> bool {
    last.route == Route::RetryQueue && !budget.allows_retry(last.ends)
}

/// Products of this granule: two for one template, or (succeeded) one absent or empty; and
/// those of a granule no inventory row names.
fn product_findings(
    granule_id: &str,
    seen: &[Seen],
    rules: &Rules,
    standing: Standing,
) -> Vec<(AuditList, String)> {
    let mut out = Vec::new();
    for (i, template) in rules.products.iter().enumerate() {
        let mut keys: Vec<(&str, u64)> = seen
            .iter()
            .filter_map(|s| match s {
                Seen::Product {
                    template,
                    key,
                    bytes,
                } if *template == i => Some((key.as_str(), *bytes)),
                _ => None,
            })
            .collect();
        keys.sort();
        keys.dedup();
        if standing == Standing::NotInventoried {
            // An imported item's granule has logs and no inventory row: its products are
            // explained (and re-validation checks them). Only a granule nothing names is an
            // orphan's.
            if !seen.iter().any(|s| matches!(s, Seen::Log(_))) {
                for (key, _) in &keys {
                    out.push((AuditList::OrphanProduct, (*key).to_owned()));
                }
            }
            continue;
        }
        if keys.len() > 1 {
            let names: Vec<&str> = keys.iter().map(|(k, _)| *k).collect();
            out.push((AuditList::Doubled, format!("products {}", names.join(", "))));
        }
        if standing != Standing::Succeeded {
            continue;
        }
        let expected = template.key_of(granule_id);
        match keys.iter().find(|(k, _)| *k == expected) {
            None => out.push((AuditList::ProductMissing, format!("absent: {expected}"))),
            Some((_, 0)) => out.push((AuditList::ProductMissing, format!("empty: {expected}"))),
            Some(_) => {}
        }
    }
    out
}

fn join(attempts: &[u32]) -> String {
    let mut a = attempts.to_vec();
    a.sort_unstable();
    a.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}
