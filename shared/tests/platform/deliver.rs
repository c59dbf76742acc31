//! The world at work: queues drained, jobs finished and their ends announced.

use super::*;

impl World {
    /// The importer (and its context) as function `f` runs it: `f`'s configuration, its calls
    /// recorded in `f`'s access log.
    /// The world as function `f` sees it: its own configuration, and — like the deployed
    /// function — no job runner or queues unless it reads their sections (the ports refuse).
    pub fn as_fn(&self, f: Function) -> Ctx {
        let mut importer_ctx = self.importer_ctx.clone();
        importer_ctx.config = function_config(f);
        importer_ctx.config.layout = importer_ctx
            .config
            .layout
            .in_campaign(self.campaign().as_ref());
        importer_ctx.config.layout.track_items = self.records;
        importer_ctx.config.feeder.array_windows = self.array;
        if let Some(jobs) = importer_ctx.config.jobs.as_mut() {
            jobs.array_retries = self.array_retries;
        }
        if let Some(brake) = self.brake {
            importer_ctx.config.brake = brake;
        }
        if importer_ctx.config.jobs.is_none() {
            importer_ctx.jobs = Arc::new(granary::adapters::unset::UnsetJobRunner);
        }
        if importer_ctx.config.queues.is_none() {
            importer_ctx.retry_queue = Arc::new(granary::adapters::unset::UnsetQueue {
                var: "GRANARY_RETRY_QUEUE_URL",
            });
            importer_ctx.failure_dlq = Arc::new(granary::adapters::unset::UnsetQueue {
                var: "GRANARY_FAILURE_DLQ_URL",
            });
        }
        if importer_ctx.config.importer.import_queue_url.is_none() {
            importer_ctx.import_queue = None;
        }
        importer_ctx.tapped(self.logs[&f].clone() as Arc<dyn Tap>)
    }
}

impl World {
    /// The campaign the stack runs now.
    pub fn campaign(&self) -> Option<Campaign> {
        self.campaign
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The stack is redeployed with `GRANARY_CAMPAIGN` naming `campaign`.
    pub fn switch_to(&self, campaign: Option<Campaign>) {
        *self.campaign.lock().unwrap_or_else(|p| p.into_inner()) = campaign;
    }

    /// Every campaign whose state the world holds: the one it started in, and the one it runs now.
    pub fn campaigns(&self) -> Vec<Option<Campaign>> {
        let mut all = vec![self.importer_ctx.config.layout.campaign.clone()];
        let now = self.campaign();
        if !all.contains(&now) {
            all.push(now);
        }
        all
    }
}

pub fn ctx(w: &World) -> &Ctx {
    &w.importer_ctx
}

/// Handles every visible message of `queue` with `handle`; deletes the ones handled (as Lambda
/// does with records not reported failed). Returns how many it handled.
pub async fn drain<F, Fut, T, E>(queue: &MemoryQueue, handle: F) -> u64
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let (handled, failed) = drain_counted(queue, handle).await;
    handled + failed
}

/// Like [`drain`], counting the messages handled and those whose handling failed (back on the
/// queue once their visibility timeout passes) apart.
pub async fn drain_counted<F, Fut, T, E>(queue: &MemoryQueue, handle: F) -> (u64, u64)
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let (mut handled, mut failed) = (0, 0);
    loop {
        let got = queue.receive(10, 30, 0).await.unwrap();
        if got.is_empty() {
            return (handled, failed);
        }
        for m in got {
            if handle(m.body.clone()).await.is_ok() {
                queue.delete(&m.receipt_handle).await.unwrap();
                handled += 1;
            } else {
                failed += 1;
            }
        }
    }
}

/// Batch runs every RUNNING job to its end and, unless events are lost, EventBridge delivers the
/// final event to the events queue.
pub async fn finish_jobs(w: &World) -> u64 {
    let mut finished = 0;
    for (request, job) in w.jobs.running() {
        let attempt: u32 = request.parameters["attempt"].parse().unwrap();
        let ending = if w.spot_attempts.contains(&attempt) {
            Ending::SpotReclaimed
        } else if w.failing_attempts.contains(&attempt) {
            Ending::Exited(1)
        } else {
            Ending::Succeeded
        };
        let detail = w.jobs.end(&job.job_id, ending).unwrap();
        announce_end(w, &detail).await;
        finished += 1;
    }
    // Jobs TerminateJob ended since: Batch sends their events as any other end's.
    for detail in w.jobs.take_terminated() {
        announce_end(w, &detail).await;
        finished += 1;
    }
    // An array's parent ends once its children have; its event routes nothing.
    for detail in w.jobs.end_array_parents() {
        announce_end(w, &detail).await;
    }
    finished
}

/// EventBridge delivers a job's state change to the events queue, unless events are lost.
async fn announce_end(w: &World, detail: &serde_json::Value) {
    if !w.lose_events {
        let event = job_state_change(detail);
        w.events
            .send(granary::ports::OutgoingMessage::new(event.to_string()))
            .await
            .unwrap();
    }
}
