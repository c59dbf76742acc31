//! The crash-point harness: every handler is stopped at each of its external calls in turn — the
//! call never made, or made and its answer lost — and the platform then does what AWS does after
//! a dead invocation (the SQS message comes back once its visibility timeout passes, the schedule
//! fires again, an operator reruns an interrupted command) until nothing moves any more. After
//! each run the promise is audited: no item stranded, no (granule, attempt) submitted twice, every
//! failure that ends an item dead-lettered with a reason, every success logged.
//!
//! Everything runs on the in-memory twins (`platform`); the handlers are the production ones, and
//! each invocation's S3, SQS and Batch calls pass through one `Faults` (see `adapters::tap::faults`).
//! Leases are the template's (16 minutes): a dead invocation's claim or unrouted failure keeps its
//! lease, deliveries that meet it fail and come back, and only once nothing else moves does the
//! platform let the leases run out (`platform::settle`), as that much time would; Batch's
//! ListJobs shows a new job only then too (`MemoryJobRunner::listing_lags`).
//!
//! The recovery is no kinder: a second test crashes it again (a spread of its own calls, each
//! crash asserted reached) and runs it doubled (every delivery twice at once, every scheduled run
//! overlapping, calls interleaved).
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

mod platform;

use granary::adapters::tap::faults::{CrashMode, CrashPoint};
use granary::domain::item::ItemQuery;
use granary::domain::lifecycle::ItemState;
use granary::handlers::importer;
use platform::crashes::CrashRun;
use platform::{ctx, run, run_with, world, Recovery, Scenario, World, ALL};
use std::collections::BTreeMap;

/// What is wrong with the settled world; empty when the promise held. Each campaign the world
/// holds is audited in its own state: the promise is per campaign.
async fn audit(w: &World) -> Vec<String> {
    let mut problems = Vec::new();
    let mut names: BTreeMap<String, u32> = BTreeMap::new();
    for r in w.jobs.submitted() {
        *names.entry(r.job_name).or_default() += 1;
    }
    for (name, n) in &names {
        if *n > 1 {
            problems.push(format!("{name} submitted {n} times"));
        }
    }
    problems.extend(attempts_submitted_twice(w).await);
    // A crash between a dead letter's send and the write that marks it sent makes the redelivery
    // send it again: the DLQ is at least once, as SQS itself is. A copy says what the first one
    // said; two dead letters of one attempt that disagree are two outcomes.
    let (dead, unreadable) = dead_letters(w);
    problems.extend(unreadable);
    for (of, reasons) in dead {
        if reasons.iter().any(|r| *r != reasons[0]) {
            problems.push(format!(
                "{of} dead-lettered for different reasons: {reasons:?}"
            ));
        }
    }
    for campaign in w.campaigns() {
        let c = ctx(w).in_campaign(campaign.as_ref());
        let named = campaign.map_or("the unnamed campaign".to_owned(), |n| {
            format!("campaign {n}")
        });
        problems.extend(
            audit_campaign(w, &c)
                .await
                .into_iter()
                .map(|p| format!("{named}: {p}")),
        );
    }
    problems
}

