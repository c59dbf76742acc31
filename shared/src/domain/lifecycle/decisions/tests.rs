use super::*;
use crate::domain::granule::GranuleId;
use crate::domain::item::NewItem;
use chrono::TimeZone;

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
}

fn item(state: ItemState) -> ItemRecord {
    let id = GranuleId::parse("HLS.S30.T01GBH.2022226T214921.v2.0").unwrap();
    let new = NewItem {
        state,
        ..NewItem::ready(id, "test", None)
    };
    new.into_record(t0(), "test")
}

/// Applies the decision's changes as the repository would: each checked against the table.
fn apply(r: &ItemRecord, changes: &[Change]) -> ItemRecord {
    changes.iter().fold(r.clone(), |acc, c| {
        acc.apply(c, t0(), "test")
            .unwrap_or_else(|e| panic!("{e}: decision not allowed by the table"))
    })
}

fn policy() -> RetryPolicy {
    RetryPolicy::default()
}

#[test]
fn a_submission_moves_ready_to_processing_and_a_retry_goes_through_ready() {
    let ready = item(Ready);
    let first = apply(&ready, &on_submitted(&ready, 1, "j-1"));
    assert_eq!((first.state, first.attempts.processing), (Processing, 1));
    assert_eq!(first.job_id.as_deref(), Some("j-1"));
    let failed = apply(&first, &[Change::to(ProcessingFailed, "spot")]);
    let second = apply(&failed, &on_submitted(&failed, 2, "j-2"));
    assert_eq!((second.state, second.attempts.processing), (Processing, 2));
}

#[test]
fn a_duplicate_or_late_submission_changes_nothing() {
    let ready = item(Ready);
    let first = apply(&ready, &on_submitted(&ready, 1, "j-1"));
    assert!(on_submitted(&first, 1, "j-1").is_empty());
    assert!(on_submitted(&item(Processed), 2, "j-2").is_empty());
}

#[test]
fn a_discovered_file_a_window_submitted_first_is_taken_over_by_its_job_and_its_end() {
    let discovered = item(Discovered);
    let taken = apply(&discovered, &on_submitted(&discovered, 1, "j-1"));
    assert_eq!((taken.state, taken.attempts.processing), (Processing, 1));
    assert_eq!(taken.attempts.download, 0, "nothing was downloaded");
    // An array child's end meets the DISCOVERED record (its window makes records at ends).
    let ended = on_job_finished(&discovered, 1, "j-1", &[Processed], "ok");
    assert_eq!(apply(&discovered, &ended).state, Processed);
    // Only a first attempt: a later one of a file still DISCOVERED is no window's.
    assert!(on_submitted(&discovered, 2, "j-2").is_empty());
}

#[test]
fn a_submission_while_an_earlier_attempt_shows_processing_supersedes_it() {
    let ready = item(Ready);
    let first = apply(&ready, &on_submitted(&ready, 1, "j-1"));
    let changes = on_submitted(&first, 2, "j-2");
    assert_eq!(changes.len(), 3);
    let second = apply(&first, &changes);
    assert_eq!((second.state, second.attempts.processing), (Processing, 2));
}

#[test]
fn a_job_end_applies_to_its_own_attempt_and_never_to_a_later_one() {
    let ready = item(Ready);
    let running = apply(&ready, &on_submitted(&ready, 1, "j-1"));
    let done = apply(
        &running,
        &on_job_finished(&running, 1, "j-1", &[Processed], "ok"),
    );
    assert_eq!(done.state, Processed);
    assert!(on_job_finished(&done, 1, "j-1", &[ProcessingFailed], "late").is_empty());
}

#[test]
fn a_job_end_ahead_of_its_record_catches_the_record_up_in_one_write() {
    // Attempt 1 failed; attempt 2 ran and ended before the requeuer recorded it.
    let ready = item(Ready);
    let running = apply(&ready, &on_submitted(&ready, 1, "j-1"));
    let failed = apply(
        &running,
        &on_job_finished(&running, 1, "j-1", &[ProcessingFailed], "Spot"),
    );
    let changes = on_job_finished(&failed, 2, "j-2", &[Processed], "ok");
    assert_eq!(changes.len(), 3, "READY, PROCESSING 2, PROCESSED");
    let done = apply(&failed, &changes);
    assert_eq!((done.state, done.attempts.processing), (Processed, 2));
    // The requeuer's late write then changes nothing.
    assert!(on_submitted(&done, 2, "j-2").is_empty());
}

