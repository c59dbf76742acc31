use super::jobs::{index_of, job_id_of, Child, DetailAt, STATUSES};
use super::{InMemoryBatch, RuleToQueue};
use crate::events::{default_retry_strategy, state_change_event, AttemptEnd};
use crate::simulator::JobLedger;
use granary::adapters::memory::MemoryQueue;
use granary::domain::batch_event::BatchJobStateChange;
use granary::domain::batch_event::JobStatus;
use granary::ports::{BusEvent, EventBus, JobRequest, JobRunner};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

fn request(name: &str, granule: &str, attempt: u32) -> JobRequest {
    JobRequest {
        job_name: name.into(),
        environment: BTreeMap::new(),
        parameters: BTreeMap::from([
            ("granule_id".to_owned(), granule.to_owned()),
            ("attempt".to_owned(), attempt.to_string()),
        ]),
        array_size: None,
        queue: None,
        memory_mib: None,
    }
}

#[tokio::test]
async fn list_jobs_shows_a_new_job_only_after_the_listing_lag() {
    let lag = std::time::Duration::from_millis(50);
    let batch = InMemoryBatch::new("q", "d", default_retry_strategy(2)).listing_lag(lag);
    let a = batch.submit(request("g-a1", "G1", 1)).await.unwrap();
    assert_eq!(batch.find_by_name("g-a1").await.unwrap(), None);
    // DescribeJobs, by id, answers at once.
    assert!(batch.describe(&a.job_id).await.unwrap().is_some());
    tokio::time::sleep(lag * 2).await;
    assert_eq!(
        batch.find_by_name("g-a1").await.unwrap().map(|j| j.job_id),
        Some(a.job_id)
    );
}

#[tokio::test]
async fn submitted_jobs_are_found_by_id_and_name_and_described_for_the_simulator() {
    let batch = InMemoryBatch::new("q", "d", default_retry_strategy(2));
    let a = batch.submit(request("g-a1", "G1", 1)).await.unwrap();
    let b = batch.submit(request("g-a2", "G1", 2)).await.unwrap();
    assert_ne!(a.job_id, b.job_id);
    // Before the simulator settles it, DescribeJobs shows it queued with its parameters.
    let described = batch.describe(&b.job_id).await.unwrap().unwrap();
    assert_eq!(described.summary.job_id, b.job_id);
    assert_eq!(described.summary.status, JobStatus::Runnable);
    assert_eq!(described.detail["parameters"]["granule_id"], "G1");
    // The simulator asks for the facts of jobs it has not settled yet.
    let facts = batch
        .facts(&[b.job_id.clone(), "unknown".into()])
        .await
        .unwrap();
    assert_eq!(facts.len(), 1);
    assert_eq!((facts[0].granule_id.as_str(), facts[0].attempt), ("G1", 2));
    assert_eq!(facts[0].job_queue_arn, batch.job_queue_arn());
    let detail = serde_json::json!({"jobId": b.job_id, "status": "FAILED"});
    batch
        .settle(&b.job_id, JobStatus::Failed, &detail)
        .await
        .unwrap();
    let described = batch.describe(&b.job_id).await.unwrap().unwrap();
    assert_eq!(
        (described.summary.status, described.detail),
        (JobStatus::Failed, detail)
    );
    assert_eq!(batch.find_by_name("g-a1").await.unwrap(), Some(a.clone()));
    assert_eq!(batch.find_by_name("nope").await.unwrap(), None);
    // Finished at submission, as on the emulator: nothing counts as active.
    assert_eq!(batch.count_active(10).await.unwrap().total, 0);
    assert_eq!(
        batch.finished().await.unwrap(),
        vec![a.job_id.clone(), b.job_id.clone()]
    );
    assert!(
        batch
            .facts(std::slice::from_ref(&b.job_id))
            .await
            .unwrap()
            .is_empty(),
        "a settled job was seen: its request is no longer kept"
    );
}

