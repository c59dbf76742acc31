use super::*;
use crate::adapters::memory::MemoryJobRunner;
use crate::config::Config;
use crate::domain::batch_event::JobStatus;
use crate::domain::claim::{Claim, JobsClaim};
use crate::domain::granule::GranuleId;
use crate::domain::layout::claims::claim_key;
use std::sync::Arc;

fn ctx(jobs: Arc<MemoryJobRunner>) -> Ctx {
    let config = Config::for_unit_tests(&[("GRANARY_RECONCILE_AFTER_SECS", "60")]);
    Ctx {
        jobs,
        ..Ctx::in_memory(config)
    }
}

fn attempt(id: &str) -> GranuleProcessingEvent {
    GranuleProcessingEvent {
        granule_id: GranuleId::parse(id).unwrap(),
        attempt: 1,
    }
}

fn failed_detail(job_id: &str, granule: &str, exit_code: i64) -> serde_json::Value {
    serde_json::json!({
        "jobId": job_id, "jobName": format!("{granule}-1"), "jobQueue": "q",
        "status": "FAILED", "statusReason": "Essential container in task exited",
        "attempts": [{"container": {"exitCode": exit_code}}],
        "parameters": {"granule_id": granule, "attempt": "1"},
    })
}

#[tokio::test]
async fn a_finished_job_whose_event_was_lost_is_logged_and_routed_once() {
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
    let ctx = ctx(jobs.clone());
    let lost = attempt("HLS.L30.T18TYN.2020001T153012.v2.0");
    let running = attempt("HLS.S30.T18TYN.2020002T153012.v2.0");
    let mut ids = Vec::new();
    for a in [&lost, &running] {
        match ctx.submit_once(a, "t").await.unwrap() {
            crate::repositories::SubmitOutcome::Submitted { job_id } => ids.push(job_id),
            other => panic!("{other:?}"),
        }
    }
    jobs.finish(
        &ids[0],
        JobStatus::Failed,
        failed_detail(&ids[0], lost.granule_id.as_str(), 2),
    );

    // Young markers are left alone: their events are on the way.
    let s = reconcile(&ctx, Utc::now()).await.unwrap();
    assert_eq!((s.open_claims, s.young, s.recovered), (2, 2, 0));

    let later = Utc::now() + chrono::Duration::seconds(61);
    let s = reconcile(&ctx, later).await.unwrap();
    assert_eq!((s.recovered, s.still_running, s.errors), (1, 1, 0), "{s:?}");
    let dlq = ctx.failure_dlq.receive(10, 30, 0).await.unwrap();
    assert_eq!(dlq.len(), 1);
    assert_eq!(
        dlq[0].attributes["reason"],
        "application exited with code 2"
    );
    let logs = ctx.store.list(&ctx.config.layout.log_prefix).await.unwrap();
    assert_eq!(logs.len(), 1);

    // The lost attempt left the index; a second pass, or its event turning up, does nothing.
    let s = reconcile(&ctx, later).await.unwrap();
    assert_eq!((s.open_claims, s.recovered), (1, 0));
    // Nothing new: only the dead letter received above, in flight.
    assert_eq!(
        ctx.failure_dlq.depth().await.unwrap(),
        crate::ports::QueueDepth {
            visible: 0,
            in_flight: 1
        }
    );
}

/// A window with its jobs recorded and one ended, written as the feeder's run leaves it
/// before its item records: (claim, open marker key, granule, job id).
async fn window_before_its_records(
    ctx: &Ctx,
    jobs: &MemoryJobRunner,
) -> (
    crate::domain::window::WindowClaim,
    String,
    GranuleId,
    String,
) {
    use crate::domain::layout::claims::window_key;
    use crate::domain::window::WindowClaim;
    use crate::ports::JobRunner;
    let id = GranuleId::parse("HLS.S30.T18TYN.2020002T153012.v2.0").unwrap();
    let job = jobs
        .submit(crate::contracts::job::job_request(
            &crate::domain::job_name::job_name(None, &id, 1),
            None,
            &id,
            1,
        ))
        .await
        .unwrap()
        .job_id;
    let claim = WindowClaim::new(
        None,
        "inventories/a.parquet",
        0,
        1,
        vec![id.clone()],
        "t",
        Utc::now(),
    )
    .recording(&[Some(job.clone())], Utc::now());
    let layout = &ctx.config.layout;
    crate::repositories::write_json(
        ctx.store.as_ref(),
        &window_key(&layout.claim_prefix, &claim.inventory, 0),
        &claim,
        crate::ports::PutCondition::IfAbsent,
    )
    .await
    .unwrap();
    let open_key = window_key(&layout.open_claim_prefix, &claim.inventory, 0);
    ctx.store
        .put(
            &open_key,
            bytes::Bytes::new(),
            crate::ports::PutCondition::Overwrite,
        )
        .await
        .unwrap();
    jobs.set_status(&job, JobStatus::Succeeded);
    (claim, open_key, id, job)
}

