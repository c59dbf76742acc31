//! The Batch twin's job list, kept small for campaigns of millions of jobs: a job's id is its
//! place in the list, and an array child is 8 bytes.

use anyhow::Result;
use granary::domain::batch_event::JobStatus;
use granary::ports::{JobRequest, JobSummary};
use std::collections::HashMap;
use std::sync::Arc;

/// One job, kept small (a million of them in a large campaign): its id is its place in the list.
pub(super) struct Job {
    /// Shared with the by-name index.
    pub(super) name: Arc<str>,
    pub(super) status: JobStatus,
    /// What was asked, until the simulator settles the job (DescribeJobs shows it queued).
    pub(super) request: Option<Box<JobRequest>>,
    pub(super) created_at_ms: i64,
    /// Where the JobDetail its final event carried is kept, as JSON text (a million parsed
    /// details would not fit in memory; DescribeJobs parses the one it answers).
    pub(super) settled: Option<DetailAt>,
    /// An array's children, `<id>:<index>` (none for a single job).
    pub(super) children: Box<[Child]>,
}

/// Where a settled job's detail is: a framed entry's offset in the twin's scratch file, or, for
/// a twin without one, its place in [`Jobs::held`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct DetailAt(pub(super) u64);

/// One child of an array job in 8 bytes (a campaign of ten million granules has ten million
/// children, and 32 bytes each were 300 MB): its status in the top byte and, below, where its
/// settled detail is ([`DetailAt`]) or [`Child::UNSETTLED`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Child(u64);

/// Every status, each at the place [`Child`] keeps it by.
pub(super) const STATUSES: [JobStatus; 7] = JobStatus::ALL;

impl Child {
    pub(super) const PLACE_BITS: u32 = 56;
    pub(super) const UNSETTLED: u64 = (1 << Self::PLACE_BITS) - 1;

    /// Where `status` is in [`STATUSES`]: a match, so a status added to the list is a compile
    /// error here rather than a child kept with another status.
    pub(super) fn status_at(status: JobStatus) -> u64 {
        match status {
            JobStatus::Submitted => 0,
            JobStatus::Pending => 1,
            JobStatus::Runnable => 2,
            JobStatus::Starting => 3,
            JobStatus::Running => 4,
            JobStatus::Succeeded => 5,
            JobStatus::Failed => 6,
        }
    }

    /// A child not settled yet.
    pub(super) fn queued(status: JobStatus) -> Self {
        Self(Self::status_at(status) << Self::PLACE_BITS | Self::UNSETTLED)
    }

    pub(super) fn new(status: JobStatus, settled: DetailAt) -> Result<Self> {
        anyhow::ensure!(
            settled.0 < Self::UNSETTLED,
            "the Batch twin cannot keep a child's detail at {} (past 2^56)",
            settled.0
        );
        Ok(Self(
            Self::status_at(status) << Self::PLACE_BITS | settled.0,
        ))
    }

    pub(super) fn status(self) -> JobStatus {
        // The top byte is always a place `status_at` gave (only `queued` and `new` make a
        // child); were it not, a failed child is routed like any end, never left looking active.
        STATUSES
            .get((self.0 >> Self::PLACE_BITS) as usize)
            .copied()
            .unwrap_or(JobStatus::Failed)
    }

    pub(super) fn settled(self) -> Option<DetailAt> {
        let place = self.0 & Self::UNSETTLED;
        (place != Self::UNSETTLED).then_some(DetailAt(place))
    }
}

#[derive(Default)]
pub(super) struct Jobs {
    pub(super) all: Vec<Job>,
    /// The jobs not yet finished, so counting them does not walk a million finished ones.
    pub(super) active: std::collections::BTreeSet<usize>,
    /// The newest job of each name (a name is submitted again only by a bug; the newest wins).
    pub(super) by_name: HashMap<Arc<str>, usize>,
    /// Settled details, when the twin has no scratch file ([`DetailAt`] is the place here).
    pub(super) held: Vec<Box<[u8]>>,
}

/// Shaped like Batch's UUIDs (log streams and event ids take their first characters), and
/// naming the job's place in the list.
pub(super) fn job_id_of(index: usize) -> String {
    format!("{:08x}-0000-4000-8000-{:012x}", index + 1, index + 1)
}

/// An array child's id split into its parent's and its index (`<parent>:<index>`).
pub(super) fn child_of(job_id: &str) -> Option<(&str, usize)> {
    let (parent, index) = job_id.rsplit_once(':')?;
    Some((parent, index.parse().ok()?))
}

/// The place in the list of a job id made by [`job_id_of`]; `None` for any other id.
pub(super) fn index_of(job_id: &str) -> Option<usize> {
    let n = usize::from_str_radix(job_id.rsplit('-').next()?, 16).ok()?;
    let index = n.checked_sub(1)?;
    (job_id_of(index) == job_id).then_some(index)
}

impl Jobs {
    pub(super) fn get(&self, job_id: &str) -> Option<(usize, &Job)> {
        let i = index_of(job_id)?;
        Some((i, self.all.get(i)?))
    }

    pub(super) fn summary(&self, index: usize) -> Option<JobSummary> {
        self.all.get(index).map(|j| JobSummary {
            job_id: job_id_of(index),
            job_name: j.name.to_string(),
            status: j.status,
        })
    }
}
