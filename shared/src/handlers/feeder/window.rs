//! One feeder window: its rows read, claimed and submitted once, its item records made.

use super::Ctx;
use super::{FeederSummary, Stop};
use crate::adapters::parquet::{Inventory, InventoryError};
use crate::domain::granule::{GranuleId, IdCell};
use crate::domain::window::WindowClaim;
use crate::handlers::HandlerError;
use crate::repositories::json::RepositoryError;
use crate::repositories::rejects::RejectKind;
use crate::repositories::submission::Screen;
use crate::repositories::windows::WindowOutcome;
use crate::repositories::JobSubmission;

mod records;
pub(super) use records::record_window;

/// How far past the next window a page map reaches: a row group of granary's layout, so a map
/// holds the next row group too and a window across the boundary still needs no footer.
pub(super) const PAGE_MAP_LOOKAHEAD_ROWS: u64 = 128 * 1024;

/// Batch accepts at most 50 SubmitJob calls a second per account, a quota that cannot be raised
/// (AWS Batch User Guide, "AWS Batch service quotas").
pub const BATCH_SUBMITS_PER_SEC: u64 = 50;

/// The most rows one window may hold: what the feeder's SubmitJob rate lets through in a quarter
/// of its timeout — its paced rate (`spacing` between two calls, `GRANARY_SUBMIT_JOB_RATE`), or
/// Batch's quota when unpaced. A larger `granule_submit_count` is fed as several windows, and the
/// run starts no new one after half its time ([`Budget`]): a window never outlives the run that
/// claimed it. Sized for the quota while paced at 20 a second, a window took 187 s and a second
/// one could outlive a 300 s run. Unbounded when the timeout is not known.
pub fn window_ceiling(
    timeout: Option<std::time::Duration>,
    spacing: Option<std::time::Duration>,
) -> u64 {
    let quota = BATCH_SUBMITS_PER_SEC as f64;
    let per_sec = spacing
        .filter(|s| !s.is_zero())
        .map_or(quota, |s| (1.0 / s.as_secs_f64()).min(quota));
    timeout.map_or(u64::MAX, |t| {
        let quarter = (t.as_secs() / 4).max(1) as f64;
        ((quarter * per_sec).floor() as u64).max(1)
    })
}

/// The most rows one window may hold when windows are array jobs: the largest array Batch
/// accepts (10,000 children, AWS Batch user guide, "Array jobs"; a window's granules are at most
/// its rows). Its one SubmitJob leaves the run's time to the window's item records.
pub const ARRAY_WINDOW_ROWS: u64 = *crate::domain::window::ARRAY_SIZES.end() as u64;

/// The current inventory, from the tracker's page map when it covers the window (no request),
/// otherwise from the file's footer and index; `true` when the file was opened.
pub(super) async fn open_inventory(
    ctx: &Ctx,
    current: &crate::domain::tracker::InventoryProgress,
    count: u64,
) -> Result<(Inventory, bool), InventoryError> {
    let column = &ctx.config.feeder.inventory_id_column;
    if let Some(map) = current
        .page_map
        .as_ref()
        .filter(|m| m.covers(current.rows_submitted, count))
    {
        match ctx.inventories().from_page_map(&current.key, column, map) {
            Ok(inventory) => return Ok((inventory, false)),
            Err(e) => {
                tracing::warn!(inventory = current.key, error = %e, "the tracker's page map is unreadable; opening the file")
            }
        }
    }
    let inventory = ctx.inventories().open(&current.key, column).await?;
    Ok((inventory, true))
}