#[test]
fn an_end_before_any_record_makes_the_record_at_its_end_and_the_late_submission_changes_nothing() {
    let ready = item(Ready);
    let changes = on_job_finished_unrecorded(1, "j-1", &[Processed], "ok");
    assert_eq!(
        changes,
        on_job_finished(&ready, 1, "j-1", &[Processed], "ok"),
        "the same as an end met by a fresh READY record"
    );
    let done = apply(&ready, &changes);
    assert_eq!((done.state, done.attempts.processing), (Processed, 1));
    assert_eq!(done.job_id.as_deref(), Some("j-1"));
    assert!(on_submitted(&done, 1, "j-1").is_empty());
    let failed = apply(
        &ready,
        &on_job_finished_unrecorded(1, "j-1", &[ProcessingFailed], "exit 1"),
    );
    assert!(on_submitted(&failed, 1, "j-1").is_empty());
    // A retry that succeeded before the window's record was made: the record counts two
    // attempts, and the window's late submission of the first changes nothing.
    let second = apply(
        &ready,
        &on_job_finished_unrecorded(2, "j-2", &[Processed], "ok"),
    );
    assert_eq!((second.state, second.attempts.processing), (Processed, 2));
    assert_eq!(second.job_id.as_deref(), Some("j-2"));
    assert!(on_submitted(&second, 1, "j-1").is_empty());
    assert!(on_job_finished(&second, 1, "j-1", &[ProcessingFailed], "late Spot").is_empty());
}

#[test]
fn spent_attempts_abandon_only_a_failed_record_not_one_already_retried() {
    let failed = item(ProcessingFailed);
    let gone = apply(
        &failed,
        &[on_attempts_spent(&failed, 4, "attempt 4 was the last of 4").unwrap()],
    );
    assert_eq!(gone.state, Abandoned);
    assert!(on_attempts_spent(&item(Processing), 4, "spent").is_none());
}

#[test]
fn an_operator_resume_applies_only_to_the_record_as_read() {
    let failed = item(ProcessingFailed);
    assert_eq!(
        apply(
            &failed,
            &[on_operator_resume(&failed, failed.seq, 3).unwrap()]
        )
        .state,
        Ready
    );
    assert!(on_operator_resume(&failed, failed.seq + 1, 3).is_none());
}

#[test]
fn downloads_begin_retry_while_the_budget_lasts_then_give_up_unless_granted() {
    let p = policy();
    let discovered = item(Discovered);
    let mut r = apply(
        &discovered,
        &[on_download_wanted(&discovered, &p, false).unwrap()],
    );
    assert_eq!((r.state, r.attempts.download), (Downloading, 1));
    loop {
        let attempt = r.attempts.download;
        let failed = DownloadResult::Failed("reset".into());
        r = apply(&r, &[on_download_result(&r, attempt, &failed).unwrap()]);
        assert_eq!(r.state, DownloadingFailed);
        r = apply(&r, &[on_download_wanted(&r, &p, false).unwrap()]);
        if r.state == Ignore {
            break;
        }
        assert!(r.attempts.download <= p.max_download_attempts);
    }
    assert_eq!(r.attempts.download, p.max_download_attempts);
    let failed = apply(&item(Discovered), &[Change::to(Downloading, "1")]);
    let failed = apply(&failed, &[Change::to(DownloadingFailed, "x")]);
    let spent = ItemRecord {
        attempts: crate::domain::lifecycle::Attempts {
            download: p.max_download_attempts,
            ..failed.attempts.clone()
        },
        ..failed
    };
    let granted = on_download_wanted(&spent, &p, true).unwrap();
    assert_eq!(granted.to, Some(Downloading));
}

#[test]
fn a_download_result_counts_only_for_its_own_attempt() {
    let r = apply(&item(Discovered), &[Change::to(Downloading, "1")]);
    let file = StoredFile {
        key: "raw/x".into(),
        size: 3,
        sha256: "abc".into(),
    };
    assert!(on_download_result(&r, 2, &DownloadResult::Stored(file.clone())).is_none());
    let stored = apply(
        &r,
        &[on_download_result(&r, 1, &DownloadResult::Stored(file)).unwrap()],
    );
    assert_eq!(stored.state, Downloaded);
    assert_eq!(stored.stored_key.as_deref(), Some("raw/x"));
    assert_eq!(stored.size, Some(3));
}

