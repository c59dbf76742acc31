//! What a tap sees of an external call, and what it may decide about it.

/// What a port call does, as a tap needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    /// GetObject (whole, a range or a suffix).
    StoreGet,
    StorePut,
    StoreList,
    StoreCopy,
    StoreDelete,
    /// One part of a multipart upload (CreateMultipartUpload and UploadPart).
    StoreUploadPart,
    /// CompleteMultipartUpload: the uploaded object becomes visible.
    StoreUploadFinish,
    /// AbortMultipartUpload: the parts written so far are dropped.
    StoreUploadAbort,
    QueueSend,
    QueueReceive,
    QueueDelete,
    /// ChangeMessageVisibility to 0.
    QueueRelease,
    /// GetQueueAttributes (message counts).
    QueueDepth,
    JobSubmit,
    /// ListJobs (counting active jobs, finding a job by name).
    JobList,
    JobDescribe,
    /// TerminateJob (`granary cancel`).
    JobTerminate,
    SourceList,
    SourceOpen,
    /// HEAD of a depositor's file (the ingest queue's size check).
    RemoteSize,
    /// GET of a depositor's file (the ingest queue's download).
    RemoteFetch,
    /// POST to a depositor's callback URL.
    RemoteCallBack,
    /// POST to the identifier service (EZID's mint on a shoulder).
    Mint,
    /// EventBridge PutEvents (ingest and archive notifications).
    BusPut,
}

impl Op {
    /// Calls the importer makes to the place files come from (not granary's own state).
    pub fn is_source(self) -> bool {
        matches!(self, Op::SourceList | Op::SourceOpen)
    }

    /// Calls to servers that are not AWS (a source over HTTP, a depositor's server): no AWS
    /// throttling applies to them, but an invocation may die at them like at any call.
    pub fn is_outside_aws(self) -> bool {
        self.is_source()
            || matches!(
                self,
                Op::RemoteSize | Op::RemoteFetch | Op::RemoteCallBack | Op::Mint
            )
    }
}

/// One external call: its operation and what it names (an object key or prefix, a queue's name,
/// a job's name or id, a source URL). A copy also names its source key; a SubmitJob the job
/// queue it names, when not the runner's own.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    pub op: Op,
    pub target: &'a str,
    pub from: Option<&'a str>,
    pub job_queue: Option<&'a str>,
}

impl<'a> Call<'a> {
    pub fn new(op: Op, target: &'a str) -> Self {
        Self {
            op,
            target,
            from: None,
            job_queue: None,
        }
    }

    /// The call as made to `job_queue` (`None`: the runner's own).
    pub fn on_queue(self, job_queue: Option<&'a str>) -> Self {
        Self { job_queue, ..self }
    }
}

/// What came back from a call that was made.
#[derive(Debug, Clone, Copy, Default)]
pub struct Answer {
    pub ok: bool,
    /// A read of an object that does not exist (S3 tells this apart only to callers that may
    /// list the bucket; see `adapters::tap::access_log`).
    pub absent: bool,
    /// Bytes read.
    pub bytes: u64,
    /// Entries listed or messages received.
    pub items: u64,
}

impl Answer {
    pub(super) fn of<T, E>(result: &Result<T, E>) -> Self {
        Self {
            ok: result.is_ok(),
            ..Self::default()
        }
    }
}

/// Why a tap refused a call before it was made.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub message: &'static str,
    /// Whether the caller must treat the call as possibly made (its process died).
    pub ambiguous: bool,
}

/// What happens to a call a tap lets through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Make,
    /// The call is made, then its answer is lost (the invocation died waiting for it).
    MakeAndLoseAnswer,
}

pub trait Tap: Send + Sync {
    fn enter(&self, _call: &Call<'_>) -> Result<Fate, Refusal> {
        Ok(Fate::Make)
    }
    fn leave(&self, _call: &Call<'_>, _answer: &Answer) {}
    /// Whether every call gives way to other tasks before and after it is made. The in-memory
    /// twins answer without ever waiting, so two invocations joined on one task would otherwise
    /// run one after the other; with this, two deliveries of one message (or two overlapping
    /// runs) interleave call by call, as concurrent Lambdas do (`faults::Interleave`).
    fn interleaves(&self) -> bool {
        false
    }
}