/// Feeds one window: rows `start ..` of the inventory (`ids`). Invalid rows are set aside; the
/// distinct valid granules are submitted at attempt 1 under one window claim
/// (`repositories::windows`), then their item records follow. Returns how many rows are settled
/// (all of the window's, or none: the window's next run redoes it through its claim) and why it
/// stopped short, if it did.
pub(super) async fn feed_window(
    ctx: &Ctx,
    inventory_key: &str,
    start: u64,
    ids: &[IdCell],
    summary: &mut FeederSummary,
) -> Result<(u64, Option<Stop>), HandlerError> {
    let rows = ids.len() as u64;
    let WindowRows {
        granules,
        first_row,
        repeated,
        unusable,
    } = window_rows(ids, start);
    summary.repeated += repeated;
    // Set aside before the window is claimed: a crash in between sends a notice twice (rejects
    // are at least once), never none.
    if let Some(stop) = set_aside(ctx, inventory_key, start, ids, unusable, summary).await {
        return Ok((0, Some(stop)));
    }
    let granules = match to_submit(ctx, inventory_key, start, granules, summary).await {
        Ok(granules) => granules,
        Err(stop) => return Ok((0, Some(stop))),
    };
    let window = first_attempts_window(ctx, inventory_key, start, rows, granules);
    let screen = KnownRecords {
        ctx,
        inventory_key,
        known: 0.into(),
        looked: false.into(),
    };
    let outcome = ctx.windows().submit(window, Some(&screen)).await?;
    summary.known_before += screen.known.into_inner();
    let looked_for_records = screen.looked.into_inner();
    let (claim, submissions) = match outcome {
        WindowOutcome::InFlight { claim } => {
            return Ok((
                0,
                Some(Stop::Wait(format!(
                    "rows {}..{} of {inventory_key} are claimed by a run still in flight",
                    claim.start,
                    claim.start + claim.rows
                ))),
            ))
        }
        WindowOutcome::Worked { claim, jobs } => (claim, jobs),
    };
    let mut stop = count_submissions(ctx, inventory_key, &claim, &submissions, summary);
    // The item records follow the claim (an earlier run may have died before them).
    // A window looked at now had its granules looked for (none it kept had a record). An
    // array window's records are then made without reading them again. A single job can end
    // while its window is still being submitted, and the job monitor then makes its record
    // (`item_sync`): those are read first, since a blind write into one costs a refused PUT
    // and the one-by-one path (about two PUTs more a granule where jobs are short; a GET costs
    // a twelfth of a PUT).
    let recorded = record_window(
        ctx,
        inventory_key,
        &claim,
        &submissions,
        &first_row,
        looked_for_records && claim.array,
    )
    .await;
    if let Some(failed) = recorded {
        stop.get_or_insert(failed);
    }
    Ok(if stop.is_none() {
        (claim.rows, None)
    } else {
        (0, stop)
    })
}

/// Sets the window's unusable rows aside, one by one; `Some(stop)` at the first that cannot be.
async fn set_aside(
    ctx: &Ctx,
    inventory_key: &str,
    start: u64,
    ids: &[IdCell],
    unusable: Vec<(u64, String)>,
    summary: &mut FeederSummary,
) -> Option<Stop> {
    for (row, why) in unusable {
        let raw = &ids[(row - start) as usize];
        if let Err(e) = reject(ctx, inventory_key, row, raw.text(), &why).await {
            return Some(Stop::Fail(format!("row {row} of {inventory_key}: {e}")));
        }
        summary.rejected += 1;
    }
    None
}

/// The window's granules less those an open window of first attempts holds (another
/// inventory's, in flight); `Err(stop)` when the look failed. A window claimed before (a run
/// redoing it) is worked as its claim says, and is not looked at again.
async fn to_submit(
    ctx: &Ctx,
    inventory_key: &str,
    start: u64,
    granules: Vec<GranuleId>,
    summary: &mut FeederSummary,
) -> Result<Vec<GranuleId>, Stop> {
    if !ctx.config.layout.track_items {
        return Ok(granules);
    }
    let claimed = match ctx.windows().claimed(inventory_key, start).await {
        Ok(claimed) => claimed,
        Err(e) => {
            return Err(Stop::Fail(format!(
                "looking for the claim of rows {start}.. of {inventory_key}: {e}"
            )))
        }
    };
    if claimed {
        return Ok(granules);
    }
    not_in_open_windows(ctx, inventory_key, start, granules, summary).await
}