/// The feeder's run for the window: its record, made at PROCESSING unless one exists.
async fn feeder_makes_the_record(ctx: &Ctx, claim: &crate::domain::window::WindowClaim, job: &str) {
    let submitted = vec![(
        claim.attempts().next().unwrap(),
        job.to_owned(),
        "inventories/a.parquet#row=0".to_owned(),
    )];
    let made =
        crate::handlers::item_sync::window_submitted(ctx, claim, &submitted, false, "queue-feeder")
            .await
            .unwrap();
    if !made[0] {
        crate::handlers::item_sync::submitted(
            ctx,
            &submitted[0].0,
            job,
            Some(submitted[0].2.clone()),
            "queue-feeder",
        )
        .await
        .unwrap();
    }
}

/// A window whose job ended before the feeder made its item record (a window's records
/// follow its jobs): the end makes the record at its end state and closes the window, and
/// the feeder's late creation finds the record and changes nothing — a record made after
/// the window closed would sit in PROCESSING with nothing left to find it.
#[tokio::test]
async fn an_end_found_before_its_record_makes_the_record_and_the_late_creation_changes_nothing() {
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
    let ctx = ctx(jobs.clone());
    let (claim, open_key, id, job) = window_before_its_records(&ctx, &jobs).await;
    let later = Utc::now() + chrono::Duration::seconds(61);
    let s = reconcile(&ctx, later).await.unwrap();
    assert_eq!((s.recovered, s.closed), (1, 1), "{s:?}");
    assert!(ctx.store.get(&open_key).await.unwrap().is_none());
    let made = ctx.items().get(&id).await.unwrap().unwrap().value;
    assert_eq!(made.state, crate::domain::lifecycle::ItemState::Processed);
    assert_eq!(made.job_id.as_deref(), Some(job.as_str()));

    feeder_makes_the_record(&ctx, &claim, &job).await;
    let after = ctx.items().get(&id).await.unwrap().unwrap().value;
    assert_eq!((after.state, after.seq), (made.state, made.seq));
    let history = ctx.items().history(&id).await.unwrap();
    let states: Vec<_> = history.iter().map(|e| e.record.state).collect();
    use crate::domain::lifecycle::ItemState::*;
    assert_eq!(states, vec![Ready, Processing, Processed], "{history:?}");
}

/// The monitor's first handling of the window's end: logged, then dead before the record
/// (played by a handler that keeps no records), its event parked; the window's marker stays.
async fn logged_and_died_before_the_record(ctx: &Ctx, open_key: &str, now: DateTime<Utc>) {
    let mut dying = ctx.clone();
    dying.config.layout.track_items = false;
    reconcile(&dying, now).await.unwrap();
    ctx.store
        .put(
            open_key,
            bytes::Bytes::new(),
            crate::ports::PutCondition::Overwrite,
        )
        .await
        .unwrap();
}

/// A logged end whose record never followed is not "handled": the pass hands it on again,
/// which makes the record, and only then closes the window.
#[tokio::test]
async fn a_logged_end_whose_record_never_followed_is_handed_on_again() {
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
    let ctx = ctx(jobs.clone());
    let (_, open_key, id, _) = window_before_its_records(&ctx, &jobs).await;
    let later = Utc::now() + chrono::Duration::seconds(61);
    logged_and_died_before_the_record(&ctx, &open_key, later).await;
    assert!(ctx.items().get(&id).await.unwrap().is_none());
    let s = reconcile(&ctx, later).await.unwrap();
    assert_eq!((s.handled, s.closed), (1, 1), "{s:?}");
    let record = ctx.items().get(&id).await.unwrap().unwrap().value;
    assert_eq!(record.state, crate::domain::lifecycle::ItemState::Processed);
    let logs = ctx.store.list(&ctx.config.layout.log_prefix).await.unwrap();
    assert_eq!(logs.len(), 1, "the end was logged once");
}

