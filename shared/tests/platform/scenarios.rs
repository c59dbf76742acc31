//! The scenarios, one per handler path the harness crashes.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    Feeder,
    Discover,
    ImportStep,
    Requeuer,
    MonitorSuccess,
    MonitorFailure,
    Reconciler,
    SweeperProcessing,
    SweeperDownload,
    Revalidate,
    Resume,
    Redrive,
    /// A Spot reclaim: the monitor sends the granule back through the retry queue.
    MonitorRetryable,
    /// Events lost; attempt 1 reclaimed by Spot, attempt 2 succeeds: the reconciler routes the
    /// retry and moves the superseded failure log.
    ReconcilerRetryable,
    /// Events lost and SubmitJob's answer lost: the reconciler finds the job by its name.
    ReconcilerLostAnswer,
    /// The feeder's window submitted, every end's event lost: the reconciler finds the ends
    /// through the window's marker and closes it. One job is still running at the first pass,
    /// so the marker keeps the granule already handled.
    ReconcilerWindow,
    /// As above, but the feeder's run failed after recording the job ids and before the item
    /// records (their writes refused): the reconciler's ends make the records, and the next
    /// run's late creation finds them (a record made PROCESSING after its window closed would sit
    /// there with nothing to find it).
    ReconcilerWindowRecordsLate,
    /// Poison inputs: recorded under rejects/ and dead-lettered, never retried.
    PoisonEvent,
    PoisonRetry,
    PoisonImport,
    PoisonRow,
    /// An item record no code can read, found by the sweeper.
    CorruptRecord,
    /// Every download attempt fails (the source sends less than it listed): uploads are
    /// aborted, the item gives up after its attempts.
    DownloadFails,
    /// Two inventories sharing a granule, fed by one run as two windows (one per inventory),
    /// the second read from the page map the first left in the tracker.
    FeederTwoInventories,
    /// As above with array windows: the first window's array is still running, with no item
    /// records (made at its children's ends), when the second window lists its granule again:
    /// only the first window's open claim says the granule is in flight.
    FeederTwoInventoriesArray,
    /// The backfill with item records off: outcomes are the logs and the DLQ alone.
    FeederRecordsOff,
    /// Every attempt reclaimed by Spot: the requeuer meets the last attempt's retry message and
    /// dead-letters it ("attempts exhausted"), abandoning the item.
    RequeuerExhausted,
    /// Every attempt reclaimed by Spot: the requeuer meets the retry message of the attempt
    /// before the last and submits the last chance to the last-attempt (on-demand) queue, whose
    /// job a takeover must look for there.
    RequeuerLastChance,
    /// Array retries (`GRANARY_ARRAY_RETRIES`): both granules of an array window reclaimed by
    /// Spot; the requeuer parks one's retry (the other's comes in the recovery), and the
    /// feeder's schedule submits both as one window of retries.
    RequeuerParks,
    /// Array retries: both granules' retries parked; the feeder's run submits them as one
    /// window of retries, an array job of two children at attempt 2.
    FeederRetryWindow,
    /// A Batch event parked on the events DLQ is moved back by `granary redrive-events`.
    RedriveEvents,
    /// The feeder's run failed after its window's job ids and before their item records, and
    /// the jobs ended: the monitor meets ends with no record, and the feeder's schedule comes
    /// round only after the reconciler and the sweeper have run twice. The monitor makes the
    /// records at their ends; the feeder's late creation must find them and change nothing.
    MonitorBeforeRecords,
    /// As above, and Spot reclaims every first attempt: the retry is submitted, runs and
    /// succeeds before the feeder's schedule comes round, so every record the backfill loop would
    /// make meets a granule further on than the record says (what chaos found in CI).
    RetryBeforeRecords,
    /// The backfill with array windows: the window is one array job, each child's end is
    /// handled from the window claim, the parent's end routes nothing.
    FeederArray,
    /// As above with every event lost: the reconciler describes each child `<parent>:<index>`
    /// and closes the window.
    ReconcilerArrayWindow,
    /// The array window's children ended: the monitor handles a child's event (its granule read
    /// from the window claim).
    MonitorArrayChild,
    /// A second campaign over the same inventory while the first one's jobs still run: the
    /// unnamed campaign's feeder submitted the window, then the stack was switched to campaign
    /// `v2`, whose feeder (under test) submits the same granules again as its own. Spot reclaims
    /// every first attempt, so both campaigns retry. Each campaign must end with one success
    /// per granule in its own state: v2's takeover never adopts v1's job by name, and v1's ends
    /// and retries are handled in v1's state by a stack that now runs v2.
    CampaignSwitch,
    /// The first campaign's jobs ended with every event lost, then the stack was switched to
    /// `v2`: the reconciler (under test) of a stack running v2 finds v1's ends through v1's
    /// open claims and handles them in v1's state.
    CampaignSwitchReconciled,
    /// The first campaign's feeder claimed its window and died with no job submitted (every
    /// SubmitJob refused), then the stack was switched to `v2` and the claim's lease ran out:
    /// that campaign's feeder never comes back to the window, so the reconciler (under test) of
    /// a stack running v2 takes it over — jobs looked up by name, submitted, records made.
    CampaignSwitchHalfWindow,
    /// Array retries: the unnamed campaign's window reclaimed by Spot and both retries parked,
    /// then the stack switched to `v2` before any feeder run took them: v2's feeder (under
    /// test) takes the unnamed campaign's parked retries as that campaign's window of retries,
    /// with that campaign's tracker (`feed_other_campaigns`), and feeds its own window. Each
    /// campaign must end with one success per granule in its own state, nothing left parked.
    CampaignSwitchParked,
    /// The feeder's window submitted and its jobs running; an operator's `granary cancel`
    /// (under test) holds the feeder, records the cancel and terminates both jobs. Batch ends
    /// them with the cancel's reason, the monitor lists them as cancelled, the operator resumes
    /// them (`granary resume --cancelled`) and releases the feeder: each succeeds at attempt 2.
    Cancel,
    /// As above, the cancel made and the jobs ended: the monitor (under test) meets a cancelled
    /// end and lists it for the operator's resume, neither retrying nor dead-lettering it.
    MonitorCancelled,
    /// As above with the ends' events lost: the reconciler (under test) finds the cancelled
    /// ends through the window's marker and lists them.
    ReconcilerCancelled,
    /// Spot took attempt 1 and its retry message waits when an operator's `granary cancel`
    /// holds the feeder: the requeuer (under test) submits nothing, lists the granule as
    /// cancelled and gives it up; the operator resumes it and it succeeds at attempt 2.
    RequeuerHeldBack,
    /// The feeder's window of two granules both fail in the application, with the job
    /// monitor's brake judging from its first end: the monitor (under test) handles an end and
    /// holds the feeder itself — its hold is the last call of the end's handling.
    MonitorBrakes,
    /// Attempt 1 succeeded and the monitor logged it, but every write of its record was refused
    /// past the SDK's retries, so the event failed the monitor until the redrive policy parked
    /// it; then Batch forgot the job. The sweeper (under test) finds the item PROCESSING past
    /// its time with a job Batch does not know: the timed-out end meets the logged success,
    /// nothing is routed, and the record follows the success to PROCESSED.
    SweeperMeetsLoggedSuccess,
    /// As `ReconcilerArrayWindow`, both children ended, and Batch describes the second in a way
    /// no code can read: the reconciler (under test) keeps the description under rejects/ and
    /// dead-letters that granule with why (its record made at its end, as the monitor's would
    /// be), and handles the other's success.
    ReconcilerUndescribable,
}

