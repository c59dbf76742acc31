//! A campaign's spend budget and deadline (`granary pace`). The feeder paces to land inside
//! both: before each run it asks [`paced_count`] how many rows it may submit. The spend so far
//! is estimated, never billed: the rows submitted times the cost a granule the campaign's own
//! logs measured (`granary report --cost`'s model, `domain::cost`), which counts retries'
//! share. The deadline raises a run's count to what the rows left need in the runs left (the
//! feeder's period as its last two runs measured it); the budget cuts it to what is left to
//! spend, and at the cap holds the feeder with the reason. What is in flight goes on.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What an operator set with `granary pace`, and the measure it was set with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pace {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_dollars: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<DateTime<Utc>>,
    /// The campaign's cost a granule, dollars, as measured from its logs (or given).
    pub dollars_per_granule: f64,
    /// How many granules that measure was taken over (0: given, not measured).
    pub measured_over: u64,
    pub set_at: DateTime<Utc>,
    pub set_by: String,
}

/// Where the campaign stands against its pace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Standing {
    /// Rows the feeder has submitted.
    pub submitted: u64,
    /// Rows known and not yet submitted (`None`: not known yet).
    pub left: Option<u64>,
    /// The feeder's period (`None`: not measured yet).
    pub period_secs: Option<i64>,
    pub now: DateTime<Utc>,
}

/// What a feeder run may do.
#[derive(Debug, Clone, PartialEq)]
pub enum PaceDecision {
    /// Submit up to `count` rows; `why` when the pace changed the run's own count.
    Go { count: u64, why: Option<String> },
    /// The budget is spent: hold the feeder.
    Hold { reason: String },
}

impl Pace {
    /// The estimated spend of `submitted` rows.
    pub fn spent(&self, submitted: u64) -> f64 {
        submitted as f64 * self.dollars_per_granule
    }

    /// Rows the budget still pays for (`None`: no budget).
    pub fn affordable(&self, submitted: u64) -> Option<u64> {
        let budget = self.budget_dollars?;
        if self.dollars_per_granule <= 0.0 {
            return None;
        }
        // A hair over the quotient: dollars in binary fractions (0.30 − 0.20 is 0.0999…) must
        // not lose a granule the budget pays for.
        let left = (budget - self.spent(submitted)) / self.dollars_per_granule + 1e-9;
        Some(if left > 0.0 { left.floor() as u64 } else { 0 })
    }
}

/// The decision: the run's `requested` count raised for the deadline, then cut to the budget.
pub fn paced_count(pace: &Pace, requested: u64, s: Standing) -> PaceDecision {
    let mut count = requested;
    let mut why = None;
    if let (Some(deadline), Some(left), Some(period)) = (pace.deadline, s.left, s.period_secs) {
        let runs_left = (deadline - s.now).num_seconds() / period.max(1);
        if runs_left >= 1 && left > 0 {
            let needed = left.div_ceil(runs_left as u64);
            if needed > count {
                count = needed;
                why = Some(format!(
                    "raised to {needed} rows: {left} left, {runs_left} runs before the deadline {deadline}"
                ));
            }
        }
    }
    if let Some(affordable) = pace.affordable(s.submitted) {
        if affordable == 0 {
            return PaceDecision::Hold {
                reason: format!(
                    "spend cap: about ${:.2} of the ${:.2} budget spent ({} granules at ${:.4} each); \
                     raise it with `granary pace --budget`, then `granary release`",
                    pace.spent(s.submitted),
                    pace.budget_dollars.unwrap_or_default(),
                    s.submitted,
                    pace.dollars_per_granule
                ),
            };
        }
        if affordable < count {
            count = affordable;
            why = Some(format!(
                "cut to {affordable} rows: what the budget still pays for"
            ));
        }
    }
    PaceDecision::Go { count, why }
}

/// The end as the pace sees it, for `granary status` and `granary plan`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PaceForecast {
    pub spent_dollars: f64,
    /// The spend once every known row is submitted.
    pub spend_at_end_dollars: Option<f64>,
    pub budget_dollars: Option<f64>,
    /// Rows the budget still pays for.
    pub affordable_rows: Option<u64>,
    pub deadline: Option<DateTime<Utc>>,
    /// When the rows left are submitted at `per_hour`.
    pub finish_at: Option<DateTime<Utc>>,
    pub meets_deadline: Option<bool>,
}