/// Each (campaign, granule, attempt) given to Batch at most once, however it went: as its own
/// job (named by its parameters) or as a child of an array window (its granule and attempt read
/// from the claim the array names, the one with the array's token). Job names alone cannot see
/// a granule put into two arrays, or into an array and a single job.
async fn attempts_submitted_twice(w: &World) -> Vec<String> {
    use granary::domain::job_tags::{
        ATTEMPT_PARAM, CAMPAIGN_PARAM, GRANULE_ID_PARAM, WINDOW_CLAIM_PARAM, WINDOW_TOKEN_PARAM,
    };
    let mut problems = Vec::new();
    let mut given: BTreeMap<(String, String, u32), Vec<String>> = BTreeMap::new();
    for r in w.jobs.submitted() {
        let campaign = r
            .parameters
            .get(CAMPAIGN_PARAM)
            .cloned()
            .unwrap_or_default();
        let mut give = |granule: String, attempt: u32, how: String| {
            given
                .entry((campaign.clone(), granule, attempt))
                .or_default()
                .push(how)
        };
        if let Some(claim_key) = r.parameters.get(WINDOW_CLAIM_PARAM) {
            let claim = granary::repositories::read_json::<granary::domain::window::WindowClaim>(
                w.importer_ctx.store.as_ref(),
                claim_key,
            )
            .await;
            let claim = match claim {
                Ok(Some(c)) => c.value,
                other => {
                    problems.push(format!(
                        "array {} names claim {claim_key}, unreadable: {other:?}",
                        r.job_name
                    ));
                    continue;
                }
            };
            if r.parameters.get(WINDOW_TOKEN_PARAM) != claim.token.as_ref() {
                problems.push(format!(
                    "array {}'s claim {claim_key} is another claim now",
                    r.job_name
                ));
                continue;
            }
            for (i, entry) in claim.entries().enumerate() {
                give(
                    entry.granule_id.to_string(),
                    entry.attempt,
                    format!("{}:{i}", r.job_name),
                );
            }
        } else if let Some(granule) = r.parameters.get(GRANULE_ID_PARAM) {
            let attempt = r
                .parameters
                .get(ATTEMPT_PARAM)
                .and_then(|a| a.parse().ok())
                .unwrap_or(0);
            give(granule.clone(), attempt, r.job_name.clone());
        }
    }
    for ((campaign, granule, attempt), how) in given {
        if how.len() > 1 {
            problems.push(format!("{granule} attempt {attempt} (campaign {campaign:?}) given to Batch {} times: {how:?}", how.len()));
        }
    }
    problems
}

/// Every granule of the backfill succeeded at its second attempt.
async fn backfill_processed_at_attempt_2(c: &granary::handlers::Ctx) {
    for g in platform::BACKFILL {
        let id = granary::domain::granule::GranuleId::parse(g).unwrap();
        let r = c.items().look(&id).await.unwrap().unwrap();
        assert_eq!(
            (r.state, r.attempts.processing),
            (granary::domain::lifecycle::ItemState::Processed, 2),
            "{g}"
        );
    }
}

/// What is left under `prefix` once the platform settled, as a problem saying `what`.
async fn left_under(c: &granary::handlers::Ctx, prefix: &str, what: &str) -> Option<String> {
    let left = c.store.list(prefix).await.unwrap();
    let keys: Vec<&str> = left.iter().map(|m| m.key.as_str()).collect();
    (!keys.is_empty()).then(|| format!("{what} after settling: {keys:?}"))
}

/// What one dead letter is of: a granule's attempt (a `RetryMessage`: `granule_id`, `attempt`) or
/// an importer item's give-up (an `ItemNotice`: `item_id`, the `state` it gave up in), with the
/// campaign each names; `None` for a body that is neither.
fn dead_letter_of(body: &str) -> Option<String> {
    let body: serde_json::Value = serde_json::from_str(body).ok()?;
    let text = |k: &str| body.get(k).and_then(|v| v.as_str());
    let campaign = text("campaign").unwrap_or("");
    if let (Some(granule), Some(attempt)) = (text("granule_id"), body.get("attempt")) {
        return Some(format!("{campaign:?} granule {granule} attempt {attempt}"));
    }
    let (item, state) = (text("item_id")?, text("state")?);
    Some(format!("{campaign:?} item {item} given up in {state}"))
}

/// The failure DLQ's dead letters (poison notices, `kind`, left out) by what each is of, with
/// the reason of each copy; a body that is no dead letter is a problem.
fn dead_letters(w: &World) -> (BTreeMap<String, Vec<String>>, Vec<String>) {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut problems = Vec::new();
    for m in w.dlq.messages() {
        if m.attributes.contains_key("kind") {
            continue;
        }
        let Some(of) = dead_letter_of(&m.body) else {
            problems.push(format!(
                "a DLQ message names no granule attempt or item: {}",
                m.body
            ));
            continue;
        };
        let reason = m.attributes.get("reason").cloned().unwrap_or_default();
        out.entry(of).or_default().push(reason);
    }
    (out, problems)
}