/// As above, found only after Batch purged the job: the log, which holds the job's detail,
/// hands the end on; nothing is dead-lettered as forgotten.
#[tokio::test]
async fn a_logged_end_batch_forgot_makes_its_record_from_the_log() {
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
    let ctx = ctx(jobs.clone());
    let (_, open_key, id, job) = window_before_its_records(&ctx, &jobs).await;
    let later = Utc::now() + chrono::Duration::seconds(61);
    logged_and_died_before_the_record(&ctx, &open_key, later).await;
    jobs.forget(&job);
    let s = reconcile(&ctx, later).await.unwrap();
    assert_eq!(
        (s.recovered, s.unknown_to_batch, s.closed),
        (1, 0, 1),
        "{s:?}"
    );
    let record = ctx.items().get(&id).await.unwrap().unwrap().value;
    assert_eq!(record.state, crate::domain::lifecycle::ItemState::Processed);
    assert_eq!(
        ctx.failure_dlq.depth().await.unwrap(),
        crate::ports::QueueDepth::default()
    );
}

/// An end whose event was lost, looked for only after Batch purged the job: neither
/// left open for ever nor guessed at, but dead-lettered with the reason, once.
/// The open-claims index is empty, and another pass finds nothing and dead-letters nothing.
async fn nothing_open_and_nothing_more(ctx: &Ctx, later: DateTime<Utc>) {
    let open = ctx
        .store
        .list(&ctx.config.layout.open_claim_prefix)
        .await
        .unwrap();
    assert!(open.is_empty(), "{open:?}");
    let s = reconcile(ctx, later).await.unwrap();
    assert_eq!(s.open_claims, 0);
    // Nothing new (what the caller received stays in flight).
    assert_eq!(ctx.failure_dlq.depth().await.unwrap().visible, 0);
}

#[tokio::test]
async fn a_job_batch_forgot_is_dead_lettered_with_its_reason_once() {
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Succeeded));
    let ctx = ctx(jobs.clone());
    let forgotten = attempt("HLS.L30.T18TYN.2020001T153012.v2.0");
    let crate::repositories::SubmitOutcome::Submitted { job_id } =
        ctx.submit_once(&forgotten, "t").await.unwrap()
    else {
        panic!()
    };
    jobs.forget(&job_id);
    let later = Utc::now() + chrono::Duration::days(8);
    let s = reconcile(&ctx, later).await.unwrap();
    assert_eq!((s.unknown_to_batch, s.errors), (1, 0), "{s:?}");
    let dlq = ctx.failure_dlq.receive(10, 30, 0).await.unwrap();
    assert_eq!(dlq.len(), 1);
    assert!(
        dlq[0].attributes["reason"].contains("Batch no longer knows job"),
        "{:?}",
        dlq[0].attributes
    );
    nothing_open_and_nothing_more(&ctx, later).await;
}

#[tokio::test]
async fn a_marker_without_a_claim_is_closed_and_an_unsubmitted_claim_left_until_its_lease_passes() {
    let ctx = ctx(Arc::new(MemoryJobRunner::default()));
    let orphan = attempt("HLS.L30.T18TYN.2020001T153012.v2.0");
    let open = claim_key(&ctx.config.layout.open_claim_prefix, &orphan);
    ctx.store
        .put(
            &open,
            bytes::Bytes::new(),
            crate::ports::PutCondition::Overwrite,
        )
        .await
        .unwrap();
    let half = attempt("HLS.S30.T18TYN.2020002T153012.v2.0");
    let claim = Claim::new(&half, None, "t", Utc::now());
    crate::repositories::write_json(
        ctx.store.as_ref(),
        &claim_key(&ctx.config.layout.claim_prefix, &half),
        &claim,
        crate::ports::PutCondition::IfAbsent,
    )
    .await
    .unwrap();
    ctx.store
        .put(
            &claim_key(&ctx.config.layout.open_claim_prefix, &half),
            bytes::Bytes::new(),
            crate::ports::PutCondition::Overwrite,
        )
        .await
        .unwrap();
    let later = Utc::now() + chrono::Duration::seconds(61);
    let s = reconcile(&ctx, later).await.unwrap();
    assert_eq!((s.closed, s.not_submitted), (1, 1), "{s:?}");
    assert!(ctx.store.get(&open).await.unwrap().is_none());
    // Past the claim's lease with still no job (its owner died before SubmitJob and its
    // retry message was parked): the marker goes, or the campaign never settles.
    let lease = chrono::Duration::from_std(ctx.config.leases.claim_lease).unwrap();
    let past_lease = Utc::now() + lease + chrono::Duration::seconds(1);
    let s = reconcile(&ctx, past_lease).await.unwrap();
    assert_eq!((s.closed, s.not_submitted), (1, 0), "{s:?}");
    let half_open = claim_key(&ctx.config.layout.open_claim_prefix, &half);
    assert!(ctx.store.get(&half_open).await.unwrap().is_none());
}

