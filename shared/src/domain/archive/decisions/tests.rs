use super::*;
use TaskState::*;

#[test]
fn a_phase_ends_when_every_task_has_and_errs_if_any_failed() {
    assert_eq!(phase_progress(&[]), PhaseProgress::Running);
    assert_eq!(phase_progress(&[Done, Pending]), PhaseProgress::Running);
    assert_eq!(phase_progress(&[Done, Done]), PhaseProgress::Done);
    assert_eq!(
        phase_progress(&[Done, Failed { recoverable: true }]),
        PhaseProgress::Failed { recoverable: true }
    );
    assert_eq!(
        phase_progress(&[Failed { recoverable: true }, Failed { recoverable: false }]),
        PhaseProgress::Failed { recoverable: false }
    );
}

#[test]
fn recoverable_errors_retry_with_backoff_until_the_budget_is_spent() {
    let now = Utc::now();
    let base = Duration::seconds(30);
    let (to, at) = after_error(true, 0, 2, base, now);
    assert_eq!((to, at), (ArchiveState::RecoverableError, Some(now + base)));
    let (_, at) = after_error(true, 1, 2, base, now);
    assert_eq!(at, Some(now + base * 2));
    assert_eq!(after_error(true, 2, 2, base, now).0, ArchiveState::Failure);
    assert_eq!(after_error(false, 0, 2, base, now).0, ArchiveState::Failure);
    assert_eq!(backoff(base, 40), Duration::hours(1));
}

fn job(state: ArchiveState) -> ArchiveJob {
    let source = super::super::record::ArchiveSource {
        bucket: "src".into(),
        prefix: "p/".into(),
    };
    let mut j = ArchiveJob::new("a-1", source, Vec::new(), Utc::now());
    j.state = state;
    j.shards = 2;
    j.objects = 3;
    j
}

fn task(name: &str, state: TaskState) -> TaskRecord {
    TaskRecord {
        job: "a-1".into(),
        phase: Phase::ActivityArchiving,
        task: name.into(),
        state,
        reason: "disk full".into(),
        runs: 1,
        sent_at: None,
        members: Vec::new(),
    }
}

const POLICY: RetryPolicy = RetryPolicy {
    max_retries: 2,
    backoff: Duration::seconds(30),
};

#[test]
fn every_state_calls_for_its_step_and_each_move_is_in_the_table() {
    use ArchiveState as S;
    let now = Utc::now();
    for state in S::ALL {
        let j = job(state);
        let step = next_step(&j, now, POLICY);
        let mv = match &step {
            ArchiveStep::Move(m) | ArchiveStep::Announce(m) => Some(m),
            ArchiveStep::RerunPhase { then, .. } | ArchiveStep::CleanUp { then, .. } => Some(then),
            ArchiveStep::Wait | ArchiveStep::ListSource | ArchiveStep::RunPhase(_) => None,
        };
        if let Some(mv) = mv {
            assert_eq!(mv.moves.from, vec![state]);
            let moved = mv.apply(&j, now).unwrap().unwrap();
            assert_eq!(moved.state, mv.moves.to, "{state}");
            // A record someone else moved meanwhile is left alone.
            assert_eq!(mv.apply(&job(S::Completed), now).unwrap(), None);
        }
    }
    assert_eq!(
        next_step(&job(S::Uninitialized), now, POLICY),
        ArchiveStep::ListSource
    );
    assert_eq!(
        next_step(&job(S::Store), now, POLICY),
        ArchiveStep::RunPhase(Phase::Store)
    );
    assert_eq!(
        next_step(&job(S::Completed), now, POLICY),
        ArchiveStep::Wait
    );
    // Processing starts the first phase's tasks once moved.
    let ArchiveStep::Move(mv) = next_step(&job(S::Processing), now, POLICY) else {
        panic!()
    };
    assert_eq!(mv.starts, Some(Phase::ActivityArchiving));
    // An empty source fails at Queued, with the reason kept.
    let mut empty = job(S::Queued);
    empty.objects = 0;
    let ArchiveStep::Move(mv) = next_step(&empty, now, POLICY) else {
        panic!()
    };
    let failed = mv.apply(&empty, now).unwrap().unwrap();
    assert_eq!(failed.state, S::Failure);
    assert_eq!(
        failed.failure.as_deref(),
        Some("s3://src/p/ holds no object to archive")
    );
    // A failed job's cleanup keeps its staged archive and ends Failed.
    let mut failing = job(S::Cleanup);
    failing.failure = Some("x".into());
    assert!(matches!(
        next_step(&failing, now, POLICY),
        ArchiveStep::CleanUp { succeeded: false, then } if then.moves.to == S::Failed
    ));
}

