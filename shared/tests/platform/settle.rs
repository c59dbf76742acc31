//! After a crash, what AWS and the operators do until nothing moves: redeliveries, schedules, leases running out, a second crash inside the recovery.

use super::*;

/// What the platform does to the recovery: the invocations that run after the one under test,
/// redoing what it left.
#[derive(Debug, Clone, Copy, Default)]
pub struct Recovery {
    /// The recovery's Nth external call, counted across its invocations in the order they run,
    /// kills the invocation making it (a second crash, inside the recovery).
    pub crash: Option<CrashPoint>,
    /// Every message is delivered twice at once and every scheduled function fires twice,
    /// overlapping, their calls interleaved one by one (SQS delivers at least once; EventBridge
    /// schedules invoke at least once).
    pub twice: bool,
}

/// What the recovery did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Recovered {
    /// External calls the recovery's invocations made.
    pub calls: u64,
    /// Whether the recovery's crash point was reached.
    pub crashed: bool,
}

/// The recovery's faults across its invocations: its crash counted as [`crashes::Crashes`]
/// counts every run's.
struct RecoveryFaults {
    plan: Recovery,
    crashes: crashes::Crashes,
}

/// One invocation's result and whether it lived.
type Ran<T, E> = (Result<T, E>, bool);

impl RecoveryFaults {
    fn new(plan: Recovery) -> Self {
        Self {
            plan,
            crashes: crashes::Crashes::new(plan.crash.as_slice()),
        }
    }

    fn report(&self) -> Recovered {
        Recovered {
            calls: self.crashes.calls(),
            crashed: self.crashes.reached() > 0,
        }
    }

    fn invocation(&self) -> Arc<Faults> {
        self.crashes.invocation()
    }

    /// Whether the invocation lived.
    fn ended(&self, faults: &Faults) -> bool {
        self.crashes.ended(faults)
    }

    /// Runs `call` as one invocation of `importer_ctx`'s function (two overlapping ones when the plan
    /// says twice).
    async fn invoke<T, E, Fut>(
        &self,
        importer_ctx: &Ctx,
        call: impl Fn(Ctx) -> Fut,
    ) -> Vec<Ran<T, E>>
    where
        Fut: std::future::Future<Output = Result<T, E>>,
    {
        let one = || async {
            let faults = self.invocation();
            let mut tapped = importer_ctx.with_faults(&faults);
            if self.plan.twice {
                tapped = tapped.tapped(Arc::new(Interleave));
            }
            let result = call(tapped).await;
            let lived = self.ended(&faults);
            (result, lived)
        };
        if self.plan.twice {
            let (a, b) = tokio::join!(one(), one());
            vec![a, b]
        } else {
            vec![one().await]
        }
    }

    /// A scheduled function's run(s): what the living ones returned. A run that died, or (when
    /// runs overlap) failed, is not fatal: the schedule fires again. Otherwise a failure is.
    async fn scheduled<T, E: std::fmt::Display, Fut>(
        &self,
        what: &str,
        importer_ctx: &Ctx,
        call: impl Fn(Ctx) -> Fut,
        failed: &mut u64,
    ) -> Result<Vec<T>, String>
    where
        Fut: std::future::Future<Output = Result<T, E>>,
    {
        let mut out = Vec::new();
        for (result, lived) in self.invoke(importer_ctx, call).await {
            match result {
                Ok(v) if lived => out.push(v),
                Err(e) if lived && !self.plan.twice => return Err(format!("{what}: {e}")),
                _ => *failed += 1,
            }
        }
        Ok(out)
    }

    /// Delivers every visible message of `queue` to `handle` (twice at once when the plan says
    /// so); deletes the ones a living invocation handled. Returns (handled, failed).
    async fn deliver<T, E, Fut>(
        &self,
        queue: &MemoryQueue,
        importer_ctx: &Ctx,
        handle: impl Fn(Ctx, String) -> Fut,
    ) -> (u64, u64)
    where
        Fut: std::future::Future<Output = Result<T, E>>,
    {
        let (mut handled, mut failed) = (0, 0);
        loop {
            let got = queue.receive(10, 30, 0).await.unwrap();
            if got.is_empty() {
                return (handled, failed);
            }
            for m in got {
                let runs = self
                    .invoke(importer_ctx, |i| handle(i, m.body.clone()))
                    .await;
                if runs.iter().any(|(r, lived)| *lived && r.is_ok()) {
                    queue.delete(&m.receipt_handle).await.unwrap();
                    handled += 1;
                } else {
                    failed += 1;
                }
            }
        }
    }
}