/// A description of a finished job that no code can read (here its `jobName` is a number).
fn unreadable_detail(job_id: &str) -> serde_json::Value {
    serde_json::json!({"jobId": job_id, "jobName": 7, "status": "SUCCEEDED"})
}

/// The failure DLQ's messages: the reject notices (the descriptions kept) and the rest.
async fn dead_letters(ctx: &Ctx) -> (usize, Vec<crate::ports::ReceivedMessage>) {
    let all = ctx.failure_dlq.receive(10, 30, 0).await.unwrap();
    let (notices, rest): (Vec<_>, Vec<_>) = all
        .into_iter()
        .partition(|m| m.body.contains("\"record_key\""));
    (notices.len(), rest)
}

/// A window's job ended with its event lost, and Batch describes it in a way no code can
/// read. With item records off nothing else would ever end the attempt: the description is
/// kept and noticed, and the granule — this claim's recorded job, whatever the description
/// says — is dead-lettered with why and logged, and the window closes. Before, the pass counted
/// it handled and closed the window with no end for the granule. (A window whose records are
/// made at its children's ends is the crash harness's `ReconcilerUndescribable`.)
#[tokio::test]
async fn a_window_job_batch_describes_unreadably_is_dead_lettered_with_why_and_the_window_closes() {
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
    let mut ctx = ctx(jobs.clone());
    ctx.config.layout.track_items = false;
    let (_, open_key, id, job) = window_before_its_records(&ctx, &jobs).await;
    jobs.finish(&job, JobStatus::Succeeded, unreadable_detail(&job));
    let later = Utc::now() + chrono::Duration::seconds(61);
    let s = reconcile(&ctx, later).await.unwrap();
    assert_eq!((s.recovered, s.closed, s.errors), (1, 1, 0), "{s:?}");
    assert!(ctx.store.get(&open_key).await.unwrap().is_none());
    let (notices, failures) = dead_letters(&ctx).await;
    assert_eq!((notices, failures.len()), (1, 1), "{failures:?}");
    let reason = &failures[0].attributes["reason"];
    assert!(
        reason.contains(&job) && reason.contains("cannot be read"),
        "{reason}"
    );
    assert!(
        failures[0].body.contains(id.as_str()),
        "{}",
        failures[0].body
    );
    let logs = ctx.store.list(&ctx.config.layout.log_prefix).await.unwrap();
    assert_eq!(logs.len(), 1, "{logs:?}");
    nothing_open_and_nothing_more(&ctx, later).await;
}

/// As above with item records on and the record made at submission: the item sweeper times the
/// PROCESSING attempt out and retries it while its attempts last, so the reconciler only keeps
/// the description and its notice, and ends nothing.
#[tokio::test]
async fn with_a_processing_record_an_unreadable_description_is_left_to_the_sweepers_timeout() {
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
    let ctx = ctx(jobs.clone());
    let (claim, _, id, job) = window_before_its_records(&ctx, &jobs).await;
    feeder_makes_the_record(&ctx, &claim, &job).await;
    jobs.finish(&job, JobStatus::Succeeded, unreadable_detail(&job));
    let later = Utc::now() + chrono::Duration::seconds(61);
    reconcile(&ctx, later).await.unwrap();
    let (notices, failures) = dead_letters(&ctx).await;
    assert_eq!((notices, failures.len()), (1, 0), "{failures:?}");
    let logs = ctx.store.list(&ctx.config.layout.log_prefix).await.unwrap();
    assert!(logs.is_empty(), "{logs:?}");
    let record = ctx.items().get(&id).await.unwrap().unwrap().value;
    assert_eq!(
        record.state,
        crate::domain::lifecycle::ItemState::Processing
    );
}