/// Dead letters sent more than once: none unless something crashed.
fn dead_letter_copies(w: &World) -> Vec<String> {
    dead_letters(w)
        .0
        .into_iter()
        .filter(|(_, reasons)| reasons.len() > 1)
        .map(|(of, reasons)| format!("{of} dead-lettered {} times", reasons.len()))
        .collect()
}

/// [`audit`] of one campaign's state.
async fn audit_campaign(w: &World, c: &granary::handlers::Ctx) -> Vec<String> {
    let mut problems = Vec::new();
    // Every end was handled: nothing is left in the open-claims index for the reconciler;
    // no retry is left parked for a window of retries that never came.
    let layout = &c.config.layout;
    let parked = granary::domain::layout::claims::parked_prefix(&layout.claim_prefix);
    for (prefix, left) in [
        (layout.open_claim_prefix.as_str(), "still open"),
        (parked.as_str(), "still parked"),
    ] {
        problems.extend(left_under(c, prefix, left).await);
    }
    // The brake, where a scenario sets it, held the feeder (whichever end's handling died).
    if w.brake.is_some() {
        let hold = c.hold().read().await.unwrap();
        if hold.is_none_or(|h| h.held_by != "job-monitor (automatic brake)") {
            problems.push("the brake did not hold the feeder".into());
        }
    }
    // Nothing `granary cancel` ended is left unresumed (the cancel scenario's operator resumes).
    let cancelled = granary::domain::layout::claims::cancelled_prefix(&layout.claim_prefix);
    problems.extend(left_under(c, &cancelled, "still listed as cancelled").await);
    let dlq = w.dlq.messages();
    for m in &dlq {
        if m.attributes.get("reason").is_none_or(|r| r.is_empty()) {
            problems.push(format!("DLQ message without a reason: {}", m.body));
        }
    }
    let logs: Vec<String> = c
        .store
        .list(&c.config.layout.log_prefix)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.key)
        .collect();
    let items = match c.items().find(&ItemQuery::default()).await {
        Ok(items) => items,
        // The record set aside stays where it was, unreadable; it must have left the in-flight
        // index (nothing will look at it again) and be under rejects/ (checked above).
        Err(_) if w.poison => {
            let inflight = c.items().inflight().await.unwrap();
            if !inflight.is_empty() {
                problems.push(format!("set aside but still in flight: {inflight:?}"));
            }
            Vec::new()
        }
        Err(e) => {
            problems.push(format!("the item records cannot be read: {e}"));
            Vec::new()
        }
    };
    if w.poison {
        let rejects = c.store.list(&c.config.layout.reject_prefix).await.unwrap();
        if rejects.is_empty() {
            problems.push("the poison input is not recorded under rejects/".into());
        }
        if !dlq.iter().any(|m| m.attributes.contains_key("kind")) {
            problems.push("the poison input is not on the DLQ".into());
        }
    }
    for g in &w.listed {
        if w.records && !items.iter().any(|r| r.id.as_str() == *g) {
            problems.push(format!("{g} from the inventory has no item record"));
        }
        // With records off, the logs are the outcome: every listed granule succeeds here.
        let succeeded = logs
            .iter()
            .any(|k| k.contains(*g) && k.contains("outcome=success"));
        if !w.records && !succeeded {
            problems.push(format!("{g} from the inventory has no success log"));
        }
    }
    for r in &items {
        let id = r.id.as_str();
        // Every transition is in the history exactly once, whatever the crash: the entries are
        // 0, 1, …, the record's seq (a backfill granule's creation, READY then PROCESSING, as
        // lines of its window's batch objects).
        match c.items().history(&r.id).await {
            Ok(history) => {
                let seqs: Vec<u32> = history.iter().map(|e| e.seq).collect();
                let whole: Vec<u32> = (0..=r.seq).collect();
                if seqs != whole {
                    problems.push(format!("{id} at seq {} has history {seqs:?}", r.seq));
                }
                if let Some(last) = history.last() {
                    if last.seq == r.seq && (last.to, last.from) != (r.state, r.previous_state) {
                        problems.push(format!("{id}'s last entry disagrees with its record"));
                    }
                }
            }
            Err(e) => problems.push(format!("{id}'s history cannot be read: {e}")),
        }
        let on_dlq = dlq.iter().any(|m| m.body.contains(id));
        let logged = |outcome: &str| {
            logs.iter()
                .any(|k| k.contains(id) && k.contains(&format!("outcome={outcome}")))
        };
        match r.state {
            ItemState::Processed if !logged("success") => {
                problems.push(format!("{id} PROCESSED without a success log"))
            }
            ItemState::Processed | ItemState::Skipped => {}
            ItemState::ProcessingFailed | ItemState::Abandoned | ItemState::Ignore if !on_dlq => {
                problems.push(format!("{id} ended {} and is not on the DLQ", r.state))
            }
            ItemState::ProcessingFailed if !logged("failure") => {
                problems.push(format!("{id} PROCESSING_FAILED without a failure log"))
            }
            ItemState::ProcessingFailed | ItemState::Abandoned | ItemState::Ignore => {}
            other => problems.push(format!("{id} stranded in {other}: {}", r.reason)),
        }
    }
    problems
}

