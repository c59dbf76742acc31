use super::*;
use crate::adapters::memory::MemoryStore;
use crate::domain::ingest::manifest::{single_file, ManifestKind};
use crate::domain::ingest::record::Submission;
use crate::domain::machine::Record;
use crate::domain::machine::Refused;
use chrono::Utc;

fn repo() -> (Arc<MemoryStore>, Ingest) {
    let store = Arc::new(MemoryStore::new());
    (store.clone(), Ingest::new(store, "ingest/"))
}

fn batch() -> BatchRecord {
    BatchRecord::new(
        BatchId::parse("b1").unwrap(),
        Submission {
            collection: "c".into(),
            manifest_url: "http://h/m".into(),
            kind: ManifestKind::Files,
            priority: 5,
            callback: None,
            profile: None,
            submitter: "me".into(),
            deposit: Default::default(),
        },
        Utc::now(),
    )
}

fn job(b: &BatchRecord, n: usize) -> JobRecord {
    JobRecord::new(b.id.job(n), b, single_file("http://h/a", None), Utc::now())
}

fn to(state: JobState) -> impl Fn(&JobRecord) -> Result<Option<JobRecord>, Refused> {
    move |r| {
        r.moved(state, "test", Utc::now())
            .map(Some)
            .map_err(Refused::of)
    }
}

#[tokio::test]
async fn batches_are_listed_by_state_and_a_marker_left_by_a_crash_is_repaired() {
    let (store, ingest) = repo();
    let b = ingest.create_batch(&batch()).await.unwrap();
    let ids = |v: Vec<BatchRecord>| v.into_iter().map(|b| b.id).collect::<Vec<_>>();
    assert_eq!(
        ids(ingest.batches_in(BatchState::Pending).await.unwrap()),
        vec![b.id.clone()]
    );
    let moved = |to: BatchState| {
        move |r: &BatchRecord| r.moved(to, "t", Utc::now()).map(Some).map_err(Refused::of)
    };
    ingest
        .change_batch(&b.id, moved(BatchState::Processing))
        .await
        .unwrap();
    assert!(ingest
        .batches_in(BatchState::Pending)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        ids(ingest.batches_in(BatchState::Processing).await.unwrap()),
        vec![b.id.clone()]
    );
    // A crash after the record, before its markers: the old marker is still listed; the
    // lister repairs it and the batch is found in its state.
    let processing = ingest.batch(&b.id).await.unwrap().unwrap();
    let reporting = processing
        .value
        .moved(BatchState::Reporting, "t", Utc::now())
        .unwrap();
    write_json(
        store.as_ref(),
        &ingest.keys.batch(&b.id),
        &reporting,
        processing.condition(),
    )
    .await
    .unwrap();
    assert!(ingest
        .batches_in(BatchState::Processing)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        ids(ingest.batches_in(BatchState::Reporting).await.unwrap()),
        vec![b.id.clone()]
    );
    assert!(store
        .list(&ingest.keys.batch_states(BatchState::Processing))
        .await
        .unwrap()
        .is_empty());
    // A marker whose record never came (a submission that died between the two) is skipped.
    let mut orphan = batch();
    orphan.id = BatchId::parse("b2").unwrap();
    store
        .put(
            &ingest.keys.batch_state(BatchState::Pending, &orphan.id),
            Bytes::new(),
            PutCondition::Overwrite,
        )
        .await
        .unwrap();
    assert!(ingest
        .batches_in(BatchState::Pending)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn jobs_are_listed_in_their_state_by_priority_and_in_their_batch_group() {
    let (_, ingest) = repo();
    let b = ingest.create_batch(&batch()).await.unwrap();
    let mut urgent = job(&b, 2);
    urgent.priority = 1;
    ingest.create_job(&job(&b, 1)).await.unwrap();
    ingest.create_job(&urgent).await.unwrap();
    let listed = ingest.listed(JobState::Pending).await.unwrap();
    assert_eq!(listed, vec![(1, b.id.job(2)), (5, b.id.job(1))]);
    ingest
        .change_job(&b.id.job(1), to(JobState::Estimating))
        .await
        .unwrap();
    assert_eq!(ingest.listed(JobState::Pending).await.unwrap().len(), 1);
    assert_eq!(ingest.listed(JobState::Estimating).await.unwrap().len(), 1);
    assert_eq!(
        ingest
            .batch_jobs(&b.id, BatchGroup::Processing)
            .await
            .unwrap()
            .len(),
        2
    );
    ingest
        .change_job(&b.id.job(2), to(JobState::Failed))
        .await
        .unwrap();
    assert_eq!(
        ingest.batch_jobs(&b.id, BatchGroup::Failed).await.unwrap(),
        vec![b.id.job(2)]
    );
    assert_eq!(
        ingest
            .batch_jobs(&b.id, BatchGroup::Processing)
            .await
            .unwrap(),
        vec![b.id.job(1)]
    );
    // An illegal change is refused and changes nothing.
    let refused = ingest
        .change_job(&b.id.job(1), to(JobState::Completed))
        .await;
    assert!(matches!(refused, Err(RecordError::Illegal(_))));
    assert_eq!(ingest.listed(JobState::Estimating).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_crash_between_the_record_and_the_indexes_is_repaired_by_the_next_lister() {
    let (store, ingest) = repo();
    let b = ingest.create_batch(&batch()).await.unwrap();
    let created = ingest.create_job(&job(&b, 1)).await.unwrap();
    // The record moves on; the process dies before touching the indexes.
    let moved = created
        .moved(JobState::Estimating, "t", Utc::now())
        .unwrap();
    let key = ingest.keys.job(&moved.id);
    let body = crate::contracts::encode("job", &moved).unwrap();
    store
        .put(&key, body, PutCondition::Overwrite)
        .await
        .unwrap();
    assert!(ingest
        .listed(JobState::Estimating)
        .await
        .unwrap()
        .is_empty());
    // The pending handler lists the stale marker, and repairs instead of taking the job.
    let (p, id) = ingest.listed(JobState::Pending).await.unwrap().remove(0);
    assert_eq!(
        ingest
            .claim_listed(JobState::Pending, p, &id)
            .await
            .unwrap(),
        None
    );
    assert!(ingest.listed(JobState::Pending).await.unwrap().is_empty());
    assert_eq!(
        ingest.listed(JobState::Estimating).await.unwrap(),
        vec![(5, id.clone())]
    );
    let found = ingest
        .claim_listed(JobState::Estimating, 5, &id)
        .await
        .unwrap();
    assert_eq!(found.map(|r| r.state), Some(JobState::Estimating));
}

#[tokio::test]
async fn a_crash_while_creating_a_job_is_repaired_by_creating_it_again() {
    let (store, ingest) = repo();
    let b = ingest.create_batch(&batch()).await.unwrap();
    let j = job(&b, 1);
    let body = crate::contracts::encode("job", &j).unwrap();
    store
        .put(&ingest.keys.job(&j.id), body, PutCondition::IfAbsent)
        .await
        .unwrap();
    assert!(ingest.listed(JobState::Pending).await.unwrap().is_empty());
    ingest.create_job(&j).await.unwrap();
    assert_eq!(ingest.listed(JobState::Pending).await.unwrap().len(), 1);
    assert_eq!(
        ingest
            .batch_jobs(&b.id, BatchGroup::Processing)
            .await
            .unwrap(),
        vec![j.id.clone()]
    );
    ingest.remove_job(&j).await.unwrap();
    assert!(ingest.job(&j.id).await.unwrap().is_none());
    assert!(ingest.listed(JobState::Pending).await.unwrap().is_empty());
}
