//! `granary cancel` and `granary resume --cancelled` (#32 item 5) as an operator meets them: a
//! campaign whose first window has run and whose second is submitted and not yet run is
//! cancelled; exactly the second window's jobs are terminated (the job ids granary recorded),
//! the feeder is held, their ends are logged and listed as cancelled (not retried, not
//! dead-lettered); resuming sends them round again and the campaign ends with every granule
//! succeeded once. On the emulator (single jobs, the binary's dry run and resume) and on the
//! in-memory twins (array windows: each child terminated by its `<parent>:<index>` id).
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

mod common;

use common::granary;
use granary::domain::cancel::CancelFilter;
use granary::handlers::cancel::{self, CancelRequest};
use granary_local::campaign::{Campaign, CampaignSpec};
use granary_local::fault_plan::FaultPlan;
use granary_tests::{clients, unique_name};
use std::collections::BTreeSet;

const WINDOW: u64 = 20;

fn spec(array_windows: bool) -> CampaignSpec {
    let mut spec = CampaignSpec {
        granules: 60,
        plan: FaultPlan {
            seed: 11,
            spot_rate: 0.0,
            pull_error_rate: 0.0,
            app_failure_rate: 0.0,
            timeout_rate: 0.0,
            ..FaultPlan::default()
        },
        ..CampaignSpec::default()
    };
    if array_windows {
        spec.env.push(("GRANARY_ARRAY_WINDOWS".into(), "on".into()));
    }
    spec.runner.granule_submit_count = WINDOW;
    spec
}

async fn feed(c: &Campaign) -> u64 {
    granary::handlers::feeder::run(
        &c.runtime.ctx,
        granary::handlers::feeder::FeederEvent {
            granule_submit_count: WINDOW,
        },
    )
    .await
    .unwrap()
    .submitted
}

/// The first window run to its end, the second submitted and not run: returns the second's
/// granules (what a cancel must take, and nothing else).
async fn one_window_run_and_one_waiting(c: &mut Campaign) -> BTreeSet<String> {
    let before: BTreeSet<String> = ended(c).await;
    // One round of the runtime: the feeder's window is submitted, played and its ends handled.
    c.runtime
        .run_while(|_| {}, |p| p.feeder_runs < 1)
        .await
        .unwrap();
    let first = wait_for_ends(c, before.len() + WINDOW as usize).await;
    assert_eq!(
        first.len() as u64 - before.len() as u64,
        WINDOW,
        "{first:?}"
    );
    assert_eq!(feed(c).await, WINDOW);
    let open: BTreeSet<String> = cancel::open_attempts(&c.runtime.ctx)
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.granule_id.to_string())
        .collect();
    assert_eq!(open.len() as u64, WINDOW, "only the waiting window is open");
    assert!(open.is_disjoint(&first));
    open
}

/// Granules with a success log once `want` of them have one, or after 30 s. On LocalStack the
/// events rule puts the ends into the queue a moment after the round that sent them, so the
/// round's own poll can find the queue empty (CI of 89bac63 saw 0 of 20).
async fn wait_for_ends(c: &mut Campaign, want: usize) -> BTreeSet<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let seen = ended(c).await;
        if seen.len() >= want || std::time::Instant::now() > deadline {
            return seen;
        }
        c.runtime.deliver_events().await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Granules with a success log.
async fn ended(c: &Campaign) -> BTreeSet<String> {
    let ctx = &c.runtime.ctx;
    let mut out = BTreeSet::new();
    for meta in ctx.store.list(&ctx.config.layout.log_prefix).await.unwrap() {
        if let Ok(key) =
            granary::domain::layout::logs::LogKey::parse(&ctx.config.layout.log_prefix, &meta.key)
        {
            if key.outcome == granary::domain::layout::logs::LogOutcome::Success {
                out.insert(key.granule_id.to_string());
            }
        }
    }
    out
}