/// The granules no open window of first attempts holds; the others are counted as known
/// before. `Err(stop)` when the look failed.
async fn not_in_open_windows(
    ctx: &Ctx,
    inventory_key: &str,
    start: u64,
    granules: Vec<GranuleId>,
    summary: &mut FeederSummary,
) -> Result<Vec<GranuleId>, Stop> {
    // A granule of an open array window may have no record until its child ends, one of a
    // single-job window none until its run records it. The open windows are read before the
    // window's look at the records (`KnownRecords`, after its claim): a window closed in
    // between closed only once its granules' records were made, so each granule is found in
    // one look or the other.
    let open = match ctx
        .windows()
        .in_open_windows(&ctx.open_windows, &granules)
        .await
    {
        Ok(open) => open,
        Err(e) => {
            return Err(Stop::Fail(format!(
                "looking at the open windows before rows {start}.. of {inventory_key}: {e}"
            )))
        }
    };
    if let Some((inventory, at, e)) = open.unreadable.first() {
        return Err(Stop::Fail(format!(
            "the claim of the open window at row {at} of {inventory} cannot be read: {e}"
        )));
    }
    if crate::mutants::on("feeder-ignores-open-windows") {
        return Ok(granules);
    }
    let (held, fresh): (Vec<GranuleId>, Vec<GranuleId>) = granules
        .into_iter()
        .partition(|g| open.in_flight.contains(g));
    for granule in &held {
        tracing::info!(granule_id = %granule, inventory = inventory_key, "in an open window already: not submitted again");
    }
    summary.known_before += held.len() as u64;
    Ok(fresh)
}

/// The feeder's look at a window's granules among the item records, made once the window is
/// marked open and before its jobs (`WindowClaim::screen_pending`): a granule granary has a
/// record for was listed before (an earlier window, another inventory) or found by the
/// importer, and is on its way. The importer's discovery creates its record and reads the open
/// windows after (`importer::discover`), so one of the two sees the other: a file both listed
/// and discovered is submitted once (docs/guarantees.md).
struct KnownRecords<'a> {
    ctx: &'a Ctx,
    inventory_key: &'a str,
    /// Granules found known and dropped from the window.
    known: std::sync::atomic::AtomicU64,
    /// Whether this run made the look (and found no record for the granules it kept).
    looked: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl Screen<WindowClaim> for KnownRecords<'_> {
    async fn screen(&self, claim: &WindowClaim) -> Result<WindowClaim, RepositoryError> {
        use std::sync::atomic::Ordering::Relaxed;
        let found = self.ctx.items().exist(&claim.granules).await?;
        let known: std::collections::HashSet<GranuleId> = claim
            .granules
            .iter()
            .zip(found)
            .filter(|(_, known)| *known && !crate::mutants::on("feeder-submits-known-granules"))
            .map(|(g, _)| g.clone())
            .collect();
        for granule in &known {
            tracing::info!(granule_id = %granule, inventory = self.inventory_key, "already known to granary (listed before, or imported): not submitted again");
        }
        self.known.fetch_add(known.len() as u64, Relaxed);
        self.looked.fetch_or(true, Relaxed);
        Ok(claim.without(&known))
    }
}

/// The claim of a window of first attempts: rows `start..start + rows` of the inventory.
fn first_attempts_window(
    ctx: &Ctx,
    inventory_key: &str,
    start: u64,
    rows: u64,
    granules: Vec<GranuleId>,
) -> WindowClaim {
    WindowClaim::new(
        ctx.campaign(),
        inventory_key,
        start,
        rows,
        granules,
        "queue-feeder",
        crate::clock::now(),
    )
    .in_array(ctx.config.feeder.array_windows)
    // Its granules looked for among the item records once it is marked open (`KnownRecords`).
    .with_screen(ctx.config.layout.track_items)
    // An array window's first attempts get their item records at their children's ends, one
    // write a granule instead of two (BENCHMARKS.md); a claim from an older release that made
    // them at submission is still read as it says (`WindowClaim::records_at_end`).
    .with_records_at_end(true)
}

/// Counts the window's submissions into the summary and the metrics; `Some(stop)` naming the
/// first granule not submitted.
fn count_submissions(
    ctx: &Ctx,
    inventory_key: &str,
    claim: &WindowClaim,
    submissions: &[JobSubmission],
    summary: &mut FeederSummary,
) -> Option<Stop> {
    let mut stop = None;
    let mut submitted_here = 0;
    for (granule, submission) in claim.granules.iter().zip(submissions) {
        match submission {
            JobSubmission::Submitted { .. } => {
                submitted_here += 1;
                summary.submitted += 1
            }
            JobSubmission::AlreadySubmitted { .. } => summary.already_submitted += 1,
            // A job a dead run submitted, found now: that run never counted it.
            JobSubmission::Recovered { .. } => {
                submitted_here += 1;
                summary.recovered += 1
            }
            JobSubmission::NotSubmitted { error, .. } => {
                tracing::error!(granule_id = %granule, error, "granule not submitted");
                stop.get_or_insert_with(|| {
                    Stop::Fail(format!(
                        "{granule} of {inventory_key} not submitted: {error}"
                    ))
                });
            }
        }
    }
    // Counted as they happen: a run that stops later (a refused call) submitted them all the same.
    use crate::domain::metrics::Metric;
    ctx.metrics
        .count(Metric::GranulesSubmitted, &[], submitted_here);
    if submitted_here > 0 {
        ctx.metrics
            .observe(Metric::FeederWindowSize, &[], submitted_here as f64);
    }
    stop
}