/// As above for a single job with item records off, where nothing else would ever find the
/// attempt: before, the pass removed its marker and the granule had no end at all.
#[tokio::test]
async fn a_single_job_batch_describes_unreadably_is_dead_lettered_with_records_off() {
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
    let mut ctx = ctx(jobs.clone());
    ctx.config.layout.track_items = false;
    let lost = attempt("HLS.L30.T18TYN.2020001T153012.v2.0");
    let crate::repositories::SubmitOutcome::Submitted { job_id } =
        ctx.submit_once(&lost, "t").await.unwrap()
    else {
        panic!()
    };
    jobs.finish(&job_id, JobStatus::Succeeded, unreadable_detail(&job_id));
    let later = Utc::now() + chrono::Duration::seconds(61);
    let s = reconcile(&ctx, later).await.unwrap();
    assert_eq!((s.recovered, s.errors), (1, 0), "{s:?}");
    let (notices, failures) = dead_letters(&ctx).await;
    assert_eq!((notices, failures.len()), (1, 1), "{failures:?}");
    assert!(failures[0].attributes["reason"].contains("cannot be read"));
    let logs = ctx.store.list(&ctx.config.layout.log_prefix).await.unwrap();
    assert_eq!(logs.len(), 1, "{logs:?}");
    nothing_open_and_nothing_more(&ctx, later).await;
}

#[test]
fn an_unreadable_description_ends_only_an_attempt_surely_its_own_with_nothing_else_to_end_it() {
    // (job recorded by the claim, records made at the ends, item records on) → ends it here.
    let table = [
        ((true, true, true), true),
        ((true, false, false), true),
        ((true, true, false), true),
        // The sweeper times out a PROCESSING record and retries it.
        ((true, false, true), false),
        // Found by its name: maybe an earlier claim's array at the same key.
        ((false, true, true), false),
        ((false, false, false), false),
    ];
    for ((recorded, at_end, track), ends) in table {
        assert_eq!(
            unreadable_description_ends_here(recorded, at_end, track),
            ends,
            "{recorded} {at_end} {track}"
        );
    }
}

/// The premise of `look_at_each_granule`, on Batch's own published answers: an ended parent
/// counts every child ended, a PENDING one counts children still under way; the decision waits
/// on a parent under way only until the limit, and never on one Batch does not describe.
#[test]
fn an_array_window_is_looked_at_granule_by_granule_once_its_parent_ended_or_the_limit_passed() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/real-batch-events");
    let soon = chrono::Duration::hours(2);
    let cases = [
        ("03-pcluster-array-parent-succeeded.jobdetail.json", true),
        ("12-pcluster-array-parent-failed.jobdetail.json", true),
        ("29-pcluster-array-parent-pending.jobdetail.json", false),
    ];
    for (file, ended) in cases {
        let raw = std::fs::read_to_string(dir.join(file)).unwrap();
        let detail: serde_json::Value = serde_json::from_str(&raw).unwrap();
        let status: JobStatus = serde_json::from_value(detail["status"].clone()).unwrap();
        let summary = detail["arrayProperties"]["statusSummary"]
            .as_object()
            .unwrap();
        let under_way: u64 = summary
            .iter()
            .filter(|(s, _)| !matches!(s.as_str(), "SUCCEEDED" | "FAILED"))
            .map(|(_, n)| n.as_u64().unwrap())
            .sum();
        assert_eq!(under_way == 0, ended, "{file}: {summary:?}");
        assert_eq!(
            windows::look_at_each_granule(Some(status), soon),
            ended,
            "{file}"
        );
    }
    // (parent, waited) -> look at each granule
    let limit = windows::ARRAY_WAIT_LIMIT;
    let table = [
        (Some(JobStatus::Pending), soon, false),
        (Some(JobStatus::Runnable), soon, false),
        (Some(JobStatus::Pending), limit, true),
        (Some(JobStatus::Succeeded), soon, true),
        (Some(JobStatus::Failed), soon, true),
        (None, soon, true),
    ];
    for (parent, waited, look) in table {
        assert_eq!(
            windows::look_at_each_granule(parent, waited),
            look,
            "{parent:?} after {waited}"
        );
    }
}

