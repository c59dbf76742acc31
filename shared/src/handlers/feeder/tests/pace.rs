//! The feeder under a pace (`granary pace`, `domain::pace`): the budget cuts a run, then holds
//! the feeder at the cap with the reason, and a raised budget and a release go on; a deadline
//! raises the run's count to what the rows left need in the runs left.

use super::*;
use crate::domain::pace::Pace;

fn pace(budget: Option<f64>, deadline: Option<chrono::DateTime<chrono::Utc>>) -> Pace {
    Pace {
        budget_dollars: budget,
        deadline,
        dollars_per_granule: 0.01,
        measured_over: 100,
        set_at: crate::clock::now(),
        set_by: "test".into(),
    }
}

#[tokio::test]
async fn the_budget_cuts_a_run_then_holds_the_feeder_at_the_cap_until_raised_and_released() {
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Runnable));
    let ctx = ctx_with_rows(&[], jobs.clone(), 50).await;
    ctx.pace().write(&pace(Some(0.30), None)).await.unwrap();
    assert_eq!(feed_rows(&ctx, 20).await.submitted, 20);
    let cut = feed_rows(&ctx, 20).await;
    assert_eq!(cut.submitted, 10, "what $0.30 pays for at $0.01 a granule");
    let held = feed_rows(&ctx, 20).await;
    assert_eq!(held.submitted, 0);
    let why = held.early_exit.unwrap();
    assert!(
        why.contains("spend cap") && why.contains("granary release"),
        "{why}"
    );
    let hold = ctx.hold().read().await.unwrap().unwrap();
    assert_eq!(hold.held_by, SPEND_CAP_HOLDER);
    // What was submitted stays submitted: the cap stops new work only.
    assert_eq!(jobs.submitted().len(), 30);
    // Released without a larger budget: held again by the next run.
    ctx.hold().release().await.unwrap();
    assert_eq!(feed_rows(&ctx, 20).await.submitted, 0);
    assert!(ctx.hold().read().await.unwrap().is_some());
    ctx.pace().write(&pace(Some(1.0), None)).await.unwrap();
    ctx.hold().release().await.unwrap();
    assert_eq!(feed_rows(&ctx, 20).await.submitted, 20);
}

#[tokio::test]
async fn a_deadline_raises_the_count_to_what_the_runs_left_need() {
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Runnable));
    let ctx = ctx_with_rows(&[], jobs.clone(), 50).await;
    assert_eq!(feed_rows(&ctx, 5).await.submitted, 5);
    // The feeder's last two runs an hour apart: its period.
    let mut tracker = ctx.tracker().load().await.unwrap();
    let now = crate::clock::now();
    tracker.value.samples = vec![
        crate::domain::progress::Sample {
            at: now - chrono::Duration::hours(2),
            rows: 0,
        },
        crate::domain::progress::Sample {
            at: now - chrono::Duration::hours(1),
            rows: 5,
        },
    ];
    ctx.tracker().save(&mut tracker).await.unwrap();
    // 45 rows left, two runs before the deadline: 23 a run, though the schedule asks for 5.
    let deadline = now + chrono::Duration::minutes(150);
    ctx.pace().write(&pace(None, Some(deadline))).await.unwrap();
    assert_eq!(feed_rows(&ctx, 5).await.submitted, 23);
    // Run again at once: still two runs before the deadline, so half of the 22 left.
    assert_eq!(feed_rows(&ctx, 5).await.submitted, 11);
    // A pace without a deadline leaves the schedule's count alone.
    ctx.pace().write(&pace(Some(100.0), None)).await.unwrap();
    assert_eq!(feed_rows(&ctx, 5).await.submitted, 5);
}