/// The campaign the campaign scenarios switch to.
pub const SECOND_CAMPAIGN: &str = "v2";

pub const ALL: [Scenario; 47] = [
    Scenario::Feeder,
    Scenario::Discover,
    Scenario::ImportStep,
    Scenario::Requeuer,
    Scenario::MonitorSuccess,
    Scenario::MonitorFailure,
    Scenario::Reconciler,
    Scenario::SweeperProcessing,
    Scenario::SweeperDownload,
    Scenario::Revalidate,
    Scenario::Resume,
    Scenario::Redrive,
    Scenario::MonitorRetryable,
    Scenario::ReconcilerRetryable,
    Scenario::ReconcilerLostAnswer,
    Scenario::ReconcilerWindow,
    Scenario::ReconcilerWindowRecordsLate,
    Scenario::PoisonEvent,
    Scenario::PoisonRetry,
    Scenario::PoisonImport,
    Scenario::PoisonRow,
    Scenario::CorruptRecord,
    Scenario::DownloadFails,
    Scenario::FeederTwoInventories,
    Scenario::FeederTwoInventoriesArray,
    Scenario::FeederRecordsOff,
    Scenario::RequeuerExhausted,
    Scenario::RequeuerLastChance,
    Scenario::RequeuerParks,
    Scenario::FeederRetryWindow,
    Scenario::RedriveEvents,
    Scenario::MonitorBeforeRecords,
    Scenario::RetryBeforeRecords,
    Scenario::FeederArray,
    Scenario::ReconcilerArrayWindow,
    Scenario::MonitorArrayChild,
    Scenario::CampaignSwitch,
    Scenario::CampaignSwitchReconciled,
    Scenario::CampaignSwitchHalfWindow,
    Scenario::CampaignSwitchParked,
    Scenario::Cancel,
    Scenario::MonitorCancelled,
    Scenario::ReconcilerCancelled,
    Scenario::RequeuerHeldBack,
    Scenario::MonitorBrakes,
    Scenario::SweeperMeetsLoggedSuccess,
    Scenario::ReconcilerUndescribable,
];