// Paused time: the download step's pauses between attempts pass at once.
#[tokio::test(start_paused = true)]
async fn every_crash_point_of_every_handler_loses_nothing_and_submits_nothing_twice() {
    let mut report = Vec::new();
    for scenario in ALL {
        // How many external calls the invocation makes when nothing goes wrong.
        let (w, _, calls, settled) = run(scenario, None).await;
        settled.unwrap();
        let mut problems = audit(&w).await;
        problems.extend(dead_letter_copies(&w));
        assert!(
            problems.is_empty(),
            "{scenario:?} without a crash: {problems:?}"
        );
        assert!(calls > 0, "{scenario:?} made no external call");
        if matches!(
            scenario,
            Scenario::Cancel | Scenario::MonitorCancelled | Scenario::ReconcilerCancelled
        ) {
            // The cancel took both running jobs: each was given up as cancelled (not retried,
            // not dead-lettered), then resumed, and succeeded at its second attempt.
            let c = ctx(&w);
            backfill_processed_at_attempt_2(c).await;
            for g in platform::BACKFILL {
                let id = granary::domain::granule::GranuleId::parse(g).unwrap();
                let history = c.items().history(&id).await.unwrap();
                assert!(
                    history.iter().any(|e| {
                        e.to == granary::domain::lifecycle::ItemState::Abandoned
                            && e.reason.starts_with("attempt 1 cancelled: granary cancel ")
                    }),
                    "{g}: {history:?}"
                );
            }
            assert!(w.dlq.messages().is_empty(), "nothing dead-lettered");
        }
        if scenario == Scenario::RequeuerHeldBack {
            // Held back, then resumed: the one item succeeded at attempt 2, listed no more.
            let c = ctx(&w);
            let items = c
                .items()
                .find(&granary::domain::item::ItemQuery::default())
                .await
                .unwrap();
            assert_eq!(items.len(), 1);
            assert_eq!(
                (items[0].state, items[0].attempts.processing),
                (granary::domain::lifecycle::ItemState::Processed, 2)
            );
            let history = c.items().history(&items[0].id).await.unwrap();
            assert!(
                history
                    .iter()
                    .any(|e| e.reason.contains("held back by granary cancel")),
                "{history:?}"
            );
        }
        if matches!(
            scenario,
            Scenario::RequeuerExhausted | Scenario::RequeuerLastChance
        ) {
            // Spot took every attempt: the last chance ran on the last-attempt queue (the one a
            // reclaim would dead-letter), the others on the stack's own, each job carrying the
            // Spot ends before it.
            let config = platform::function_config(platform::Function::Requeuer);
            let last = config.jobs.and_then(|j| j.last_attempt_queue);
            assert!(last.is_some(), "the test stack has a last-attempt queue");
            let max = config.attempt_budget.retries + 1;
            let mut placed: Vec<(String, Option<String>, Option<String>)> = w
                .jobs
                .submitted()
                .into_iter()
                .map(|r| {
                    let spot = r.parameters.get("spot_ends").cloned();
                    (r.parameters["attempt"].clone(), r.queue, spot)
                })
                .collect();
            placed.sort();
            let want: Vec<(String, Option<String>, Option<String>)> = (1..=max)
                .map(|a| {
                    let queue = (a == max).then(|| last.clone()).flatten();
                    let spot = (a > 1).then(|| (a - 1).to_string());
                    (a.to_string(), queue, spot)
                })
                .collect();
            assert_eq!(placed, want);
        }
        if matches!(
            scenario,
            Scenario::RequeuerParks | Scenario::FeederRetryWindow
        ) {
            // The window of first attempts, then the retries by windows: with both parked when
            // the feeder came (FeederRetryWindow), one array of two; parked one at a time
            // (RequeuerParks: the feeder's schedule came between), a window each. Both granules
            // succeeded at attempt 2.
            let submitted = w.jobs.submitted();
            let arrays: Vec<(Option<u32>, String)> = submitted
                .iter()
                .map(|r| (r.array_size, r.parameters["attempt"].clone()))
                .collect();
            let (first, second) = ((Some(2), "1".to_owned()), "2".to_owned());
            let want = if scenario == Scenario::FeederRetryWindow {
                vec![first, (Some(2), second)]
            } else {
                vec![first, (None, second.clone()), (None, second)]
            };
            assert_eq!(arrays, want, "{scenario:?}");
            let c = ctx(&w);
            backfill_processed_at_attempt_2(c).await;
            let parked =
                granary::domain::layout::claims::parked_prefix(&c.config.layout.claim_prefix);
            assert!(c.store.list(&parked).await.unwrap().is_empty());
        }
        if scenario == Scenario::CampaignSwitchParked {
            // Each campaign's granules succeeded at their second attempt in its own state; the
            // unnamed campaign's two retries went as its one window of retries (its tracker
            // moved on by one), taken by the stack that runs v2.
            for campaign in w.campaigns() {
                backfill_processed_at_attempt_2(&ctx(&w).in_campaign(campaign.as_ref())).await;
            }
            let first = ctx(&w).in_campaign(None);
            let tracker = first.tracker().load().await.unwrap();
            assert_eq!(tracker.value.retry_windows, 1, "{scenario:?}");
        }
        if matches!(
            scenario,
            Scenario::FeederTwoInventories | Scenario::FeederTwoInventoriesArray
        ) {
            // Two windows in the run under test (one per inventory), the third by the next run
            // from the page map the first left: three window claims.
            let c = ctx(&w);
            let windows = c.store.list(&c.config.layout.claim_prefix).await.unwrap();
            let windows: Vec<_> = windows
                .iter()
                .filter(|m| m.key.contains("start="))
                .collect();
            assert_eq!(windows.len(), 3, "{windows:?}");
        }
        if scenario == Scenario::SweeperMeetsLoggedSuccess {
            // The sweeper's timed-out end met the logged success: the record followed it to
            // PROCESSED (the reconciler, which would do it too, came after), nothing was
            // retried or dead-lettered, and the one job stayed the only one.
            let c = ctx(&w);
            let id = platform::only_item(&w).await;
            let r = c.items().look(&id).await.unwrap().unwrap();
            assert_eq!((r.state, r.attempts.processing), (ItemState::Processed, 1));
            // The sweeper's own reason: the reconciler's ("Batch no longer knows job …") would
            // show the move was left to it.
            assert!(
                r.reason.contains("timed out") && r.reason.contains("succeeded at attempt 1"),
                "{}",
                r.reason
            );
            assert!(w.dlq.messages().is_empty() && w.retry.messages().is_empty());
            assert_eq!(w.jobs.submitted().len(), 1);
        }
        if scenario == Scenario::ReconcilerUndescribable {
            // One child succeeded; the one Batch describes unreadably is dead-lettered with why
            // (not left with no end, as a pass that counted it handled did), and its record
            // made at its end follows the route.
            let c = ctx(&w);
            let mut states = Vec::new();
            for g in platform::BACKFILL {
                let id = granary::domain::granule::GranuleId::parse(g).unwrap();
                let r = c.items().look(&id).await.unwrap().unwrap();
                states.push((r.state, r.attempts.processing));
                if r.state != ItemState::Processed {
                    assert!(r.reason.contains("cannot be read"), "{g}: {}", r.reason);
                    let dead = w.dlq.messages();
                    assert!(
                        dead.iter().any(|m| m.body.contains(g)
                            && m.attributes["reason"].contains("cannot be read")),
                        "{dead:?}"
                    );
                }
            }
            states.sort_by_key(|(s, _)| *s == ItemState::Processed);
            assert!(
                matches!(
                    states.as_slice(),
                    [(failed, 1), (ItemState::Processed, 1)] if *failed != ItemState::Processed
                ),
                "{states:?}"
            );
            assert_eq!(w.jobs.submitted().len(), 1);
        }

        let what = format!("{scenario:?}");
        let crashes = platform::crashes::at_every_call(&what, calls, |crash| async move {
            let (w, crashed, _, settled) = run(scenario, Some(crash)).await;
            let audit = match settled {
                Ok(()) => audit(&w).await,
                Err(e) => vec![e],
            };
            CrashRun {
                reached: crashed,
                audit: if audit.is_empty() {
                    Ok(())
                } else {
                    Err(format!("{audit:?}"))
                },
            }
        })
        .await;
        report.push(format!("{scenario:?}: {calls} calls, {crashes} crashes"));
    }
    println!("{}", report.join("\n"));
}