/// A window another campaign's feeder claimed and left unsubmitted is finished by the
/// reconciler once its lease passed, but not while the feeder is held: the takeover submits
/// jobs, which a hold forbids.
#[tokio::test]
async fn another_campaigns_half_submitted_window_waits_while_the_feeder_is_held() {
    use crate::domain::campaign::Campaign;
    use crate::domain::layout::claims::window_key;
    use crate::domain::window::WindowClaim;
    let jobs = Arc::new(MemoryJobRunner::new(JobStatus::Running));
    let ctx = ctx(jobs.clone());
    let old = Campaign::parse("old").unwrap();
    let there = ctx.in_campaign(Some(&old));
    let id = GranuleId::parse("HLS.S30.T18TYN.2020002T153012.v2.0").unwrap();
    let long_ago = Utc::now() - chrono::Duration::hours(2);
    let claim = WindowClaim::new(
        Some(&old),
        "inventories/a.parquet",
        0,
        1,
        vec![id],
        "a feeder that died",
        long_ago,
    );
    let layout = &there.config.layout;
    crate::repositories::write_json(
        there.store.as_ref(),
        &window_key(&layout.claim_prefix, &claim.inventory, 0),
        &claim,
        crate::ports::PutCondition::IfAbsent,
    )
    .await
    .unwrap();
    there
        .store
        .put(
            &window_key(&layout.open_claim_prefix, &claim.inventory, 0),
            bytes::Bytes::new(),
            crate::ports::PutCondition::Overwrite,
        )
        .await
        .unwrap();
    let hold = crate::domain::hold::Hold {
        reason: "looking into failures".into(),
        held_by: "operator".into(),
        at: Utc::now(),
        evidence: Vec::new(),
        cancel: None,
    };
    assert_eq!(ctx.hold().place(&hold).await.unwrap(), None);
    let later = Utc::now() + chrono::Duration::seconds(61);
    let s = reconcile(&ctx, later).await.unwrap();
    assert_eq!((s.held, s.taken_over), (1, 0), "{s:?}");
    assert!(
        jobs.submitted().is_empty(),
        "a held feeder's takeover submitted"
    );
    ctx.hold().release().await.unwrap();
    let s = reconcile(&ctx, later).await.unwrap();
    assert_eq!((s.held, s.taken_over), (0, 1), "{s:?}");
    assert_eq!(jobs.submitted().len(), 1);
}

/// A window whose look is still pending (its run died between its marker and the look) has no
/// job: a pass leaves it, keeping no progress by place, which would name other granules once
/// the look drops some (review of the look, 2026-12-07).
#[tokio::test]
async fn a_window_whose_look_is_pending_is_left_with_no_progress_kept() {
    use crate::domain::layout::claims::window_key;
    use crate::domain::window::WindowClaim;
    let ctx = ctx(Arc::new(MemoryJobRunner::default()));
    let granules = vec![
        GranuleId::parse("HLS.L30.T18TYN.2020001T153012.v2.0").unwrap(),
        GranuleId::parse("HLS.S30.T18TYN.2020002T153012.v2.0").unwrap(),
    ];
    let window =
        WindowClaim::new(None, "inv.parquet", 0, 2, granules, "t", Utc::now()).with_screen(true);
    let layout = &ctx.config.layout;
    crate::repositories::write_json(
        ctx.store.as_ref(),
        &window_key(&layout.claim_prefix, "inv.parquet", 0),
        &window,
        crate::ports::PutCondition::IfAbsent,
    )
    .await
    .unwrap();
    let marker = window_key(&layout.open_claim_prefix, "inv.parquet", 0);
    ctx.store
        .put(
            &marker,
            bytes::Bytes::new(),
            crate::ports::PutCondition::Overwrite,
        )
        .await
        .unwrap();
    let later = Utc::now() + chrono::Duration::seconds(61);
    let s = reconcile(&ctx, later).await.unwrap();
    assert_eq!((s.not_submitted, s.closed, s.handled), (1, 0, 0), "{s:?}");
    let kept = ctx.store.get(&marker).await.unwrap().unwrap();
    assert!(kept.body.is_empty(), "no progress kept: {:?}", kept.body);
    // Past its lease its run is dead: the marker goes (the feeder's takeover writes it again).
    let lease = chrono::Duration::from_std(ctx.config.leases.claim_lease).unwrap();
    let past_lease = Utc::now() + lease + chrono::Duration::seconds(1);
    let s = reconcile(&ctx, past_lease).await.unwrap();
    assert_eq!(s.closed, 1, "{s:?}");
    assert!(ctx.store.get(&marker).await.unwrap().is_none());
}
