//! Each scenario's world made ready: the state its handler meets.

use super::*;

/// Brings the world to the moment just before the invocation under test.
pub async fn prepare(w: &World, scenario: Scenario) {
    let c = ctx(w);
    use Scenario::*;
    match scenario {
        FeederTwoInventories | FeederTwoInventoriesArray => {
            for (n, granules) in TWO_INVENTORIES.iter().enumerate() {
                let rows: Vec<InventoryRow> = granules
                    .iter()
                    .map(|id| InventoryRow {
                        granule_id: (*id).to_owned(),
                        start_datetime: "2022-01-01T15:30:12Z".into(),
                    })
                    .collect();
                let bytes = write_inventory(&rows, &InventoryLayout::granary()).unwrap();
                let key = format!("{}{:04}.parquet", c.config.layout.inventory_prefix, n + 1);
                c.store
                    .put(&key, bytes, PutCondition::Overwrite)
                    .await
                    .unwrap();
            }
        }
        Feeder
        | FeederRecordsOff
        | PoisonRow
        | ReconcilerWindow
        | ReconcilerWindowRecordsLate
        | MonitorBeforeRecords
        | RetryBeforeRecords
        | FeederArray
        | ReconcilerArrayWindow
        | ReconcilerUndescribable
        | MonitorArrayChild
        | CampaignSwitch
        | CampaignSwitchReconciled
        | CampaignSwitchHalfWindow
        | Cancel
        | MonitorCancelled
        | ReconcilerCancelled
        | MonitorBrakes
        | RequeuerParks
        | FeederRetryWindow
        | CampaignSwitchParked => {
            let poison = (scenario == PoisonRow).then_some(POISON_ROW);
            let rows: Vec<InventoryRow> = BACKFILL
                .iter()
                .chain(poison.iter())
                .map(|id| InventoryRow {
                    granule_id: (*id).to_owned(),
                    start_datetime: "2022-01-01T15:30:12Z".into(),
                })
                .collect();
            let bytes = write_inventory(&rows, &InventoryLayout::granary()).unwrap();
            let key = format!("{}0001.parquet", c.config.layout.inventory_prefix);
            c.store
                .put(&key, bytes, PutCondition::Overwrite)
                .await
                .unwrap();
            if scenario == Feeder {
                // One granule was already known: the importer found it, made its record READY
                // and handed it to processing (a retry message for the requeuer). The feeder
                // lists it too and submits nothing for it: it is submitted once, by the requeuer.
                let id = GranuleId::parse(BACKFILL[1]).unwrap();
                c.items()
                    .create(
                        NewItem::ready(id.clone(), "known before the inventory", None),
                        "t",
                    )
                    .await
                    .unwrap();
                let handed = granary::contracts::messages::RetryMessage::ended(id, 0)
                    .of_campaign(c.campaign().cloned())
                    .to_message(&granary::contracts::messages::Notice::new(
                        granary::contracts::messages::Outcome::Ready,
                        "admitted for processing",
                    ))
                    .unwrap();
                c.retry_queue.send(handed).await.unwrap();
            }
            if matches!(
                scenario,
                MonitorArrayChild
                    | ReconcilerWindow
                    | ReconcilerArrayWindow
                    | ReconcilerUndescribable
                    | CampaignSwitch
                    | CampaignSwitchReconciled
                    | Cancel
                    | MonitorCancelled
                    | ReconcilerCancelled
                    | MonitorBrakes
                    | RequeuerParks
                    | FeederRetryWindow
                    | CampaignSwitchParked
            ) {
                let fed = feeder::run(
                    &w.as_fn(Function::Feeder),
                    feeder::FeederEvent {
                        granule_submit_count: 10,
                    },
                )
                .await
                .unwrap();
                assert_eq!(fed.submitted, BACKFILL.len() as u64);
            }
            if scenario == MonitorBrakes {
                assert_eq!(finish_jobs(w).await, BACKFILL.len() as u64);
            }
            if matches!(scenario, MonitorCancelled | ReconcilerCancelled) {
                let s = operator_cancels(&w.importer_ctx, Utc::now(), 1)
                    .await
                    .unwrap();
                assert_eq!(s.terminated, BACKFILL.len() as u64);
                assert_eq!(finish_jobs(w).await, BACKFILL.len() as u64);
            }
            if scenario == MonitorArrayChild {
                assert_eq!(w.jobs.submitted().len(), 1, "the window is one array job");
                assert_eq!(finish_jobs(w).await, BACKFILL.len() as u64);
            }
            if matches!(
                scenario,
                RequeuerParks | FeederRetryWindow | CampaignSwitchParked
            ) {
                // Both children reclaimed, both ends handled: a retry message each.
                assert_eq!(finish_jobs(w).await, BACKFILL.len() as u64);
                let monitor_fn = &w.as_fn(Function::Monitor);
                drain(&w.events, |b| async move {
                    monitor::handle_message(monitor_fn, &b).await
                })
                .await;
                assert_eq!(w.retry.messages().len(), BACKFILL.len());
            }
            if matches!(scenario, FeederRetryWindow | CampaignSwitchParked) {
                let requeuer_fn = &w.as_fn(Function::Requeuer);
                drain(&w.retry, |b| async move {
                    requeuer::handle_message(requeuer_fn, &b).await
                })
                .await;
                let parked =
                    granary::domain::layout::claims::parked_prefix(&c.config.layout.claim_prefix);
                assert_eq!(c.store.list(&parked).await.unwrap().len(), BACKFILL.len());
                assert_eq!(w.jobs.submitted().len(), 1, "parked: nothing submitted yet");
            }
            if scenario == CampaignSwitchReconciled {
                // Every end's event is lost.
                assert_eq!(finish_jobs(w).await, BACKFILL.len() as u64);
            }
            if scenario == ReconcilerUndescribable {
                // Every end's event is lost, and Batch describes the second child with a job
                // name that is a number (no JobDetail).
                assert_eq!(w.jobs.submitted().len(), 1, "the window is one array job");
                let child = w
                    .jobs
                    .running()
                    .into_iter()
                    .map(|(_, job)| job.job_id)
                    .find(|id| id.ends_with(":1"))
                    .unwrap();
                assert_eq!(finish_jobs(w).await, BACKFILL.len() as u64);
                let unreadable =
                    serde_json::json!({"jobId": child, "jobName": 7, "status": "SUCCEEDED"});
                w.jobs.finish(&child, JobStatus::Succeeded, unreadable);
            }
            if scenario == CampaignSwitchHalfWindow {
                // Every SubmitJob refused: the window is claimed and marked open, no job exists.
                let refused = w
                    .as_fn(Function::Feeder)
                    .tapped(Arc::new(RefuseSubmitJob) as Arc<dyn Tap>);
                let _ = feeder::run(
                    &refused,
                    feeder::FeederEvent {
                        granule_submit_count: 10,
                    },
                )
                .await;
                assert!(w.jobs.submitted().is_empty());
            }
            if matches!(
                scenario,
                CampaignSwitch
                    | CampaignSwitchReconciled
                    | CampaignSwitchHalfWindow
                    | CampaignSwitchParked
            ) {
                w.switch_to(Campaign::parse(SECOND_CAMPAIGN).ok());
            }
            if scenario == CampaignSwitchHalfWindow {
                // The run released its claim when Batch refused it (or its lease has run out
                // by the time the reconciler looks); its window is open with no job.
                let_leases_run_out(w).await;
                let open = c
                    .store
                    .list(&c.config.layout.open_claim_prefix)
                    .await
                    .unwrap();
                assert_eq!(open.len(), 1, "{open:?}");
            }
            if matches!(scenario, ReconcilerWindow | ReconcilerArrayWindow) {
                // One job ends now; the other is still running at the reconciler's first pass.
                let (request, job) = w.jobs.running().into_iter().next().unwrap();
                assert_eq!(request.parameters["attempt"], "1");
                w.jobs.end(&job.job_id, Ending::Succeeded).unwrap();
            }
            if matches!(
                scenario,
                ReconcilerWindowRecordsLate | MonitorBeforeRecords | RetryBeforeRecords
            ) {
                let feeder = w
                    .as_fn(Function::Feeder)
                    .tapped(Arc::new(RefuseItemRecords));
                let fed = feeder::run(
                    &feeder,
                    feeder::FeederEvent {
                        granule_submit_count: 10,
                    },
                )
                .await;
                assert!(
                    matches!(fed, Err(granary::handlers::HandlerError::Stalled { .. })),
                    "{fed:?}"
                );
                assert_eq!(w.jobs.submitted().len(), BACKFILL.len());
                finish_jobs(w).await;
            }
        }
        Discover => {}
        PoisonEvent => {
            poison(
                &w.events,
                "{\"detail-type\": \"Batch Job State Change\", \"detail\": 7}",
            )
            .await
        }
        PoisonRetry => poison(&w.retry, "{\"granule_id\": [\"not\", \"an id\"]}").await,
        PoisonImport => poison(&w.import, "{\"item_id\": 42}").await,
        SweeperProcessing | CorruptRecord => {
            // PROCESSING with a job Batch does not know, past its timeout.
            let id = GranuleId::parse("lost-job-item").unwrap();
            c.items()
                .create(NewItem::ready(id.clone(), "t", None), "t")
                .await
                .unwrap();
            let event = GranuleProcessingEvent {
                granule_id: id,
                attempt: 1,
            };
            item_sync::submitted(c, &event, "no-such-job", None, "t")
                .await
                .unwrap();
            if scenario == CorruptRecord {
                let key = format!("{}lost-job-item.json", c.config.layout.item_prefixes.items);
                assert!(c.store.get(&key).await.unwrap().is_some(), "{key}");
                c.store
                    .put(
                        &key,
                        bytes::Bytes::from_static(b"{\"id\": tru"),
                        PutCondition::Overwrite,
                    )
                    .await
                    .unwrap();
            }
        }
        _ => {
            discover::discover(&w.as_fn(Function::Discover))
                .await
                .unwrap();
            if matches!(scenario, ImportStep | DownloadFails) {
                return;
            }
            if scenario == SweeperDownload {
                // A download whose Lambda timed out again and again: its message went to the
                // import queue's dead-letter queue, the item is left DOWNLOADING.
                let id = only_item(w).await;
                for m in w.import.receive(10, 30, 0).await.unwrap() {
                    w.import.delete(&m.receipt_handle).await.unwrap();
                }
                c.items()
                    .advance(&id, "t", |r| {
                        (r.state == ItemState::Discovered)
                            .then(|| Change::to(ItemState::Downloading, "download attempt 1"))
                    })
                    .await
                    .unwrap();
                return;
            }
            let step_fn = w.as_fn(Function::ImportStep);
            let step_fn = &step_fn;
            drain(&w.import, |b| async move {
                importer::handle_message(step_fn, &b).await
            })
            .await;
            if scenario == Requeuer {
                return;
            }
            if scenario == RequeuerExhausted {
                run_to_the_retry_of(w, function_config(Function::Requeuer).max_attempt()).await;
                return;
            }
            if scenario == RequeuerLastChance {
                let max = function_config(Function::Requeuer).max_attempt();
                run_to_the_retry_of(w, max - 1).await;
                return;
            }
            let requeuer_fn = w.as_fn(Function::Requeuer);
            let requeuer_fn = &requeuer_fn;
            if scenario == ReconcilerLostAnswer {
                // SubmitJob is made and its answer lost; the retry message stays in flight
                // (the invocation died), so the reconciler is the first to look for the job.
                let lose = Arc::new(LoseSubmitAnswer) as Arc<dyn Tap>;
                let lossy = requeuer_fn.tapped(lose);
                let m = w.retry.receive(1, 30, 0).await.unwrap();
                assert_eq!(m.len(), 1);
                assert!(requeuer::handle_message(&lossy, &m[0].body).await.is_err());
                finish_jobs(w).await;
                return;
            }
            drain(&w.retry, |b| async move {
                requeuer::handle_message(requeuer_fn, &b).await
            })
            .await;
            finish_jobs(w).await;
            if scenario == SweeperMeetsLoggedSuccess {
                let refused = w
                    .as_fn(Function::Monitor)
                    .tapped(Arc::new(RefuseItemRecords));
                let m = w.events.receive(1, 30, 0).await.unwrap();
                assert_eq!(m.len(), 1);
                assert!(monitor::handle_message(&refused, &m[0].body).await.is_err());
                // It failed the monitor five times: the redrive policy parked it.
                w.events_dlq
                    .send(granary::ports::OutgoingMessage::new(m[0].body.clone()))
                    .await
                    .unwrap();
                w.events.delete(&m[0].receipt_handle).await.unwrap();
                let id = only_item(w).await;
                let record = c.items().get(&id).await.unwrap().unwrap().value;
                assert_eq!(record.state, ItemState::Processing, "{record:?}");
                // Batch keeps an ended job for days, not for ever.
                w.jobs.forget(record.job_id.as_deref().unwrap());
                return;
            }
            if scenario == RequeuerHeldBack {
                // The Spot end is handled (its retry message waits), then the operator cancels:
                // nothing is open to terminate, the hold names the cancel.
                let monitor_fn = &w.as_fn(Function::Monitor);
                drain(&w.events, |b| async move {
                    monitor::handle_message(monitor_fn, &b).await
                })
                .await;
                assert_eq!(w.retry.messages().len(), 1);
                let s = operator_cancels(&w.importer_ctx, Utc::now(), 1)
                    .await
                    .unwrap();
                assert_eq!((s.terminated, s.held), (0, true));
                return;
            }
            if scenario == RedriveEvents {
                // The event failed the monitor five times: the redrive policy parked it.
                for m in w.events.receive(10, 30, 0).await.unwrap() {
                    w.events_dlq
                        .send(granary::ports::OutgoingMessage::new(m.body.clone()))
                        .await
                        .unwrap();
                    w.events.delete(&m.receipt_handle).await.unwrap();
                }
                assert_eq!(w.events_dlq.messages().len(), 1);
                return;
            }
            if matches!(
                scenario,
                MonitorSuccess
                    | MonitorFailure
                    | MonitorRetryable
                    | Reconciler
                    | ReconcilerRetryable
            ) {
                return;
            }
            settle(w).await.unwrap();
            if scenario == Revalidate {
                // The stored file went bad after processing: re-validation fails it.
                let record = c.items().get(&only_item(w).await).await.unwrap().unwrap();
                let key = record.value.stored_key.clone().unwrap();
                c.store
                    .put(
                        &key,
                        bytes::Bytes::from_static(b"damaged"),
                        PutCondition::Overwrite,
                    )
                    .await
                    .unwrap();
                // In the campaign whose item it is, as `granary revalidate` sends it.
                let message = granary::contracts::messages::ImportMessage {
                    item_id: record.value.id.clone(),
                    step: Some(granary::handlers::importer::Step::Revalidate),
                    resume: false,
                    campaign: c.campaign().cloned(),
                };
                w.import.send(message.to_message().unwrap()).await.unwrap();
            }
        }
    }
}