/// The crash-inside-the-recovery tests' groups, of a minute or less each: nextest runs them side
/// by side, and a mutant's test runs only the group that meets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RecoveryGroup {
    Importer,
    Feeder,
    CampaignSwitches,
    EndsAndCancels,
}

/// Each scenario's group: a match without a catch-all, so a new scenario cannot be left out.
fn recovery_group(scenario: Scenario) -> RecoveryGroup {
    match scenario {
        Scenario::Discover
        | Scenario::ImportStep
        | Scenario::SweeperProcessing
        | Scenario::SweeperDownload
        | Scenario::Revalidate
        | Scenario::Resume
        | Scenario::PoisonImport
        | Scenario::CorruptRecord
        | Scenario::DownloadFails
        | Scenario::SweeperMeetsLoggedSuccess => RecoveryGroup::Importer,
        Scenario::Feeder
        | Scenario::PoisonRow
        | Scenario::FeederTwoInventories
        | Scenario::FeederTwoInventoriesArray
        | Scenario::FeederRecordsOff
        | Scenario::FeederRetryWindow
        | Scenario::FeederArray => RecoveryGroup::Feeder,
        Scenario::CampaignSwitch
        | Scenario::CampaignSwitchReconciled
        | Scenario::CampaignSwitchHalfWindow
        | Scenario::CampaignSwitchParked => RecoveryGroup::CampaignSwitches,
        Scenario::Cancel
        | Scenario::MonitorCancelled
        | Scenario::ReconcilerCancelled
        | Scenario::RequeuerHeldBack
        | Scenario::Requeuer
        | Scenario::MonitorSuccess
        | Scenario::MonitorFailure
        | Scenario::Reconciler
        | Scenario::Redrive
        | Scenario::MonitorRetryable
        | Scenario::ReconcilerRetryable
        | Scenario::ReconcilerLostAnswer
        | Scenario::ReconcilerWindow
        | Scenario::ReconcilerWindowRecordsLate
        | Scenario::PoisonEvent
        | Scenario::PoisonRetry
        | Scenario::RequeuerExhausted
        | Scenario::RequeuerLastChance
        | Scenario::RequeuerParks
        | Scenario::RedriveEvents
        | Scenario::MonitorBeforeRecords
        | Scenario::RetryBeforeRecords
        | Scenario::ReconcilerArrayWindow
        | Scenario::MonitorArrayChild
        | Scenario::MonitorBrakes
        | Scenario::ReconcilerUndescribable => RecoveryGroup::EndsAndCancels,
    }
}