pub fn forecast(pace: &Pace, s: Standing, per_hour: Option<f64>) -> PaceForecast {
    let finish_at = match (s.left, per_hour) {
        (Some(0), _) => Some(s.now),
        (Some(left), Some(rate)) if rate > 0.0 => {
            Some(s.now + chrono::Duration::seconds((left as f64 / rate * 3600.0) as i64))
        }
        _ => None,
    };
    PaceForecast {
        spent_dollars: pace.spent(s.submitted),
        spend_at_end_dollars: s.left.map(|l| pace.spent(s.submitted + l)),
        budget_dollars: pace.budget_dollars,
        affordable_rows: pace.affordable(s.submitted),
        deadline: pace.deadline,
        finish_at,
        meets_deadline: pace.deadline.zip(finish_at).map(|(d, f)| f <= d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pace(budget: Option<f64>, deadline_hours: Option<i64>) -> Pace {
        Pace {
            budget_dollars: budget,
            deadline: deadline_hours.map(|h| at(0) + chrono::Duration::hours(h)),
            dollars_per_granule: 0.01,
            measured_over: 100,
            set_at: at(0),
            set_by: "t".into(),
        }
    }

    fn at(h: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + h * 3600, 0).unwrap()
    }

    fn standing(submitted: u64, left: Option<u64>) -> Standing {
        Standing {
            submitted,
            left,
            period_secs: Some(3600),
            now: at(0),
        }
    }

    #[test]
    fn the_budget_cuts_the_count_then_holds_at_the_cap() {
        let p = pace(Some(10.0), None);
        assert_eq!(
            paced_count(&p, 100, standing(0, None)),
            PaceDecision::Go {
                count: 100,
                why: None
            }
        );
        let PaceDecision::Go {
            count: 50,
            why: Some(_),
        } = paced_count(&p, 100, standing(950, None))
        else {
            panic!()
        };
        let PaceDecision::Hold { reason } = paced_count(&p, 100, standing(1000, None)) else {
            panic!()
        };
        assert!(reason.contains("$10.00 of the $10.00 budget"), "{reason}");
        assert!(matches!(
            paced_count(&p, 100, standing(1200, None)),
            PaceDecision::Hold { .. }
        ));
    }

    #[test]
    fn the_deadline_raises_the_count_to_what_the_runs_left_need() {
        let p = pace(None, Some(4));
        // 1,000 rows left, 4 runs before the deadline: 250 a run.
        let PaceDecision::Go {
            count: 250,
            why: Some(_),
        } = paced_count(&p, 100, standing(0, Some(1000)))
        else {
            panic!()
        };
        // A count that meets it already is left alone; so is one with the deadline past.
        assert_eq!(
            paced_count(&p, 300, standing(0, Some(1000))),
            PaceDecision::Go {
                count: 300,
                why: None
            }
        );
        let late = Standing {
            now: at(5),
            ..standing(0, Some(1000))
        };
        assert_eq!(
            paced_count(&p, 100, late),
            PaceDecision::Go {
                count: 100,
                why: None
            }
        );
        // Unmeasured period or unknown rows: no raise.
        let unmeasured = Standing {
            period_secs: None,
            ..standing(0, Some(1000))
        };
        assert_eq!(
            paced_count(&p, 100, unmeasured),
            PaceDecision::Go {
                count: 100,
                why: None
            }
        );
        // Both: the budget wins.
        let both = pace(Some(2.0), Some(4));
        let PaceDecision::Go { count: 200, .. } = paced_count(&both, 100, standing(0, Some(1000)))
        else {
            panic!()
        };
    }

    #[test]
    fn the_forecast_says_the_spend_at_the_end_and_whether_the_deadline_is_met() {
        let p = pace(Some(10.0), Some(10));
        let f = forecast(&p, standing(400, Some(600)), Some(100.0));
        assert_eq!(f.spend_at_end_dollars, Some(10.0));
        assert_eq!(f.affordable_rows, Some(600));
        assert_eq!(f.finish_at, Some(at(6)));
        assert_eq!(f.meets_deadline, Some(true));
        let slow = forecast(&p, standing(400, Some(600)), Some(50.0));
        assert_eq!(slow.meets_deadline, Some(false));
    }
}
