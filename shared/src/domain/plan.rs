//! A campaign's forecast before launch (`granary plan`): how long the granules left take and what
//! they cost, from the configuration — the feeder's pace, the job queue's capacity, Batch's
//! SubmitJob budget — and, once the campaign runs, from its measured pace. Pure: the command
//! reads the inventories' footers and the tracker, this does the arithmetic.

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

/// What the forecast assumes (the command's options; their defaults are the template's).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanSettings {
    /// Minutes between feeder runs (template `FeederScheduleMinutes`).
    pub schedule_minutes: f64,
    /// Granules a feeder run is asked to submit (template `GranuleSubmitCount`).
    pub submit_count: u64,
    /// The feeder's run time limit in seconds (`GRANARY_FUNCTION_TIMEOUT_SECS`): it starts no
    /// window past half of it, so with single jobs a run submits at most what its SubmitJob
    /// rate lets through in half its time, plus the window in hand.
    pub run_secs: f64,
    /// The most rows one window holds (`handlers::feeder::window_ceiling` of the run time for
    /// single jobs; 10,000 for array windows).
    pub window_rows: u64,
    /// The feeder submits nothing while this many jobs are unfinished (`GRANARY_MAX_ACTIVE_JOBS`).
    pub max_active_jobs: u64,
    /// A job's expected run time, queueing excluded.
    pub job_minutes: f64,
    /// Attempts beyond the first, as a share of granules (Spot reclaims, pull errors): 0.07
    /// is 7 retries a hundred granules.
    pub retry_share: f64,
    /// First attempts go as array windows (one SubmitJob call a window), or one call a granule.
    pub array_windows: bool,
    /// SubmitJob calls a second the feeder may make (its `GRANARY_SUBMIT_JOB_RATE` share; 0:
    /// unpaced, Batch's 50 a second then bounds it). Retries go through the requeuer's own share.
    pub submit_rate: f64,
    /// What one job costs an hour (its share of an instance, Spot or on-demand); `None`: the
    /// compute cost is not forecast.
    pub job_hour_dollars: Option<f64>,
    /// granary's own cost (S3, SQS, Lambda) a million granules.
    pub granary_dollars_per_million: f64,
}

/// Batch's SubmitJob quota, calls a second per account and Region (AWS Batch User Guide,
/// "Service quotas"): the bound for an unpaced single-job campaign.
pub const BATCH_SUBMIT_JOB_PER_SECOND: f64 = 50.0;

