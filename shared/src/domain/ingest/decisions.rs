//! What each ingest step decides, as pure functions beside the tables: the handlers only read,
//! call one of these, and write what it returns.

use super::job::JobState;
use super::manifest::{Digest, DigestAlgorithm, Payload};
use super::record::JobRecord;

/// A pending job: failed at once when its manifest entry could not be read (no retry helps), held
/// while its collection or batch is held, else on to estimating.
pub fn on_dispatch(job: &JobRecord, held_by: Option<&str>) -> (JobState, String) {
    if let Payload::Unreadable { line, why, .. } = &job.object.payload {
        return (
            JobState::Failed,
            format!("manifest line {line} cannot be ingested: {why}"),
        );
    }
    match held_by {
        Some(hold) => (JobState::Held, format!("held: {hold}")),
        None => (JobState::Estimating, "taken from the queue".to_owned()),
    }
}

/// Priority after estimating: a job over `large_bytes` steps back by five (it would hold the
/// capacity a long time), never past the lowest.
pub fn priority_after_estimate(priority: u8, space_needed: u64, large_bytes: u64) -> u8 {
    if large_bytes > 0 && space_needed > large_bytes {
        priority.saturating_add(5).min(super::index::MAX_PRIORITY)
    } else {
        priority
    }
}

/// Whether a job needing `need` bytes may start downloading while `in_flight` bytes are already
/// being downloaded or processed, under `capacity`. A job that could never fit runs alone rather
/// than never; an unestimated job (0) waits while the capacity is used up.
pub fn admits(need: u64, in_flight: u64, capacity: u64) -> bool {
    if in_flight == 0 {
        return true;
    }
    if need == 0 {
        return in_flight < capacity;
    }
    in_flight.saturating_add(need) <= capacity
}

/// The expected digest of a manifest file, as the transfer checks it (`md5:<hex>`, `sha256:…`).
pub fn expected_digest(digest: &Digest) -> String {
    match digest.algorithm {
        DigestAlgorithm::Md5 => format!("md5:{}", digest.value),
        DigestAlgorithm::Sha256 => format!("sha256:{}", digest.value),
    }
}

/// Whether a download failure can be fixed by trying again: a digest or size mismatch is the
/// depositor's to fix (a new submission), a server or network failure may pass.
pub fn download_failure_is_final(why: &str) -> bool {
    why.contains("digest mismatch") || why.contains("size mismatch") || why.contains("not retried")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ingest::index::BatchId;
    use crate::domain::ingest::manifest::{single_file, ManifestKind, ManifestObject};
    use crate::domain::ingest::record::{BatchRecord, Submission};
    use chrono::Utc;

    fn job(payload: Option<Payload>) -> JobRecord {
        let b = BatchRecord::new(
            BatchId::parse("b1").unwrap(),
            Submission {
                collection: "c".into(),
                manifest_url: "m".into(),
                kind: ManifestKind::Files,
                priority: 5,
                callback: None,
                profile: None,
                submitter: "s".into(),
            },
            Utc::now(),
        );
        let object = match payload {
            Some(payload) => ManifestObject {
                local_id: None,
                primary_id: None,
                payload,
            },
            None => single_file("http://h/a", None),
        };
        JobRecord::new(b.id.job(1), &b, object, Utc::now())
    }

    #[test]
    fn a_pending_job_fails_held_or_moves_on() {
        let bad = job(Some(Payload::Unreadable {
            line: 3,
            input: "x".into(),
            why: "no file URL".into(),
        }));
        let (to, why) = on_dispatch(&bad, Some("collection c"));
        assert_eq!(
            to,
            JobState::Failed,
            "an unreadable entry fails even when held"
        );
        assert!(
            why.contains("line 3") && why.contains("no file URL"),
            "{why}"
        );
        assert_eq!(
            on_dispatch(&job(None), Some("collection c")).0,
            JobState::Held
        );
        assert_eq!(on_dispatch(&job(None), None).0, JobState::Estimating);
    }

    #[test]
    fn large_jobs_step_back_and_capacity_admits_what_fits() {
        assert_eq!(priority_after_estimate(5, 10, 100), 5);
        assert_eq!(priority_after_estimate(5, 101, 100), 10);
        assert_eq!(priority_after_estimate(97, 101, 100), 99);
        assert!(admits(500, 0, 100), "alone, even too big");
        assert!(admits(40, 60, 100));
        assert!(!admits(41, 60, 100));
        assert!(admits(0, 99, 100));
        assert!(!admits(0, 100, 100));
    }

    #[test]
    fn mismatches_are_final_and_outages_are_not() {
        assert!(download_failure_is_final(
            "digest mismatch: expected md5:1, got md5:2"
        ));
        assert!(download_failure_is_final(
            "http://h/a: HTTP 404 Not Found (not retried)"
        ));
        assert!(!download_failure_is_final("http://h/a: HTTP 503"));
        assert!(!download_failure_is_final("timed out after 30s"));
    }
}
