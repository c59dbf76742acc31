//! The feeder's windows of first attempts on the one submission protocol
//! (`repositories::submission`): one claim object for the window (`domain::window`), its marker
//! in the open-claims index, SubmitJob per granule — or one SubmitJob for the whole window as an
//! array job, child `i` processing granule `i` — and one write recording the job ids.

use super::json::RepositoryError;
use super::submission::{JobSubmission, Screen, Submission, Submitted, Submitter};
use crate::contracts::job::{job_request, window_job_request};
use crate::domain::granule::GranuleId;
use crate::domain::job_name::{job_name, window_job_name};
use crate::domain::layout::claims::{parse_window_key, window_key};
use crate::domain::window::{child_job_id, WindowClaim, WINDOW_ATTEMPT};
use crate::ports::{JobRequest, JobRunner, ObjectStore};
use chrono::{DateTime, Utc};
use std::time::Duration;

/// Where window claims live and how they are worked.
#[derive(Clone, Copy)]
pub struct Windows<'a> {
    pub store: &'a dyn ObjectStore,
    pub jobs: &'a dyn JobRunner,
    /// granary's bucket, where an array's children read their window claim.
    pub bucket: &'a str,
    pub claim_prefix: &'a str,
    pub open_prefix: &'a str,
    pub lease: Duration,
    /// SubmitJob calls in flight at once.
    pub concurrency: usize,
    pub metrics: &'a crate::metrics::Metrics,
}

/// What submitting a window did.
pub type WindowOutcome = Submitted<WindowClaim>;

/// Every granule's job at its attempt, in the window's order; or the window's one array job,
/// whose children read their granules (and, in a window of retries, their attempts) from the
/// claim at `claim_key`. The array's `ATTEMPT` is its children's lowest: a window of first
/// attempts says 1, as it always has.
fn requests(window: &WindowClaim, bucket: &str, claim_key: &str) -> Vec<JobRequest> {
    if window.array {
        let size = u32::try_from(window.granules.len()).unwrap_or(u32::MAX);
        let lowest = window.attempts().map(|e| e.attempt).min();
        return vec![window_job_request(
            &window_job_name(window.campaign.as_ref(), &window.inventory, window.start),
            window.campaign.as_ref(),
            bucket,
            claim_key,
            window.token.as_deref(),
            size,
            lowest.unwrap_or(WINDOW_ATTEMPT),
        )];
    }
    window
        .entries()
        .map(|e| {
            let campaign = window.campaign.as_ref();
            let request = job_request(
                &job_name(campaign, &e.granule_id, e.attempt),
                campaign,
                &e.granule_id,
                e.attempt,
            );
            let placement = crate::domain::claim::Placement {
                spot_ends: e.spot_ends,
                job_queue: None,
                memory_mib: None,
            };
            crate::contracts::job::placed(request, &placement)
        })
        .collect()
}

/// What became of each granule's job: an array's one submission is every child's.
fn per_granule(claim: &WindowClaim, jobs: Vec<JobSubmission>) -> Vec<JobSubmission> {
    if !claim.array {
        return jobs;
    }
    let Some(array) = jobs.into_iter().next() else {
        return Vec::new();
    };
    (0..claim.granules.len())
        .map(|i| match &array {
            JobSubmission::Submitted { job_id } => JobSubmission::Submitted {
                job_id: child_job_id(job_id, i),
            },
            JobSubmission::AlreadySubmitted { job_id } => JobSubmission::AlreadySubmitted {
                job_id: child_job_id(job_id, i),
            },
            JobSubmission::Recovered { job_id } => JobSubmission::Recovered {
                job_id: child_job_id(job_id, i),
            },
            not @ JobSubmission::NotSubmitted { .. } => not.clone(),
        })
        .collect()
}

