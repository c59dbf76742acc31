//! What each scenario does once its world is prepared, and the runs that drive it; the taps that refuse or lose calls.

use super::*;

/// Runs the invocation under test with its external calls passing through `faults`, and does what
/// the platform does with its answer (deletes the message it handled, if it lived).
pub async fn act(w: &World, scenario: Scenario, faults: &Arc<Faults>) {
    use Scenario::*;
    let function = match scenario {
        Feeder
        | FeederTwoInventories
        | FeederTwoInventoriesArray
        | FeederRecordsOff
        | PoisonRow
        | FeederArray
        | CampaignSwitch
        | FeederRetryWindow
        | CampaignSwitchParked => Some(Function::Feeder),
        Discover => Some(Function::Discover),
        ImportStep | Revalidate | PoisonImport | DownloadFails => Some(Function::ImportStep),
        Requeuer | PoisonRetry | RequeuerExhausted | RequeuerLastChance | RequeuerHeldBack
        | RequeuerParks => Some(Function::Requeuer),
        MonitorSuccess | MonitorFailure | MonitorRetryable | PoisonEvent | MonitorBeforeRecords
        | RetryBeforeRecords | MonitorArrayChild | MonitorCancelled | MonitorBrakes => {
            Some(Function::Monitor)
        }
        Reconciler
        | ReconcilerRetryable
        | ReconcilerLostAnswer
        | ReconcilerWindow
        | ReconcilerWindowRecordsLate
        | ReconcilerArrayWindow
        | ReconcilerUndescribable
        | CampaignSwitchReconciled
        | CampaignSwitchHalfWindow
        | ReconcilerCancelled
        | SweeperProcessing
        | SweeperDownload
        | SweeperMeetsLoggedSuccess
        | CorruptRecord => Some(Function::Sweeper),
        // Operator commands: run with the operator's credentials, not a function's role.
        Resume | Redrive | RedriveEvents | Cancel => None,
    };
    let importer_ctx = match function {
        Some(f) => w.as_fn(f).with_faults(faults),
        None => w.importer_ctx.with_faults(faults),
    };
    let c = &importer_ctx;
    let later = Utc::now() + chrono::Duration::days(1);
    let take = |q: Arc<MemoryQueue>| async move {
        let got = q.receive(1, 30, 0).await.unwrap();
        assert_eq!(
            got.len(),
            1,
            "{scenario:?}: the scenario's message is not there"
        );
        got.into_iter().next().unwrap()
    };
    let (queue, message) = match scenario {
        Feeder
        | FeederTwoInventories
        | FeederTwoInventoriesArray
        | FeederRecordsOff
        | PoisonRow
        | FeederArray
        | CampaignSwitch
        | FeederRetryWindow
        | CampaignSwitchParked => {
            // Three rows: the first inventory's two, then one of the second (a second window,
            // its file opened and the rest of it mapped for the next run).
            let count = if matches!(scenario, FeederTwoInventories | FeederTwoInventoriesArray) {
                3
            } else {
                10
            };
            let _ = feeder::run(
                c,
                feeder::FeederEvent {
                    granule_submit_count: count,
                },
            )
            .await;
            return;
        }
        RedriveEvents => {
            let opts = RedriveOptions {
                per_second: 10_000.0,
                visibility_secs: 30,
                ..RedriveOptions::default()
            };
            let events_dlq = granary::adapters::tap::TappedQueue {
                inner: w.events_dlq.clone(),
                tap: faults.clone(),
            };
            let events = granary::adapters::tap::TappedQueue {
                inner: w.events.clone(),
                tap: faults.clone(),
            };
            let run = redrive::redrive_events(&events_dlq, &events, &opts, &|_| {}).await;
            if run.is_err() || faults.crashed() {
                // An operator reruns a command that died.
                w.events_dlq.expire_visibility();
                redrive::redrive_events(w.events_dlq.as_ref(), w.events.as_ref(), &opts, &|_| {})
                    .await
                    .unwrap();
            }
            return;
        }
        Reconciler
        | ReconcilerRetryable
        | ReconcilerLostAnswer
        | ReconcilerWindow
        | ReconcilerWindowRecordsLate
        | ReconcilerArrayWindow
        | ReconcilerUndescribable
        | CampaignSwitchReconciled
        | CampaignSwitchHalfWindow
        | ReconcilerCancelled => {
            // The pass runs a day later: ListJobs shows every job by then.
            w.jobs.catch_up_listing();
            let _ = reconciler::reconcile(c, later).await;
            return;
        }
        Discover => {
            let _ = discover::discover(&importer_ctx).await;
            return;
        }
        SweeperProcessing | SweeperDownload | SweeperMeetsLoggedSuccess | CorruptRecord => {
            let _ = sweeper::sweep(&importer_ctx, later).await;
            return;
        }
        Cancel => {
            let now = Utc::now();
            let run = operator_cancels(&importer_ctx, now, 1).await;
            if run.is_err() || faults.crashed() {
                // An operator reruns a command that died (a second cancel, its own id).
                operator_cancels(&w.importer_ctx, now, 2).await.unwrap();
            }
            return;
        }
        Resume => {
            let id = only_item(w).await;
            if resume::resume(&importer_ctx, std::slice::from_ref(&id), false)
                .await
                .is_err()
                || faults.crashed()
            {
                // An operator reruns a command that died.
                resume::resume(&w.importer_ctx, &[id], false).await.unwrap();
            }
            return;
        }
        Redrive => {
            let opts = RedriveOptions {
                per_second: 10_000.0,
                visibility_secs: 30,
                ..RedriveOptions::default()
            };
            let run = redrive::redrive(
                c.failure_dlq.as_ref(),
                c.retry_queue.as_ref(),
                &RedriveFilter::default(),
                &opts,
                &|_| {},
            )
            .await;
            if run.is_err() || faults.crashed() {
                w.dlq.expire_visibility();
                redrive::redrive(
                    w.dlq.as_ref(),
                    w.retry.as_ref(),
                    &RedriveFilter::default(),
                    &opts,
                    &|_| {},
                )
                .await
                .unwrap();
            }
            return;
        }
        ImportStep | Revalidate | PoisonImport | DownloadFails => {
            (w.import.clone(), take(w.import.clone()).await)
        }
        Requeuer | PoisonRetry | RequeuerExhausted | RequeuerLastChance | RequeuerHeldBack
        | RequeuerParks => (w.retry.clone(), take(w.retry.clone()).await),
        MonitorSuccess | MonitorFailure | MonitorRetryable | PoisonEvent | MonitorBeforeRecords
        | RetryBeforeRecords | MonitorArrayChild | MonitorCancelled | MonitorBrakes => {
            (w.events.clone(), take(w.events.clone()).await)
        }
    };
    let ok = match scenario {
        ImportStep | Revalidate | PoisonImport | DownloadFails => {
            importer::handle_message(&importer_ctx, &message.body)
                .await
                .is_ok()
        }
        Requeuer | PoisonRetry | RequeuerExhausted | RequeuerLastChance | RequeuerHeldBack
        | RequeuerParks => requeuer::handle_message(c, &message.body).await.is_ok(),
        _ => monitor::handle_message(c, &message.body).await.is_ok(),
    };
    if ok && !faults.crashed() {
        queue.delete(&message.receipt_handle).await.unwrap();
    }
}

