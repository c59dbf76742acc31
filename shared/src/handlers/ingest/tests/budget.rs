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

/// A server that never answers within the HTTP client's timeout fails its job once the
/// download's attempts are spent, one attempt a tick: each attempt's timeout is recorded
/// (`JobRecord::slow_attempts`), rather than the step outliving its share, recording nothing,
/// and starting again at attempt 1 every tick for ever (`granary-local simulate --ingest` found
/// that). The same for a callback that never answers.
#[tokio::test(start_paused = true)]
async fn a_server_that_never_answers_fails_its_job_after_its_attempts_one_a_tick() {
    let mut w = world(IngestSettings {
        timeout: Duration::from_secs(600),
        download_attempts: 3,
        callback_attempts: 3,
        ..IngestSettings::default()
    });
    // The template's dispatcher: 900 s, a tick plans 720.
    w.ingest_ctx.config.leases.function_timeout = Some(Duration::from_secs(900));
    w.remote.time_out_after(Duration::from_secs(600));
    let hanging = w.manifest("hangs", &[("hang.txt", "never")], &[]).await;
    let fine = w.manifest("fine", &[("ok.txt", "fine")], &[]).await;
    w.remote
        .slow("http://archive/hang.txt", Duration::from_secs(86_400));
    w.remote
        .slow("http://depositor/cb", Duration::from_secs(86_400));
    // A server that answers every GET with a 503, after 250 s: three attempts are more than a
    // step's share (630 s), so each after the first is the next tick's.
    let erring = w.manifest("errs", &[("err.txt", "errs")], &[]).await;
    w.remote
        .slow("http://archive/err.txt", Duration::from_secs(250));
    w.remote.fail_fetches("http://archive/err.txt", 100);
    let errs = w.submit(&erring, "coll", None).await;
    let stuck = w.submit(&hanging, "coll", None).await;
    let calls_back = w.submit(&fine, "coll", Some("http://depositor/cb")).await;
    // Ticks until nothing moves, Batch ending each processing job as a success.
    let slow = w.run(|_| true).await.slow_attempts;
    let job = w.job(&stuck.job(1)).await;
    assert_eq!(job.state, JobState::Failed, "{}", job.reason);
    assert!(job.reason.contains("3 attempts failed"), "{}", job.reason);
    let job = w.job(&errs.job(1)).await;
    assert_eq!(job.state, JobState::Failed, "{}", job.reason);
    assert!(job.reason.contains("503"), "{}", job.reason);
    let job = w.job(&calls_back.job(1)).await;
    assert_eq!(job.state, JobState::Failed, "{}", job.reason);
    assert!(job.reason.contains("failed 3 times"), "{}", job.reason);
    assert_eq!(slow, 6, "two attempts of each left for a later tick");
    // Announced at least once (at least once, as the bus promises: again by a step cut short
    // before its callback's answer was recorded).
    let announced = w
        .bus
        .events()
        .iter()
        .filter(|e| e.detail_type == crate::contracts::ingest::JOB_COMPLETED)
        .count();
    assert!(announced >= 1, "{announced}");
}

/// A server that let a request of this tick run to the client's timeout is tried no more this
/// tick: its other objects wait for the next one, and the other servers' jobs go on in the
/// tick's remaining time rather than each hanging object taking a share of it.
#[tokio::test(start_paused = true)]
async fn a_server_that_hung_once_in_a_tick_is_not_tried_again_in_that_tick() {
    let mut w = world(IngestSettings {
        timeout: Duration::from_secs(600),
        download_attempts: 3,
        ..IngestSettings::default()
    });
    w.ingest_ctx.config.leases.function_timeout = Some(Duration::from_secs(900));
    w.remote.time_out_after(Duration::from_secs(600));
    let dead = w
        .manifest(
            "dead",
            &[("d1.txt", "one"), ("d2.txt", "two"), ("d3.txt", "three")],
            &[],
        )
        .await;
    for f in ["d1.txt", "d2.txt", "d3.txt"] {
        w.remote
            .slow(&format!("http://archive/{f}"), Duration::from_secs(86_400));
    }
    w.submit(&dead, "coll", None).await;
    let mut waited = 0;
    let mut slow = 0;
    for _ in 0..4 {
        let started = tokio::time::Instant::now();
        let s = tick(&w.ingest_ctx, Utc::now()).await.unwrap();
        assert!(
            started.elapsed() <= Duration::from_secs(720),
            "{:?}",
            started.elapsed()
        );
        waited += s.waiting_on_hosts;
        slow += s.slow_attempts;
        assert!(s.slow_attempts <= 1, "one hanging request a tick: {s:?}");
    }
    assert!(slow >= 1 && waited >= 2, "slow {slow}, waited {waited}");
}

/// The estimate asks no size of a server that let a request of the tick run to its timeout (nor
/// more sizes once one is unknown): two objects whose sizeless files are on a server that never
/// answers cost the tick one request's time, and both are estimated in it (before, each asked
/// and waited out the timeout, and the second outlived its share).
#[tokio::test(start_paused = true)]
async fn an_estimate_waits_on_a_silent_server_once_not_for_each_file() {
    let mut w = world(IngestSettings {
        timeout: Duration::from_secs(600),
        ..IngestSettings::default()
    });
    w.ingest_ctx.config.leases.function_timeout = Some(Duration::from_secs(900));
    w.remote.time_out_after(Duration::from_secs(600));
    let silent = w
        .manifest("silent", &[("s1.txt", "one"), ("s2.txt", "two")], &[])
        .await;
    for f in ["s1.txt", "s2.txt"] {
        w.remote
            .slow(&format!("http://archive/{f}"), Duration::from_secs(86_400));
    }
    let id = w.submit(&silent, "coll", None).await;
    // One tick makes the jobs and estimates them.
    let started = tokio::time::Instant::now();
    let s = tick(&w.ingest_ctx, Utc::now()).await.unwrap();
    assert_eq!(s.estimated, 2, "{s:?}");
    assert!(
        started.elapsed() < Duration::from_secs(700),
        "{:?}",
        started.elapsed()
    );
    for n in 1..=2 {
        assert!(w.job(&id.job(n)).await.state > JobState::Estimating);
    }
}