/// The platform, fault-free, until nothing moves: the feeder's schedule, the import, retry and
/// events queues' event sources, Batch, and the sweeper's schedule (reconciler, then sweeper) a
/// day later. Between rounds every visibility timeout runs out, so what a dead invocation left
/// behind is delivered again.
pub async fn settle(w: &World) -> Result<(), String> {
    settle_with(w, Recovery::default()).await.map(|_| ())
}

/// [`settle`], with the recovery's invocations crashing or doubled as `plan` says.
pub async fn settle_with(w: &World, plan: Recovery) -> Result<Recovered, String> {
    let rf = &RecoveryFaults::new(plan);
    let feeder_fn = &w.as_fn(Function::Feeder);
    let discover_fn = &w.as_fn(Function::Discover);
    let step_fn = &w.as_fn(Function::ImportStep);
    let requeuer_fn = &w.as_fn(Function::Requeuer);
    let monitor_fn = &w.as_fn(Function::Monitor);
    let sweeper_fn = &w.as_fn(Function::Sweeper);
    for round in 0..60 {
        // The visibility timeout of whatever a dead invocation held has passed.
        for q in [&w.import, &w.retry, &w.events, &w.dlq] {
            q.expire_visibility();
        }
        let mut activity = 0;
        // Runs and deliveries that failed or died are tried again next round, but are not
        // progress (a delivery waiting on another's lease fails until the lease runs out).
        let mut failed = 0;
        let feeder_waits = round < w.feeder_from_round;
        if w.feeder && !feeder_waits {
            let event = || feeder::FeederEvent {
                granule_submit_count: 10,
            };
            for run in rf
                .scheduled(
                    "feeder",
                    feeder_fn,
                    |i| async move { feeder::run(&i, event()).await },
                    &mut failed,
                )
                .await?
            {
                activity += run.submitted + run.retries_submitted + run.stale_parked;
            }
        }
        if w.discover {
            for run in rf
                .scheduled(
                    "discover",
                    discover_fn,
                    |i| async move { discover::discover(&i).await },
                    &mut failed,
                )
                .await?
            {
                activity += run.new;
            }
        }
        for (done, refused) in [
            rf.deliver(&w.import, step_fn, |i, b| async move {
                importer::handle_message(&i, &b).await
            })
            .await,
            rf.deliver(&w.retry, requeuer_fn, |i, b| async move {
                requeuer::handle_message(&i, &b).await
            })
            .await,
        ] {
            activity += done;
            failed += refused;
        }
        activity += finish_jobs(w).await;
        let (done, refused) = rf
            .deliver(&w.events, monitor_fn, |i, b| async move {
                monitor::handle_message(&i, &b).await
            })
            .await;
        activity += done;
        failed += refused;
        if w.resume_cancelled {
            // Boxed: the settling loop's own future stays the size it was.
            activity += Box::pin(operator_resumes_cancelled(w, rf, &mut failed)).await?;
        }
        let later = Utc::now() + chrono::Duration::days(1);
        for r in rf
            .scheduled(
                "reconciler",
                sweeper_fn,
                |i| async move { reconciler::reconcile(&i, later).await },
                &mut failed,
            )
            .await?
        {
            activity += r.recovered + r.closed + r.taken_over;
        }
        for s in rf
            .scheduled(
                "sweeper",
                sweeper_fn,
                |i| async move { sweeper::sweep(&i, later).await },
                &mut failed,
            )
            .await?
        {
            activity += s.retried + s.gave_up + s.finished_by_batch + s.stale_markers;
        }
        if activity == 0 {
            if let_leases_run_out(w).await || failed > 0 || feeder_waits {
                continue;
            }
            return Ok(rf.report());
        }
    }
    Err("the platform did not settle in 60 rounds".into())
}

/// The operator's `granary cancel` of every open attempt, run (boxed: see `run_world`).
pub(super) async fn operator_cancels(
    c: &Ctx,
    now: chrono::DateTime<Utc>,
    entropy: u32,
) -> Result<granary::handlers::cancel::CancelSummary, granary::handlers::HandlerError> {
    let request = operator_cancel();
    Box::pin(granary::handlers::cancel::cancel(
        c,
        &request,
        now,
        entropy,
        |_, _| {},
    ))
    .await
}

/// The operator's `granary cancel` of every open attempt, as the cancel scenarios ask it.
fn operator_cancel() -> granary::handlers::cancel::CancelRequest {
    granary::handlers::cancel::CancelRequest {
        filter: Default::default(),
        reason: "wrong container image".into(),
        by: "operator".into(),
        dry_run: false,
        hold_feeder: true,
        per_second: 10_000.0,
    }
}