impl Windows<'_> {
    /// Whether the window at `(inventory, start)` was claimed before (one GET, retried while
    /// refused): a run redoing a window works it as its claim says, so what it would have decided
    /// about the window's granules before claiming it need not be decided again.
    pub async fn claimed(&self, inventory: &str, start: u64) -> Result<bool, RepositoryError> {
        let key = window_key(self.claim_prefix, inventory, start);
        crate::retry::again(
            crate::retry::Backoff::IN_RUN,
            "looking for the window's claim",
            || self.store.get(&key),
            crate::ports::StoreError::is_transient,
        )
        .await
        .map(|found| found.is_some())
        .map_err(RepositoryError::from)
    }

    /// The window claim at `key` (`None`: none there).
    pub async fn claim_at(&self, key: &str) -> Result<Option<WindowClaim>, RepositoryError> {
        Ok(super::json::read_json::<WindowClaim>(self.store, key)
            .await?
            .map(|c| c.value))
    }

    /// Submits each granule of `window` at attempt 1 at most once, however often and
    /// concurrently it is asked. A window already claimed is worked as its claim says (its rows
    /// and granules, single jobs or an array, not `window`'s). The outcome names each granule's
    /// job (an array's child `<id>:<i>`), in the claim's order. A claim whose look is pending
    /// (`WindowClaim::screen_pending`) has it made by `screen` once marked open, before any job.
    pub async fn submit(
        &self,
        window: WindowClaim,
        screen: Option<&dyn Screen<WindowClaim>>,
    ) -> Result<WindowOutcome, RepositoryError> {
        let submitter = Submitter {
            store: self.store,
            jobs: self.jobs,
            lease: self.lease,
            concurrency: self.concurrency,
            claimed_by: "queue-feeder",
            metrics: self.metrics,
        };
        let claim_key = window_key(self.claim_prefix, &window.inventory, window.start);
        let requests = |w: &WindowClaim| requests(w, self.bucket, &claim_key);
        let outcome = submitter
            .submit(Submission {
                claim_key: claim_key.clone(),
                open_key: Some(window_key(
                    self.open_prefix,
                    &window.inventory,
                    window.start,
                )),
                claim: window,
                requests: &requests,
                screen,
            })
            .await?;
        Ok(match outcome {
            Submitted::Worked { claim, jobs } => {
                let jobs = per_granule(&claim, jobs);
                Submitted::Worked { claim, jobs }
            }
            in_flight @ Submitted::InFlight { .. } => in_flight,
        })
    }
}

/// A window whose open marker stands: its place and its granules.
#[derive(Debug, Clone)]
pub struct OpenWindow {
    pub inventory: String,
    pub start: u64,
    pub granules: Vec<GranuleId>,
    /// Its granules' records are made at their children's ends, not with the window.
    pub records_at_end: bool,
}

/// The open windows as read: those whose claim could be read, and the places of those whose
/// claim could not (an error the caller weighs: the feeder stops, the sweeper counts it).
#[derive(Debug, Default)]
pub struct OpenWindows {
    pub windows: Vec<OpenWindow>,
    pub unreadable: Vec<(String, u64, RepositoryError)>,
}

/// Which of the granules asked about belong to an open window of first attempts (exactly: each
/// answer is checked against the claim itself), and the open windows whose claim could not be
/// read (the caller cannot know what they hold).
#[derive(Debug, Default)]
pub struct InOpenWindows {
    pub in_flight: std::collections::HashSet<GranuleId>,
    pub unreadable: Vec<(String, u64, RepositoryError)>,
}

/// What a warm instance keeps of the open windows of first attempts it read, for
/// [`Windows::in_open_windows`]: by claim key, the time its open marker was last written and a
/// 64-bit fingerprint of each of its granules, sorted (8 bytes a granule in flight, however long
/// its id). A fingerprint only says where to look: a match is confirmed against the claim
/// itself, so a collision costs a GET, never a granule. A claim's granules only ever shrink
/// while it stands (its look, `WindowClaim::without`), so prints kept stay a superset; one an
/// operator removed and a feeder made again has its marker written again after it, so a marker
/// with another time is read afresh. Only windows still open are kept.
#[derive(Default)]
pub struct OpenWindowsRead {
    seed: std::hash::RandomState,
    read: std::sync::Mutex<std::collections::HashMap<String, (DateTime<Utc>, Fingerprints)>>,
}

/// An open window's granules as fingerprints; empty for a window of retries (its granules have
/// records from their first attempts).
type Fingerprints = std::sync::Arc<[u64]>;

impl OpenWindowsRead {
    fn fingerprint(&self, granule: &GranuleId) -> u64 {
        use std::hash::BuildHasher;
        self.seed.hash_one(granule.as_str())
    }

    fn fingerprints(&self, claim: &WindowClaim) -> Fingerprints {
        if claim.is_retries() {
            return std::sync::Arc::from([]);
        }
        let mut prints: Vec<u64> = claim.granules.iter().map(|g| self.fingerprint(g)).collect();
        prints.sort_unstable();
        prints.into()
    }
}

/// An open marker's window: its place and the key of its claim.
struct Marked {
    inventory: String,
    start: u64,
    claim_key: String,
    stamp: Option<DateTime<Utc>>,
}