/// Finishes a window another run claimed and left half-submitted, from its claim alone (no
/// inventory read): the takeover the feeder's next run would make, taken by the reconciler for
/// a campaign the stack no longer feeds (`domain::campaign`), whose feeder never comes back to
/// the window. The one submission protocol decides: while the claim's lease runs it is left
/// (`Ok(false)`); past it the claim is taken over, its unrecorded jobs looked up by name and
/// the missing ones submitted, then the window's item records made. `Ok(true)` once every
/// granule's job and record are there.
pub async fn finish_claimed_window(ctx: &Ctx, found: &WindowClaim) -> Result<bool, HandlerError> {
    // The claim as found is worked as it says (the submission protocol reads it back): this
    // copy only names its key and carries the taker's lease.
    let redo = WindowClaim::new(
        found.campaign.as_ref(),
        &found.inventory,
        found.start,
        found.rows,
        found.granules.clone(),
        "reconciler (a window its campaign's feeder left)",
        crate::clock::now(),
    )
    .in_array(found.array)
    .with_records_at_end(found.records_at_end)
    // Made afresh only if an operator removed the claim meanwhile: its look still to make.
    .with_screen(found.screen_pending);
    let screen = KnownRecords {
        ctx,
        inventory_key: &found.inventory,
        known: 0.into(),
        looked: false.into(),
    };
    let (claim, submissions) = match ctx.windows().submit(redo, Some(&screen)).await? {
        WindowOutcome::InFlight { .. } => return Ok(false),
        WindowOutcome::Worked { claim, jobs } => (claim, jobs),
    };
    let submitted = submissions.iter().all(|s| s.job_id().is_some());
    let here = submissions
        .iter()
        .filter(|s| {
            matches!(
                s,
                JobSubmission::Submitted { .. } | JobSubmission::Recovered { .. }
            )
        })
        .count();
    let granules = crate::domain::metrics::Metric::GranulesSubmitted;
    ctx.metrics.count(granules, &[], here as u64);
    let recorded = record_window(
        ctx,
        &claim.inventory,
        &claim,
        &submissions,
        &std::collections::HashMap::new(),
        false,
    )
    .await
    .is_none();
    Ok(submitted && recorded)
}

/// A window's rows, sorted: its distinct granules in row order, the first row each was listed
/// at, how many rows named a granule listed earlier in the window, and the rows no granule can be
/// made of (with why).
#[derive(Debug, Default, PartialEq)]
pub(super) struct WindowRows {
    pub(super) granules: Vec<GranuleId>,
    pub(super) first_row: std::collections::HashMap<GranuleId, u64>,
    pub(super) repeated: u64,
    pub(super) unusable: Vec<(u64, String)>,
}

/// Sorts the rows of the window starting at row `start` (pure: no call is made).
pub(super) fn window_rows(ids: &[IdCell], start: u64) -> WindowRows {
    let mut out = WindowRows::default();
    for (i, raw) in ids.iter().enumerate() {
        let row = start + i as u64;
        match raw.granule() {
            Ok(id) => match out.first_row.entry(id.clone()) {
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(row);
                    out.granules.push(id);
                }
                std::collections::hash_map::Entry::Occupied(_) => out.repeated += 1,
            },
            Err(why) => out.unusable.push((row, why.to_string())),
        }
    }
    out
}

/// An unusable row is recorded and dead-lettered (quoted by start, length and hash however long
/// it is, so the notice always fits in a message), and the feed goes on past it.
async fn reject(
    ctx: &Ctx,
    inventory_key: &str,
    row: u64,
    raw: Option<&str>,
    why: &str,
) -> Result<(), HandlerError> {
    let source = format!("{inventory_key}#row={row}");
    let reason = format!("invalid granule id: {why}");
    ctx.reject(
        RejectKind::InvalidInventoryRow,
        &reason,
        &source,
        raw.unwrap_or(""),
    )
    .await?;
    Ok(())
}