/// The operator, once `granary cancel`'s ends are listed: `granary resume --cancelled` (a run
/// that died is run again next round), then `granary release`. Returns the activity.
async fn operator_resumes_cancelled(
    w: &World,
    rf: &RecoveryFaults,
    failed: &mut u64,
) -> Result<u64, String> {
    let mut activity = 0;
    for resumed in rf
        .scheduled(
            "resume-cancelled",
            &w.importer_ctx,
            |i| async move { granary::handlers::cancel::resume_cancelled(&i, None, false).await },
            failed,
        )
        .await?
    {
        activity += resumed.len() as u64;
    }
    let hold = &w.importer_ctx.config.layout.hold_key;
    if w.importer_ctx.store.get(hold).await.unwrap().is_some() {
        w.importer_ctx.store.delete(hold).await.unwrap();
        activity += 1;
    }
    Ok(activity)
}

/// Time passes for a quiet platform that still holds leases (a dead invocation's claim without
/// its job ids, a failure logged and not routed): each such lease is made as old as the
/// template's lease (`GRANARY_CLAIM_LEASE_SECS`, `GRANARY_ROUTE_LEASE_SECS`), as that much time
/// would make it, so the next delivery or run takes the work over. Nothing else moves the
/// clock: while a lease runs, the work waits, as it does in AWS. Whether any lease was aged.
pub(super) async fn let_leases_run_out(w: &World) -> bool {
    // The time that ages a lease also lets ListJobs show the jobs submitted meanwhile.
    let listed = w.jobs.catch_up_listing();
    let mut aged = false;
    for campaign in w.campaigns() {
        aged |= let_campaign_leases_run_out(&ctx(w).in_campaign(campaign.as_ref())).await;
    }
    listed || aged
}

/// [`let_leases_run_out`] in one campaign's state.
async fn let_campaign_leases_run_out(c: &Ctx) -> bool {
    let claim_lease = function_config(Function::Feeder).leases.claim_lease;
    let route_lease = function_config(Function::Monitor).leases.route_lease;
    let layout = &c.config.layout;
    // A window claim until its jobs are recorded; a granule's claim until its job is.
    let claims = leases::age_leases(
        c.store.as_ref(),
        &layout.claim_prefix,
        "claimed_at",
        claim_lease,
        |v, _| match v.get("granules") {
            Some(granules) => {
                let ids = v["job_ids"].as_array().cloned().unwrap_or_default();
                ids.len() < granules.as_array().map_or(0, Vec::len)
                    || ids.iter().any(serde_json::Value::is_null)
            }
            None => v["job_id"].is_null(),
        },
    )
    .await;
    // A failure logged and not yet routed. With item records no log is marked routed (the
    // record past the attempt is the mark), so every failure log is aged once: a routed one's
    // age changes nothing, as its redelivery finds the record past the attempt.
    let logs = leases::age_leases(
        c.store.as_ref(),
        &layout.log_prefix,
        "logged_at",
        route_lease,
        |v, key| {
            key.contains("outcome=failure/")
                && v["routed_at"].is_null()
                && v["superseded"].is_null()
        },
    )
    .await;
    claims || logs
}

pub async fn only_item(w: &World) -> GranuleId {
    let items = ctx(w).items().find(&ItemQuery::default()).await.unwrap();
    assert_eq!(items.len(), 1, "{items:?}");
    items[0].id.clone()
}

pub(super) async fn run_to_the_retry_of(w: &World, attempt: u32) {
    let max = function_config(Function::Requeuer).max_attempt();
    let requeuer_fn = w.as_fn(Function::Requeuer);
    let monitor_fn = &w.as_fn(Function::Monitor);
    for _ in 0..4 * max {
        for m in w.retry.receive(10, 30, 0).await.unwrap() {
            let ended: GranuleProcessingEvent = serde_json::from_str(&m.body).unwrap();
            if ended.attempt == attempt {
                w.retry.expire_visibility();
                return;
            }
            requeuer::handle_message(&requeuer_fn, &m.body)
                .await
                .unwrap();
            w.retry.delete(&m.receipt_handle).await.unwrap();
        }
        finish_jobs(w).await;
        drain(&w.events, |b| async move {
            monitor::handle_message(monitor_fn, &b).await
        })
        .await;
    }
    panic!("the retry message of attempt {attempt} never came");
}