impl Windows<'_> {
    /// The open windows' markers (one LIST of `<open prefix>windows/`, retried while refused;
    /// not the requeued attempts' markers beside them).
    async fn marked(&self) -> Result<Vec<Marked>, RepositoryError> {
        let windows = crate::domain::layout::claims::windows_root(self.open_prefix);
        let markers = crate::retry::again(
            crate::retry::Backoff::IN_RUN,
            "listing the open windows",
            || self.store.list(&windows),
            crate::ports::StoreError::is_transient,
        )
        .await?;
        Ok(markers
            .into_iter()
            .filter_map(|marker| {
                let (inventory, start) = parse_window_key(self.open_prefix, &marker.key)?;
                Some(Marked {
                    claim_key: window_key(self.claim_prefix, &inventory, start),
                    inventory,
                    start,
                    stamp: marker.last_modified,
                })
            })
            .collect())
    }

    async fn read_claim(&self, key: &str) -> Result<Option<WindowClaim>, RepositoryError> {
        super::json::read_json_retrying::<WindowClaim>(
            self.store,
            key,
            "reading an open window's claim",
        )
        .await
        .map(|c| c.map(|c| c.value))
    }

    /// Every window whose open marker stands, with all its granules from its claim (one LIST
    /// and a GET a window). A marker whose claim is gone is left out (the reconciler closes it).
    pub async fn open(&self) -> Result<OpenWindows, RepositoryError> {
        let mut out = OpenWindows::default();
        for m in self.marked().await? {
            match self.read_claim(&m.claim_key).await {
                Ok(Some(claim)) => out.windows.push(OpenWindow {
                    records_at_end: claim.records_at_end,
                    granules: claim.granules,
                    inventory: m.inventory,
                    start: m.start,
                }),
                Ok(None) => {}
                Err(e) => out.unreadable.push((m.inventory, m.start, e)),
            }
        }
        Ok(out)
    }

    /// Which of `granules` are in an open window of first attempts: submitted or about to be,
    /// perhaps with no item record yet (an array's are made at its children's ends, a single
    /// job's after it is submitted). One LIST of the open markers; a GET for each claim `cache` has
    /// not read under its marker's time, and for each cached window a fingerprint of `granules`
    /// matches (the claim decides).
    pub async fn in_open_windows(
        &self,
        cache: &OpenWindowsRead,
        granules: &[GranuleId],
    ) -> Result<InOpenWindows, RepositoryError> {
        let mut out = InOpenWindows::default();
        let mut kept = std::collections::HashMap::new();
        let asked: Vec<(u64, &GranuleId)> =
            granules.iter().map(|g| (cache.fingerprint(g), g)).collect();
        for m in self.marked().await? {
            let cached = m.stamp.and_then(|at| {
                let read = cache.read.lock().unwrap_or_else(|p| p.into_inner());
                read.get(&m.claim_key)
                    .filter(|(seen, _)| *seen == at)
                    .map(|(_, prints)| prints.clone())
            });
            let (prints, claim) = match cached {
                // Read before: only a fingerprint's match sends us to the claim.
                Some(prints) => {
                    let matched = asked
                        .iter()
                        .any(|(print, _)| prints.binary_search(print).is_ok());
                    let claim = if matched {
                        match self.read_claim(&m.claim_key).await {
                            Ok(claim) => claim,
                            Err(e) => {
                                out.unreadable.push((m.inventory, m.start, e));
                                continue;
                            }
                        }
                    } else {
                        None
                    };
                    (prints, claim)
                }
                None => match self.read_claim(&m.claim_key).await {
                    Ok(Some(claim)) => (cache.fingerprints(&claim), Some(claim)),
                    Ok(None) => continue,
                    Err(e) => {
                        out.unreadable.push((m.inventory, m.start, e));
                        continue;
                    }
                },
            };
            if let Some(claim) = claim.filter(|c| !c.is_retries()) {
                let members: std::collections::HashSet<&GranuleId> =
                    claim.granules.iter().collect();
                out.in_flight.extend(
                    asked
                        .iter()
                        .filter(|(_, g)| members.contains(g))
                        .map(|(_, g)| (*g).clone()),
                );
            }
            if let Some(at) = m.stamp {
                kept.insert(m.claim_key, (at, prints));
            }
        }
        *cache.read.lock().unwrap_or_else(|p| p.into_inner()) = kept;
        Ok(out)
    }
}

mod granules;
pub use granules::{ChildOf, WindowGranuleError, WindowGranules};
mod markers;

#[cfg(test)]
mod tests;
