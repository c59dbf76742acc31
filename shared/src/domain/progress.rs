//! Throughput and time to completion, from the feeder's progress samples.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

/// Samples kept: at one per feeder run (at most one per minute), days of history.
pub const MAX_SAMPLES: usize = 2_000;
const MIN_SPACING_SECS: i64 = 60;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    pub at: DateTime<Utc>,
    pub rows: u64,
}

/// Appends (at, rows); a sample within a minute of the last one replaces it, and the oldest
/// samples fall off past [`MAX_SAMPLES`].
pub fn record_sample(samples: &mut Vec<Sample>, at: DateTime<Utc>, rows: u64) {
    // The first sample is never replaced: it is the baseline of every rate.
    let keep_first = samples.len() == 1;
    if let Some(last) = samples.last_mut() {
        if at.signed_duration_since(last.at).num_seconds() < MIN_SPACING_SECS && !keep_first {
            *last = Sample { at, rows };
            return;
        }
    }
    samples.push(Sample { at, rows });
    let excess = samples.len().saturating_sub(MAX_SAMPLES);
    samples.drain(..excess);
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rate {
    /// The window asked for, in hours.
    pub window_hours: f64,
    /// Rows submitted inside the window.
    pub rows: u64,
    /// Rows per hour over the time the samples actually span.
    pub per_hour: f64,
}

/// Rows per hour over the last `window` before `now`: from the last sample at or before the
/// window's start (or the first inside it) to the newest sample. `None` with fewer than two
/// samples in reach or no time between them.
pub fn rate(samples: &[Sample], now: DateTime<Utc>, window: Duration) -> Option<Rate> {
    let start = now - window;
    let newest = samples.iter().rev().find(|s| s.at <= now)?;
    let base = samples
        .iter()
        .rev()
        .find(|s| s.at <= start)
        .or_else(|| samples.iter().find(|s| s.at > start))?;
    let secs = newest.at.signed_duration_since(base.at).num_milliseconds() as f64 / 1000.0;
    if secs <= 0.0 {
        return None;
    }
    let rows = newest.rows.saturating_sub(base.rows);
    Some(Rate {
        window_hours: window.num_seconds() as f64 / 3600.0,
        rows,
        per_hour: rows as f64 * 3600.0 / secs,
    })
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Eta {
    pub remaining_rows: u64,
    pub per_hour: f64,
    pub hours: f64,
    pub at: DateTime<Utc>,
}

/// When the remaining rows will have been submitted at `per_hour`. `None` at a zero rate (say so:
/// nothing is moving) — and `Some` with zero hours when nothing remains.
pub fn eta(remaining_rows: u64, per_hour: f64, now: DateTime<Utc>) -> Option<Eta> {
    if remaining_rows == 0 {
        return Some(Eta {
            remaining_rows,
            per_hour,
            hours: 0.0,
            at: now,
        });
    }
    if per_hour <= 0.0 || !per_hour.is_finite() {
        return None;
    }
    let hours = remaining_rows as f64 / per_hour;
    let at = now + Duration::milliseconds((hours * 3_600_000.0) as i64);
    Some(Eta {
        remaining_rows,
        per_hour,
        hours,
        at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(h: i64, m: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000, 0).unwrap()
            + Duration::hours(h)
            + Duration::minutes(m)
    }

    #[test]
    fn rate_spans_from_the_window_start_to_the_newest_sample() {
        // 1,000 rows an hour for six hours
        let samples: Vec<Sample> = (0..=6)
            .map(|h| Sample {
                at: t(h, 0),
                rows: 1_000 * h as u64,
            })
            .collect();
        let r = rate(&samples, t(6, 0), Duration::hours(1)).unwrap();
        assert_eq!((r.rows, r.per_hour), (1_000, 1_000.0));
        let r = rate(&samples, t(6, 0), Duration::hours(3)).unwrap();
        assert_eq!((r.rows, r.per_hour), (3_000, 1_000.0));
        // a window longer than the history uses all of it
        let r = rate(&samples, t(6, 0), Duration::hours(24)).unwrap();
        assert_eq!((r.rows, r.per_hour), (6_000, 1_000.0));
        assert_eq!(rate(&samples[..1], t(6, 0), Duration::hours(1)), None);
        assert_eq!(rate(&[], t(6, 0), Duration::hours(1)), None);
    }

    #[test]
    fn eta_at_the_measured_rate() {
        let e = eta(5_000, 1_000.0, t(0, 0)).unwrap();
        assert_eq!((e.hours, e.at), (5.0, t(5, 0)));
        assert_eq!(eta(0, 0.0, t(0, 0)).unwrap().hours, 0.0);
        assert_eq!(eta(10, 0.0, t(0, 0)), None);
    }

    #[test]
    fn samples_are_spaced_and_capped() {
        let mut s = Vec::new();
        record_sample(&mut s, t(0, 0), 0);
        record_sample(&mut s, t(0, 1), 10);
        record_sample(&mut s, t(0, 1) + Duration::seconds(30), 15); // replaces the last
        assert_eq!(s.len(), 2);
        assert_eq!(s[1].rows, 15);
        for i in 0..(MAX_SAMPLES as i64 + 10) {
            record_sample(&mut s, t(1, 0) + Duration::minutes(i), i as u64);
        }
        assert_eq!(s.len(), MAX_SAMPLES);
        assert_eq!(s.last().unwrap().rows, MAX_SAMPLES as u64 + 9);
    }
}