/// One run of a scenario: the world prepared, the invocation under test made with `crash` (or
/// none), then the platform left to settle. Returns the world, whether the invocation crashed,
/// how many external calls it made, and how settling went.
pub async fn run(
    scenario: Scenario,
    crash: Option<CrashPoint>,
) -> (World, bool, u64, Result<(), String>) {
    let (w, crashed, calls, settled) = run_with(scenario, crash, Recovery::default()).await;
    (w, crashed, calls, settled.map(|_| ()))
}

/// [`run`], with the recovery crashed or doubled as `recovery` says.
pub async fn run_with(
    scenario: Scenario,
    crash: Option<CrashPoint>,
    recovery: Recovery,
) -> (World, bool, u64, Result<Recovered, String>) {
    run_world(world(scenario), scenario, crash, recovery).await
}

/// [`run`] with the stack running `campaign` from the start.
pub async fn run_in(
    scenario: Scenario,
    campaign: Option<Campaign>,
    crash: Option<CrashPoint>,
) -> (World, bool, u64, Result<(), String>) {
    let w = world_in(scenario, campaign);
    let (w, crashed, calls, settled) = run_world(w, scenario, crash, Recovery::default()).await;
    (w, crashed, calls, settled.map(|_| ()))
}

async fn run_world(
    w: World,
    scenario: Scenario,
    crash: Option<CrashPoint>,
    recovery: Recovery,
) -> (World, bool, u64, Result<Recovered, String>) {
    // Each phase boxed: a test's runtime polls its future on the test thread's stack (2 MiB),
    // and these debug-build futures, nested by value, would not fit there.
    Box::pin(prepare(&w, scenario)).await;
    let faults = Faults::new(crash, 0.0, 0, Arc::new(FaultCounts::default()));
    Box::pin(act(&w, scenario, &faults)).await;
    let settled = Box::pin(settle_with(&w, recovery)).await;
    (w, faults.crashed(), faults.calls(), settled)
}

pub(super) async fn poison(queue: &MemoryQueue, body: &str) {
    queue
        .send(granary::ports::OutgoingMessage::new(body))
        .await
        .unwrap();
}

/// Refuses every write of an item record or its history (as S3 would past the SDK's retries).
pub(super) struct RefuseItemRecords;

impl Tap for RefuseItemRecords {
    fn enter(&self, call: &Call<'_>) -> Result<Fate, Refusal> {
        // In any campaign's state (a named one's keys are under campaigns/<name>/).
        let record = ["items/", "history/"]
            .iter()
            .any(|p| call.target.starts_with(p) || call.target.contains(&format!("/{p}")));
        if call.op == Op::StorePut && record {
            Err(Refusal {
                message: "refused: slow down",
                ambiguous: false,
            })
        } else {
            Ok(Fate::Make)
        }
    }
}

/// Refuses every SubmitJob (as Batch would past the SDK's retries), unambiguously.
pub(super) struct RefuseSubmitJob;

impl Tap for RefuseSubmitJob {
    fn enter(&self, call: &Call<'_>) -> Result<Fate, Refusal> {
        if call.op == Op::JobSubmit {
            Err(Refusal {
                message: "refused: too many requests",
                ambiguous: false,
            })
        } else {
            Ok(Fate::Make)
        }
    }
}

/// Lets SubmitJob happen and loses its answer (the invocation died waiting for it).
pub(super) struct LoseSubmitAnswer;

impl Tap for LoseSubmitAnswer {
    fn enter(&self, call: &Call<'_>) -> Result<Fate, Refusal> {
        Ok(if call.op == Op::JobSubmit {
            Fate::MakeAndLoseAnswer
        } else {
            Fate::Make
        })
    }
}