/// Cancels every open attempt through the handler (the runtime's Batch, so the simulator plays
/// the terminations) and lets the runtime deliver the ends; checks what an operator would.
async fn cancel_and_see_the_ends(c: &mut Campaign, waiting: &BTreeSet<String>) -> String {
    let request = CancelRequest {
        filter: CancelFilter::default(),
        reason: "wrong container image".into(),
        by: "test".into(),
        dry_run: false,
        hold_feeder: true,
        per_second: 1000.0,
    };
    let s = cancel::cancel(&c.runtime.ctx, &request, chrono::Utc::now(), 7, |_, _| {})
        .await
        .unwrap();
    assert_eq!(s.terminated, WINDOW, "{s:?}");
    assert!(s.failed.is_empty() && s.held && s.without_job == 0, "{s:?}");
    let runs = c.runtime.progress.feeder_runs;
    c.runtime
        .run_while(|_| {}, |p| p.feeder_runs < runs + 4)
        .await
        .unwrap();
    assert_eq!(c.runtime.simulator.cancelled, WINDOW);
    // The terminations' ends, however late the events rule delivers them (as above).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while (cancel::cancelled(&c.runtime.ctx).await.unwrap().len() as u64) < WINDOW
        && std::time::Instant::now() < deadline
    {
        c.runtime.deliver_events().await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let ctx = &c.runtime.ctx;
    // Held: the rounds submitted nothing more.
    assert_eq!(c.runtime.progress.submitted, 2 * WINDOW);
    // Listed as cancelled: exactly the waiting window, with the cancel's id; nothing
    // dead-lettered, nothing waiting to be retried, nothing left open.
    let listed = cancel::cancelled(ctx).await.unwrap();
    let names: BTreeSet<String> = listed.iter().map(|l| l.granule_id.to_string()).collect();
    assert_eq!(&names, waiting);
    assert!(listed.iter().all(|l| l.cancel == s.id && l.attempt == 1));
    assert!(
        listed[0].reason.contains("wrong container image"),
        "{:?}",
        listed[0]
    );
    assert_eq!(
        ctx.failure_dlq.depth().await.unwrap(),
        granary::ports::QueueDepth::default()
    );
    assert_eq!(
        ctx.retry_queue.depth().await.unwrap(),
        granary::ports::QueueDepth::default()
    );
    let open = cancel::open_attempts(ctx).await.unwrap();
    assert!(open.is_empty(), "{open:?}");
    // Each cancelled granule's record waits for the operator.
    for l in &listed {
        let r = ctx.items().look(&l.granule_id).await.unwrap().unwrap();
        assert_eq!(r.state, granary::domain::lifecycle::ItemState::Abandoned);
    }
    s.id
}

/// Resumed and released: the campaign settles with every granule succeeded once, the cancelled
/// ones at their second attempt.
async fn settles_with_every_granule_succeeded(c: &mut Campaign, waiting: &BTreeSet<String>) {
    let started = std::time::Instant::now();
    c.runtime.run_to_quiescence(|_| {}).await.unwrap();
    let summary = c.summarize(started.elapsed()).await.unwrap();
    assert_eq!(summary.unaccounted, 0, "{summary:?}");
    assert_eq!(summary.succeeded, 60, "{summary:?}");
    assert_eq!(summary.dead_lettered, 0, "{summary:?}");
    assert!(cancel::cancelled(&c.runtime.ctx).await.unwrap().is_empty());
    let second: BTreeSet<String> = c
        .runtime
        .simulator
        .planned
        .iter()
        .filter(|p| p.attempt == 2)
        .map(|p| p.granule_id.clone())
        .collect();
    assert_eq!(
        &second, waiting,
        "the cancelled granules ran again, and only they"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_on_the_emulator_takes_exactly_the_open_jobs_and_resume_sends_them_round() {
    let (clients, iam) = clients().await;
    let mut c = Campaign::setup(&clients, &iam, &unique_name("cancel"), &spec(false))
        .await
        .unwrap();
    let waiting = one_window_run_and_one_waiting(&mut c).await;

    let owned = common::stack_vars(&c);
    let vars = common::vars(&owned);
    // The operator's dry run names exactly the waiting window's jobs, and changes nothing.
    let (code, out, err) = granary(
        &vars,
        &["cancel", "--reason", "wrong container image", "--dry-run"],
    );
    assert_eq!(code, 0, "{err}");
    let would: BTreeSet<String> = out
        .lines()
        .filter_map(|l| l.strip_prefix("would terminate "))
        .map(|l| l.split(' ').next().unwrap_or("").to_owned())
        .collect();
    assert_eq!(would, waiting, "{out}");
    assert!(
        out.contains(
            "20 of the campaign's open attempts taken by every open attempt; 0 left alone"
        ),
        "{out}"
    );
    // A filter that takes nothing.
    let (code, out, err) = granary(
        &vars,
        &["cancel", "--reason", "x", "--dry-run", "--attempt", "2"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("0 of the campaign's open attempts taken by attempt 2; 20 left alone"),
        "{out}"
    );
    // Status counts the open ends: the waiting window and every window whose marker the
    // reconciler has not yet closed (it waits GRANARY_RECONCILE_AFTER_SECS), as the store holds
    // them; no requeued attempt.
    let layout = &c.runtime.ctx.config.layout;
    let marked_windows = c
        .runtime
        .ctx
        .store
        .list(&layout.open_claim_prefix)
        .await
        .unwrap()
        .iter()
        .filter(|m| m.key.contains("/start="))
        .count() as u64;
    assert!(marked_windows >= 1, "the waiting window is open");
    let (code, out, err) = granary(&vars, &["status"]);
    assert_eq!(code, 0, "{err}");
    let open = out
        .lines()
        .find_map(|l| l.strip_prefix("open ends: "))
        .unwrap_or_else(|| panic!("no open ends line: {out}"));
    let windows: u64 = open
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{open}"));
    assert_eq!(windows, marked_windows, "{open}");
    assert!(
        open.contains(
            " and 0 requeued attempts awaiting their end; the least recently written marker 0h 0"
        ),
        "{open}"
    );
    let ctx = c.runtime.ctx.clone();
    assert!(ctx.hold().read().await.unwrap().is_none());

    let id = cancel_and_see_the_ends(&mut c, &waiting).await;

    // The operator sees the cancelled attempts, resumes them, releases the feeder.
    let (code, out, err) = granary(&vars, &["status"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("cancelled: 20 attempts wait for `granary resume --cancelled`"),
        "{out}"
    );
    let (code, out, err) = granary(&vars, &["resume", "--cancelled", "--cancel", &id]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("resumed ")).count(),
        20,
        "{out}"
    );
    let (code, _, err) = granary(&vars, &["release"]);
    assert_eq!(code, 0, "{err}");
    settles_with_every_granule_succeeded(&mut c, &waiting).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_of_an_array_window_terminates_each_child_and_resume_sends_them_round() {
    let mut c = Campaign::in_memory(&spec(true)).await.unwrap();
    let waiting = one_window_run_and_one_waiting(&mut c).await;
    let open = cancel::open_attempts(&c.runtime.ctx).await.unwrap();
    assert!(
        open.iter()
            .all(|o| o.job_id.as_deref().is_some_and(|j| j.contains(':'))),
        "each granule of an array window is its child: {open:?}"
    );
    cancel_and_see_the_ends(&mut c, &waiting).await;
    let ctx = &c.runtime.ctx;
    let resumed = cancel::resume_cancelled(ctx, None, false).await.unwrap();
    assert_eq!(resumed.len() as u64, WINDOW);
    ctx.store.delete(&ctx.config.layout.hold_key).await.unwrap();
    settles_with_every_granule_succeeded(&mut c, &waiting).await;
}
