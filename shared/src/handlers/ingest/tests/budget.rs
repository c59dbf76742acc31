//! A tick within its budget: one depositor's server that never answers costs a share of a tick,
//! and every other job goes on (on tokio's paused clock: the hang is simulated time).

use super::*;
use std::time::Duration;

#[tokio::test(start_paused = true)]
async fn a_server_that_hangs_costs_a_share_of_the_tick_and_the_other_jobs_go_on() {
    // Each request may take 10 s: a step's share is a quarter of what is left (20 s at first).
    let mut w = world(IngestSettings {
        timeout: Duration::from_secs(10),
        ..IngestSettings::default()
    });
    // The dispatcher's timeout: a tick plans four fifths of it (80 s).
    w.ingest_ctx.config.leases.function_timeout = Some(Duration::from_secs(100));
    let hanging = w.manifest("hangs", &[("hang.txt", "never")], &[]).await;
    let fine = w.manifest("fine", &[("ok.txt", "fine")], &[]).await;
    w.remote
        .slow("http://archive/hang.txt", Duration::from_secs(86_400));
    let stuck = w.submit(&hanging, "coll", None).await;
    let goes_on = w.submit(&fine, "coll", None).await;
    let mut out_of_time = 0;
    for _ in 0..6 {
        let started = tokio::time::Instant::now();
        let s = tick(&w.ingest_ctx, Utc::now()).await.unwrap();
        let took = started.elapsed();
        assert!(took <= Duration::from_secs(80), "a tick took {took:?}");
        out_of_time += s.out_of_time;
    }
    assert!(
        out_of_time > 0,
        "the hanging job's steps were never cut short"
    );
    let fine_job = w.job(&goes_on.job(1)).await;
    assert!(
        fine_job.state > JobState::Downloading,
        "the other job waited behind the hanging one: {:?}",
        fine_job.state
    );
    let stuck_job = w.job(&stuck.job(1)).await;
    assert!(
        stuck_job.state <= JobState::Downloading,
        "{:?}",
        stuck_job.state
    );
}