#[tokio::test(start_paused = true)]
async fn a_crash_inside_the_recovery_of_the_importer_or_a_doubled_one_loses_nothing() {
    crash_inside_the_recovery(RecoveryGroup::Importer).await;
}

#[tokio::test(start_paused = true)]
async fn a_crash_inside_the_recovery_of_the_feeder_or_a_doubled_one_loses_nothing() {
    crash_inside_the_recovery(RecoveryGroup::Feeder).await;
}

#[tokio::test(start_paused = true)]
async fn a_crash_inside_the_recovery_of_campaign_switches_or_a_doubled_one_loses_nothing() {
    crash_inside_the_recovery(RecoveryGroup::CampaignSwitches).await;
}

#[tokio::test(start_paused = true)]
async fn a_crash_inside_the_recovery_of_the_ends_and_cancels_or_a_doubled_one_loses_nothing() {
    crash_inside_the_recovery(RecoveryGroup::EndsAndCancels).await;
}

// A crash during the recovery: each first crash point of each handler, then a second crash at
// a spread of the recovery's own calls (the takeover, the redelivery, the next tick dying in
// turn), and the recovery again with every delivery doubled and every tick overlapping.
async fn crash_inside_the_recovery(group: RecoveryGroup) {
    let mut report = Vec::new();
    let mut failures = Vec::new();
    for scenario in ALL.into_iter().filter(|s| recovery_group(*s) == group) {
        let (_, _, calls, _) = run(scenario, None).await;
        let (mut second_crashes, mut doubled) = (0u64, 0u64);
        for at_call in 1..=calls {
            for mode in [CrashMode::Before, CrashMode::After] {
                let first = Some(CrashPoint { at_call, mode });
                let (_, _, _, plain) = run_with(scenario, first, Recovery::default()).await;
                let recovery_calls = match plain {
                    Ok(r) => r.calls,
                    Err(e) => {
                        failures.push(format!("{scenario:?} crash {mode:?} call {at_call}: {e}"));
                        continue;
                    }
                };
                let twice = Recovery {
                    crash: None,
                    twice: true,
                };
                let (w, _, _, settled) = run_with(scenario, first, twice).await;
                let outcome = match settled {
                    Ok(_) => audit(&w).await,
                    Err(e) => vec![e],
                };
                doubled += 1;
                if !outcome.is_empty() {
                    failures.push(format!(
                        "{scenario:?} crash {mode:?} call {at_call}, recovery doubled: {outcome:?}"
                    ));
                }
                for (n, k) in platform::spread::spread(recovery_calls)
                    .into_iter()
                    .enumerate()
                {
                    let second = CrashPoint {
                        at_call: k,
                        mode: [CrashMode::Before, CrashMode::After][n % 2],
                    };
                    let recovery = Recovery {
                        crash: Some(second),
                        twice: false,
                    };
                    let (w, _, _, settled) = run_with(scenario, first, recovery).await;
                    let outcome = match settled {
                        // The recovery is as long as the plain one up to its crash: it is reached.
                        Ok(r) if !r.crashed => vec![format!("recovery call {k} never reached")],
                        Ok(_) => audit(&w).await,
                        Err(e) => vec![e],
                    };
                    second_crashes += 1;
                    if !outcome.is_empty() {
                        failures.push(format!(
                            "{scenario:?} crash {mode:?} call {at_call}, then {:?} recovery call {k}: {outcome:?}",
                            second.mode
                        ));
                    }
                }
            }
        }
        assert!(second_crashes > 0, "{scenario:?}: no second crash");
        report.push(format!(
            "{scenario:?}: {calls} calls, {second_crashes} second crashes, {doubled} doubled recoveries"
        ));
    }
    println!("{}", report.join("\n"));
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test]
async fn a_malformed_import_message_is_recorded_and_dead_lettered_at_once() {
    let w = world(Scenario::ImportStep);
    let report = importer::handle_message(&w.importer_ctx, "{\"item_id\": 42}")
        .await
        .expect("a poison message is handled, not redelivered");
    assert!(report.steps[0].starts_with("rejected: malformed import message"));
    let c = ctx(&w);
    let rejects = c.store.list(&c.config.layout.reject_prefix).await.unwrap();
    assert_eq!(rejects.len(), 1);
    assert!(rejects[0].key.contains("kind=malformed_import_message"));
    assert_eq!(
        w.dlq.messages()[0].attributes["kind"],
        "malformed_import_message"
    );
}