/// Which of the paces bounds the campaign.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// The feeder's schedule and run: `submit_count` every `schedule_minutes`, as far as a run's
    /// time lets it.
    Feeder,
    /// The job queue: `max_active_jobs` running, each `job_minutes`.
    Capacity,
    /// SubmitJob calls a second (single jobs only: the feeder's share, first attempts).
    SubmitJob,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Forecast {
    pub granules_left: u64,
    /// First attempts and retries.
    pub attempts: f64,
    /// Granules an hour each pace allows.
    pub feeder_per_hour: f64,
    pub capacity_per_hour: f64,
    /// `None` for array windows (a window is one call; retries are a share of it).
    pub submit_job_per_hour: Option<f64>,
    pub per_hour: f64,
    pub bound_by: Bound,
    pub hours: f64,
    pub finish_at: Option<DateTime<Utc>>,
    pub compute_dollars: Option<f64>,
    pub granary_dollars: f64,
    /// At the pace measured so far (the tracker's last day), when there is one.
    pub measured: Option<Measured>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Measured {
    pub per_hour: f64,
    pub hours: f64,
    pub finish_at: Option<DateTime<Utc>>,
}

fn finish(now: DateTime<Utc>, hours: f64) -> Option<DateTime<Utc>> {
    let secs = hours * 3600.0;
    (secs.is_finite() && secs < 1e12).then(|| now + Duration::seconds(secs.ceil() as i64))
}

/// The forecast for `left` granules under `s`, and at `measured_per_hour` (granules an hour the
/// campaign has moved so far) when given.
pub fn forecast(
    left: u64,
    s: &PlanSettings,
    measured_per_hour: Option<f64>,
    now: DateTime<Utc>,
) -> Forecast {
    let attempts_per_granule = 1.0 + s.retry_share.max(0.0);
    let calls = if s.submit_rate > 0.0 {
        s.submit_rate.min(BATCH_SUBMIT_JOB_PER_SECOND)
    } else {
        BATCH_SUBMIT_JOB_PER_SECOND
    };
    // A run asked for more than its time allows submits what fits: with single jobs, the calls
    // of half its time and the window in hand (`handlers::feeder::feed`).
    let per_run = if s.array_windows {
        s.submit_count as f64
    } else {
        (s.submit_count as f64).min(calls * s.run_secs / 2.0 + s.window_rows as f64)
    };
    let feeder_per_hour = per_run * 60.0 / s.schedule_minutes.max(f64::MIN_POSITIVE);
    // Capacity runs attempts, retries included.
    let capacity_per_hour = s.max_active_jobs as f64 * 60.0
        / s.job_minutes.max(f64::MIN_POSITIVE)
        / attempts_per_granule;
    // First attempts: the feeder's share of the account's calls, one a granule.
    let submit_job_per_hour = (!s.array_windows).then_some(calls * 3600.0);
    let mut paces = vec![
        (Bound::Feeder, feeder_per_hour),
        (Bound::Capacity, capacity_per_hour),
    ];
    if let Some(p) = submit_job_per_hour {
        paces.push((Bound::SubmitJob, p));
    }
    let (bound_by, per_hour) = paces
        .into_iter()
        .fold((Bound::Feeder, f64::INFINITY), |best, p| {
            if p.1 < best.1 {
                p
            } else {
                best
            }
        });
    let hours = if left == 0 {
        0.0
    } else {
        left as f64 / per_hour
    };
    let attempts = left as f64 * attempts_per_granule;
    let measured = measured_per_hour.filter(|p| *p > 0.0).map(|p| {
        let hours = left as f64 / p;
        Measured {
            per_hour: p,
            hours,
            finish_at: finish(now, hours),
        }
    });
    Forecast {
        granules_left: left,
        attempts,
        feeder_per_hour,
        capacity_per_hour,
        submit_job_per_hour,
        per_hour,
        bound_by,
        hours,
        finish_at: finish(now, hours),
        compute_dollars: s
            .job_hour_dollars
            .map(|d| attempts * s.job_minutes / 60.0 * d),
        granary_dollars: left as f64 * s.granary_dollars_per_million / 1e6,
        measured,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> PlanSettings {
        PlanSettings {
            schedule_minutes: 60.0,
            submit_count: 1000,
            run_secs: 300.0,
            window_rows: 3750,
            max_active_jobs: 1000,
            job_minutes: 30.0,
            retry_share: 0.0,
            array_windows: false,
            submit_rate: 40.0,
            job_hour_dollars: Some(0.02),
            granary_dollars_per_million: 18.41,
        }
    }

    fn at() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-26T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn the_slowest_pace_bounds_the_campaign() {
        // 1,000 an hour from the feeder; 2,000 from capacity; 144,000 from SubmitJob.
        let f = forecast(10_000, &settings(), None, at());
        assert_eq!((f.bound_by, f.per_hour), (Bound::Feeder, 1000.0));
        assert_eq!(f.hours, 10.0);
        assert_eq!(f.finish_at, Some(at() + Duration::hours(10)));
        // Capacity: 100 jobs of 30 minutes, 200 an hour.
        let f = forecast(
            10_000,
            &PlanSettings {
                max_active_jobs: 100,
                ..settings()
            },
            None,
            at(),
        );
        assert_eq!(
            (f.bound_by, f.per_hour, f.hours),
            (Bound::Capacity, 200.0, 50.0)
        );
        // SubmitJob: runs a minute apart at 1 call a second, the window in hand small: 150 + 10
        // a run, 9,600 an hour against 3,600 calls an hour.
        let f = forecast(
            10_000,
            &PlanSettings {
                submit_count: 100_000,
                schedule_minutes: 1.0,
                max_active_jobs: 1_000_000,
                submit_rate: 1.0,
                window_rows: 10,
                ..settings()
            },
            None,
            at(),
        );
        assert_eq!((f.bound_by, f.per_hour), (Bound::SubmitJob, 3600.0));
        assert_eq!(f.feeder_per_hour, 9600.0);
    }

    #[test]
    fn a_run_submits_no_more_single_jobs_than_its_time_allows() {
        // 20 calls a second for 150 s, and the 3,750-row window in hand: 6,750 a run.
        let f = forecast(
            100_000,
            &PlanSettings {
                submit_count: 50_000,
                submit_rate: 20.0,
                max_active_jobs: 1_000_000,
                ..settings()
            },
            None,
            at(),
        );
        assert_eq!((f.bound_by, f.feeder_per_hour), (Bound::Feeder, 6750.0));
        // Array windows: one call a window, the count as asked.
        let f = forecast(
            100_000,
            &PlanSettings {
                submit_count: 50_000,
                array_windows: true,
                max_active_jobs: 1_000_000,
                ..settings()
            },
            None,
            at(),
        );
        assert_eq!(f.feeder_per_hour, 50_000.0);
    }

    #[test]
    fn array_windows_are_not_bound_by_submit_job_and_retries_use_capacity() {
        let s = PlanSettings {
            array_windows: true,
            submit_rate: 1.0,
            retry_share: 0.25,
            ..settings()
        };
        let f = forecast(1000, &s, None, at());
        assert_eq!(f.submit_job_per_hour, None);
        assert_eq!(f.capacity_per_hour, 1600.0);
        assert_eq!(f.attempts, 1250.0);
        // 1,250 attempts of half an hour at $0.02 an hour.
        assert_eq!(f.compute_dollars, Some(12.5));
        assert!((f.granary_dollars - 0.01841).abs() < 1e-12);
    }

    #[test]
    fn a_measured_pace_gives_its_own_finish_and_nothing_left_takes_no_time() {
        let f = forecast(5000, &settings(), Some(500.0), at());
        let m = f.measured.unwrap();
        assert_eq!((m.per_hour, m.hours), (500.0, 10.0));
        assert!(forecast(5000, &settings(), Some(0.0), at())
            .measured
            .is_none());
        let done = forecast(0, &settings(), None, at());
        assert_eq!((done.hours, done.finish_at), (0.0, Some(at())));
        let none = PlanSettings {
            job_hour_dollars: None,
            ..settings()
        };
        assert_eq!(forecast(10, &none, None, at()).compute_dollars, None);
    }
}