#[test]
fn found_stored_admission_revalidation_and_timeouts_need_the_record_as_read() {
    let discovered = item(Discovered);
    let file = StoredFile {
        key: "raw/x".into(),
        size: 1,
        sha256: "s".into(),
    };
    let stored = apply(&discovered, &[on_found_stored(&discovered, &file).unwrap()]);
    assert_eq!(stored.state, Downloaded);
    assert!(on_found_stored(&stored, &file).is_none());
    assert!(on_admission(&stored, stored.seq + 1, Ready, "x").is_none());
    let ready = apply(
        &stored,
        &[on_admission(&stored, stored.seq, Ready, "ok").unwrap()],
    );
    assert_eq!(ready.state, Ready);
    let bad = on_revalidation_failed(&stored, Downloaded, stored.seq, "gone").unwrap();
    assert_eq!(bad.to, Some(DownloadingFailed));
    assert!(on_revalidation_failed(&ready, Downloaded, stored.seq, "gone").is_none());
    assert!(on_timeout(&ready, Ready, ready.seq + 1, &[ProcessingFailed], 60).is_empty());
    let downloading = item(Downloading);
    let gave_up = on_timeout(
        &downloading,
        Downloading,
        downloading.seq,
        &[DownloadingFailed, Ignore],
        240,
    );
    let states: Vec<_> = gave_up.iter().filter_map(|c| c.to).collect();
    assert_eq!(states, [DownloadingFailed, Ignore]);
    assert!(gave_up[1].reason.contains("no attempts left"));
    assert_eq!(apply(&downloading, &gave_up).state, Ignore);
    let failed = item(ProcessingFailed);
    assert_eq!(
        on_no_attempts_left(&failed, "spent").unwrap().to,
        Some(Abandoned)
    );
    assert!(on_no_attempts_left(&ready, "spent").is_none());
}

#[test]
fn a_download_past_its_timeout_is_recorded_failed_once() {
    let p = policy();
    let r = apply(&item(Discovered), &[Change::to(Downloading, "1")]);
    assert!(
        on_download_timed_out(&r, &p, t0()).is_none(),
        "not yet timed out"
    );
    let late = t0() + p.download_timeout + chrono::Duration::seconds(1);
    let failed = apply(&r, &[on_download_timed_out(&r, &p, late).unwrap()]);
    assert_eq!(failed.state, DownloadingFailed);
    assert!(on_download_timed_out(&failed, &p, late).is_none());
}

#[test]
fn a_dead_lettered_end_abandons_the_item_and_an_operator_can_send_it_round_again() {
    let ready = item(Ready);
    let running = apply(&ready, &on_submitted(&ready, 1, "j-1"));
    let ends = end_states(Route::FailureDlq);
    let gone = apply(
        &running,
        &on_job_finished(&running, 1, "j-1", ends, "application exited with code 1"),
    );
    assert_eq!((gone.state, gone.attempts.processing), (Abandoned, 1));
    assert!(gone.reason.contains("dead-lettered"), "{}", gone.reason);
    // A cancel's end says so instead.
    let reason = format!(
        "cancelled: {}",
        crate::domain::cancel::reason("c20261127T060001-000000ab", "bad image")
    );
    let cancelled = apply(
        &running,
        &on_job_finished(&running, 1, "j-1", ends, &reason),
    );
    assert_eq!(cancelled.state, Abandoned);
    assert_eq!(
        cancelled.reason,
        "attempt 1 cancelled: granary cancel c20261127T060001-000000ab: bad image"
    );
    // Its end delivered again changes nothing.
    assert!(on_job_finished(&gone, 1, "j-1", ends, "again").is_empty());
    // Unrecorded: made at its end, abandoned, in one write.
    let made = apply(
        &ready,
        &on_job_finished_unrecorded(1, "j-1", ends, "exit 1"),
    );
    assert_eq!(made.state, Abandoned);
    // An operator's resume, or the next attempt a redrive submits, brings it back.
    let resumed = apply(&gone, &[on_operator_resume(&gone, gone.seq, 2).unwrap()]);
    assert_eq!(resumed.state, Ready);
    let again = apply(&gone, &on_submitted(&gone, 2, "j-2"));
    assert_eq!((again.state, again.attempts.processing), (Processing, 2));
    // A retried end stops at PROCESSING_FAILED for the requeuer; a success at PROCESSED.
    assert_eq!(end_states(Route::RetryQueue), &[ProcessingFailed]);
    assert_eq!(end_states(Route::Done), &[Processed]);
}