#[test]
fn an_error_is_retried_after_its_backoff_until_the_budget_is_spent_then_fails() {
    let now = Utc::now();
    let mut erred = job(ArchiveState::Error);
    erred.failed_phase = Some(Phase::Store);
    erred.recoverable = Some(true);
    erred.reason = "throttled".into();
    let ArchiveStep::Move(mv) = next_step(&erred, now, POLICY) else {
        panic!()
    };
    let waiting = mv.apply(&erred, now).unwrap().unwrap();
    assert_eq!(waiting.state, ArchiveState::RecoverableError);
    assert_eq!(waiting.reason, "recoverable: retry 1 of 2");
    assert_eq!(next_step(&waiting, now, POLICY), ArchiveStep::Wait);
    let later = now + Duration::seconds(31);
    let ArchiveStep::RerunPhase { phase, then } = next_step(&waiting, later, POLICY) else {
        panic!()
    };
    assert_eq!((phase, then.starts), (Phase::Store, Some(Phase::Store)));
    let rerun = then.apply(&waiting, later).unwrap().unwrap();
    assert_eq!(rerun.retries.get(&Phase::Store), Some(&1));
    assert_eq!((rerun.recoverable, rerun.retry_at), (None, None));
    // Spent: fails with the error's reason.
    erred.retries.insert(Phase::Store, 2);
    let ArchiveStep::Move(mv) = next_step(&erred, now, POLICY) else {
        panic!()
    };
    let failed = mv.apply(&erred, now).unwrap().unwrap();
    assert_eq!(failed.state, ArchiveState::Failure);
    assert_eq!(failed.reason, "retries spent (2): throttled");
    assert_eq!(failed.failure.as_deref(), Some("throttled"));
}

#[test]
fn a_source_unreadable_past_the_grace_fails_the_job_with_s3s_reason() {
    let j = job(ArchiveState::Uninitialized);
    assert_eq!(on_source_unreadable(&j, "AccessDenied", j.created_at), None);
    let late = j.created_at + SOURCE_UNREADABLE_GRACE;
    let mv = on_source_unreadable(&j, "AccessDenied", late).unwrap();
    let queued = mv.apply(&j, late).unwrap().unwrap();
    assert_eq!(queued.state, ArchiveState::Queued);
    assert!(queued
        .failure
        .unwrap()
        .ends_with("for 60 minutes: AccessDenied"));
    let listed = on_source_listed(4, 7).apply(&j, late).unwrap().unwrap();
    assert_eq!((listed.shards, listed.objects), (4, 7));
}

#[test]
fn a_phase_fans_in_once_every_task_exists_and_has_ended() {
    let j = job(ArchiveState::ActivityArchiving);
    let phase = Phase::ActivityArchiving;
    // Two shards: one task is not enough, a pending one is not ended.
    assert_eq!(
        on_phase_tasks(&j, phase, &[task("shard-00000", Done)]),
        None
    );
    let both = [task("shard-00000", Done), task("shard-00001", Pending)];
    assert_eq!(on_phase_tasks(&j, phase, &both), None);
    let done = [task("shard-00000", Done), task("shard-00001", Done)];
    let mv = on_phase_tasks(&j, phase, &done).unwrap();
    assert_eq!(
        (mv.moves.to, mv.starts),
        (ArchiveState::PostProcessing, Some(Phase::PostProcessing))
    );
    let failed = [
        task("shard-00000", Done),
        task("shard-00001", Failed { recoverable: true }),
    ];
    let mv = on_phase_tasks(&j, phase, &failed).unwrap();
    assert_eq!(
        mv.moves.reason,
        "activity-archiving failed: shard-00001: disk full"
    );
    let erred = mv.apply(&j, Utc::now()).unwrap().unwrap();
    assert_eq!(
        (erred.failed_phase, erred.recoverable),
        (Some(phase), Some(true))
    );
    // A job that has left the phase does not fan in again.
    assert_eq!(
        on_phase_tasks(&job(ArchiveState::Store), phase, &done),
        None
    );
}

#[test]
fn an_operator_retries_only_a_failed_job_that_reached_a_phase() {
    let mut j = job(ArchiveState::Failed);
    assert!(on_operator_retry(&j)
        .unwrap_err()
        .to_string()
        .contains("before any phase ran"));
    j.failed_phase = Some(Phase::Store);
    let (phase, mv) = on_operator_retry(&j).unwrap();
    assert_eq!((phase, mv.moves.to), (Phase::Store, ArchiveState::Store));
    let rerun = mv.apply(&j, Utc::now()).unwrap().unwrap();
    assert!(
        rerun.retries.is_empty(),
        "an operator's retry is not counted"
    );
    assert!(on_operator_retry(&job(ArchiveState::Store))
        .unwrap_err()
        .to_string()
        .contains("not failed"));
}