#[tokio::test]
async fn an_array_childs_status_and_detail_come_back_as_settled_held_or_spilled() {
    for batch in [
        InMemoryBatch::new("q", "d", default_retry_strategy(2)),
        InMemoryBatch::new("q", "d", default_retry_strategy(2))
            .spilling(tempfile::tempfile().unwrap()),
    ] {
        let mut array = request("w-1", "G1", 1);
        array.array_size = Some(3);
        let parent = batch.submit(array).await.unwrap().job_id;
        let mut details = Vec::new();
        for (i, status) in [(2, JobStatus::Failed), (0, JobStatus::Succeeded)] {
            let id = format!("{parent}:{i}");
            let detail = serde_json::json!({"jobId": id, "status": status.as_str()});
            batch.settle(&id, status, &detail).await.unwrap();
            details.push((id, status, detail));
        }
        for (id, status, detail) in details {
            let described = batch.describe(&id).await.unwrap().unwrap();
            assert_eq!(described.summary.job_id, id);
            assert_eq!(
                (described.summary.status, described.detail),
                (status, detail)
            );
        }
        // Not settled yet: queued, described from the array's request.
        let queued = batch
            .describe(&format!("{parent}:1"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(queued.summary.status, JobStatus::Runnable);
        assert!(batch
            .describe(&format!("{parent}:3"))
            .await
            .unwrap()
            .is_none());
    }
}

#[test]
fn a_child_keeps_every_status_beside_any_place_below_two_to_the_56() {
    for status in STATUSES {
        for place in [0, 1, 41, Child::UNSETTLED - 1] {
            let child = Child::new(status, DetailAt(place)).unwrap();
            assert_eq!(
                (child.status(), child.settled()),
                (status, Some(DetailAt(place)))
            );
        }
        let queued = Child::queued(status);
        assert_eq!((queued.status(), queued.settled()), (status, None));
    }
    assert!(Child::new(JobStatus::Failed, DetailAt(Child::UNSETTLED)).is_err());
    assert_eq!(std::mem::size_of::<Child>(), 8);
}

#[test]
fn a_job_id_names_its_place_and_foreign_ids_name_none() {
    for i in [0, 1, 41, 999_999] {
        assert_eq!(index_of(&job_id_of(i)), Some(i));
    }
    for foreign in [
        "",
        "nope",
        "00000001-0000-4000-8000-00000000000g",
        "0-1",
        "x-1",
    ] {
        assert_eq!(index_of(foreign), None, "{foreign}");
    }
}

#[tokio::test]
async fn a_job_without_granary_parameters_is_not_described() {
    let batch = InMemoryBatch::new("q", "d", default_retry_strategy(2));
    let mut r = request("other", "G", 1);
    r.parameters.clear();
    let job = batch.submit(r).await.unwrap();
    assert!(batch.facts(&[job.job_id]).await.unwrap().is_empty());
}

#[tokio::test]
async fn the_rule_delivers_terminal_events_of_its_queue_as_envelopes() {
    let batch = InMemoryBatch::new("q", "d", default_retry_strategy(2));
    let job = batch.submit(request("g-a1", "G1", 1)).await.unwrap();
    let facts = batch.facts(&[job.job_id]).await.unwrap().remove(0);
    let queue = Arc::new(MemoryQueue::new("events"));
    let rule = RuleToQueue::new(queue.clone(), batch.job_queue_arn());
    let event = |status: &str, queue_arn: &str| {
        let mut v = state_change_event(&facts, &[AttemptEnd::Success], status);
        v["detail"]["jobQueue"] = serde_json::json!(queue_arn);
        BusEvent {
            source: "aws.batch".into(),
            detail_type: "Batch Job State Change".into(),
            resources: vec![],
            detail: v["detail"].clone(),
        }
    };
    let arn = batch.job_queue_arn().to_owned();
    rule.put_events(vec![
        event("SUCCEEDED", &arn),
        event("RUNNABLE", &arn),
        event(
            "SUCCEEDED",
            "arn:aws:batch:us-east-1:000000000000:job-queue/other",
        ),
    ])
    .await
    .unwrap();
    let bodies = queue.bodies();
    assert_eq!(bodies.len(), 1, "only the terminal event of this queue");
    let parsed: Value = serde_json::from_str(&bodies[0]).unwrap();
    let e = BatchJobStateChange::from_value(&parsed).unwrap();
    assert_eq!(e.detail_type, "Batch Job State Change");
}

/// A simulator over the in-memory Batch (`attempts` a job) whose events are neither
/// duplicated, delayed nor lost, its events queue, and the Batch it watches submissions to.
fn plain_simulator(
    attempts: u32,
) -> (
    Arc<InMemoryBatch>,
    Arc<MemoryQueue>,
    crate::simulator::BatchSimulator,
    Arc<dyn JobRunner>,
) {
    let batch = Arc::new(InMemoryBatch::new(
        "q",
        "d",
        default_retry_strategy(attempts),
    ));
    let events = Arc::new(MemoryQueue::new("events"));
    let rule = Arc::new(RuleToQueue::new(events.clone(), batch.job_queue_arn()));
    let plan = crate::fault_plan::FaultPlan {
        duplicate_rate: 0.0,
        delay_rate: 0.0,
        lost_rate: 0.0,
        ..crate::fault_plan::FaultPlan::default()
    };
    let sim = crate::simulator::BatchSimulator::new(batch.clone(), rule, plan);
    let tapped = sim.watch(batch.clone());
    (batch, events, sim, tapped)
}

#[tokio::test]
async fn the_simulator_holds_events_the_events_queue_has_no_room_for() {
    let (_, events, mut sim, tapped) = plain_simulator(1);
    for i in 0..5 {
        let name = format!("g-{i}");
        tapped
            .submit(request(&name, &format!("G{i}"), 1))
            .await
            .unwrap();
    }
    sim.room = Some(0);
    assert_eq!(sim.tick().await.unwrap(), 5);
    assert_eq!(events.bodies().len(), 0, "no room: nothing put");
    assert!(sim.pending() > 0);
    sim.room = Some(2);
    sim.tick().await.unwrap();
    assert_eq!(events.bodies().len(), 2);
    sim.room = None;
    sim.tick().await.unwrap();
    assert_eq!(
        (events.bodies().len(), sim.pending()),
        (5, 0),
        "every end, once"
    );
}

#[tokio::test]
async fn the_simulator_learns_jobs_from_submissions_and_sweeps_up_the_rest() {
    let (batch, events, mut sim, tapped) = plain_simulator(2);
    tapped.submit(request("g-a1", "G1", 1)).await.unwrap();
    // Submitted around the tap: only a full listing finds it.
    batch.submit(request("g-b1", "G2", 1)).await.unwrap();
    assert_eq!(sim.tick().await.unwrap(), 1);
    assert_eq!(sim.sweep().await.unwrap(), 1);
    assert_eq!(sim.tick().await.unwrap(), 1);
    assert_eq!(sim.sweep().await.unwrap(), 0, "nothing left unseen");
    assert_eq!(sim.tick().await.unwrap(), 0, "a job is finished once");
    assert_eq!((sim.stats.jobs, sim.stats.swept), (2, 1));
    let granules: Vec<String> = events
        .bodies()
        .iter()
        .map(|b| {
            let e = BatchJobStateChange::from_value(&serde_json::from_str(b).unwrap()).unwrap();
            e.detail.parameters["granule_id"].clone()
        })
        .collect();
    assert!(granules.contains(&"G1".to_owned()) && granules.contains(&"G2".to_owned()));
}
