//! `granary status`: what is left and when it will finish.

use anyhow::{Context, Result};
use chrono::{DateTime, Duration, Utc};
use granary::domain::hold::Hold;
use granary::domain::progress::{eta, rate, Eta, Rate};
use granary::handlers::Ctx;
use granary::ports::{ActiveJobs, QueueDepth};
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct InventoryStatus {
    pub key: String,
    pub submitted: u64,
    /// Known once the feeder has opened the file.
    pub total: Option<u64>,
}

/// A pace and its forecast (`domain::pace`).
#[derive(Debug, Clone, Serialize)]
pub struct PaceStatus {
    pub pace: granary::domain::pace::Pace,
    pub forecast: granary::domain::pace::PaceForecast,
}

#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub at: DateTime<Utc>,
    /// The campaign looked at (`GRANARY_CAMPAIGN`); none: the unnamed one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub campaign: Option<String>,
    pub inventories: Vec<InventoryStatus>,
    pub rows_submitted: u64,
    /// Rows in inventories the feeder has opened; inventories not yet opened count as unknown.
    pub rows_known: u64,
    pub inventories_unopened: usize,
    /// `None` where the endpoint has no AWS Batch (it answered that the API is not implemented).
    pub active_jobs: Option<ActiveJobs>,
    pub retry_queue: QueueDepth,
    pub failure_dlq: QueueDepth,
    pub hold: Option<Hold>,
    /// The campaign's budget and deadline (`granary pace`) and where it stands against them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pace: Option<PaceStatus>,
    /// The queue downstream of granary the feeder is paced by, when one is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub downstream: Option<Downstream>,
    /// Attempts `granary cancel` ended that wait for `granary resume --cancelled`.
    pub cancelled: u64,
    /// Retries the requeuer parked for the feeder's next window of retries
    /// (`GRANARY_ARRAY_RETRIES`).
    pub parked_retries: u64,
    /// Work marked (before its SubmitJob) whose end granary has not yet seen handled, in this
    /// campaign: the open-claims index the reconciler reads.
    pub open_ends: OpenEnds,
    /// The open ends of every other campaign in the bucket that has any: a campaign switched
    /// away from while its jobs ran is still finished by the reconciler, which visits them all.
    pub other_campaigns: Vec<CampaignOpenEnds>,
    /// Why other campaigns' open ends could not be counted (a listing refused, e.g. an
    /// operator's `s3:ListBucket` limited to its own campaign's prefix): the rest of the status
    /// stands without them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_campaigns_error: Option<String>,
    /// Submission rate over the last 1, 6 and 24 hours (when there are samples to tell).
    pub rates: Vec<Rate>,
    /// When the known rows will all have been submitted, at the rate of the longest window with
    /// movement; the last jobs then need their own run time on top.
    pub eta: Option<Eta>,
}

/// The downstream queue as the feeder's next run will find it.
#[derive(Debug, Clone, Serialize)]
pub struct Downstream {
    pub queue_url: String,
    /// Messages available for retrieval (the backlog the gate reads).
    pub waiting: u64,
    pub in_flight: u64,
    pub max_messages: u64,
    /// Why the feeder waits, in its own words (`None`: it feeds).
    pub feeder_waits: Option<String>,
}

/// The open-claims index (`GRANARY_OPEN_CLAIM_PREFIX`) of the campaign looked at: a marker for
/// each feeder window (of first attempts or of retries), written before its SubmitJob, and for
/// each requeued attempt. The monitor removes an attempt's marker once it has logged, routed and
/// recorded its end; a window's stays until a reconciler pass past
/// `GRANARY_RECONCILE_AFTER_SECS` finds every granule in it handled, so a window counts here for
/// a while after its last end. A marker hours old is a window still running (an array waits on
/// its parent), or lost ends being recovered.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct OpenEnds {
    pub windows: u64,
    pub attempts: u64,
    /// The least recent write to a marker (S3's LastModified; no marker is read). A reconciler
    /// pass that keeps a window's progress writes its marker again, so this can be later than
    /// when the window opened.
    pub least_recently_written: Option<DateTime<Utc>>,
}

/// Another campaign's open ends.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CampaignOpenEnds {
    /// Its name; none for the unnamed campaign (as `Status::campaign`).
    pub campaign: Option<String>,
    #[serde(flatten)]
    pub open_ends: OpenEnds,
}

/// The open ends of `ctx`'s campaign: one LIST a thousand markers, none read.
async fn open_ends_in(ctx: &Ctx) -> Result<OpenEnds> {
    let prefix = &ctx.config.layout.open_claim_prefix;
    let markers = ctx
        .store
        .list(prefix)
        .await
        .with_context(|| format!("listing the open-claims index {prefix}"))?;
    Ok(open_ends(prefix, &markers))
}

/// The open ends of every campaign but `ctx`'s that has any, in the order the reconciler
/// visits them (`handlers::campaigns_to_visit`: one delimited LIST of `campaigns/`, then one
/// of each campaign's open-claims index).
pub async fn other_campaigns_open_ends(ctx: &Ctx) -> Result<Vec<CampaignOpenEnds>> {
    let campaigns = granary::handlers::campaigns_to_visit(ctx)
        .await
        .context("listing the campaigns")?;
    let mut out = Vec::new();
    for campaign in campaigns.iter().filter(|c| c.as_ref() != ctx.campaign()) {
        let ends = open_ends_in(&ctx.in_campaign(campaign.as_ref())).await?;
        if ends.windows + ends.attempts > 0 {
            out.push(CampaignOpenEnds {
                campaign: campaign.as_ref().map(|c| c.to_string()),
                open_ends: ends,
            });
        }
    }
    Ok(out)
}

/// Counts the open-claims index's listing under `prefix`: windows and requeued attempts by their
/// keys (other keys are not counted), and the oldest marker's time.
pub fn open_ends(prefix: &str, listed: &[granary::ports::ObjectMeta]) -> OpenEnds {
    use granary::domain::layout::claims::{parse_claim_key, parse_window_key};
    let mut ends = OpenEnds::default();
    for meta in listed {
        if parse_window_key(prefix, &meta.key).is_some() {
            ends.windows += 1;
        } else if parse_claim_key(prefix, &meta.key).is_some() {
            ends.attempts += 1;
        } else {
            continue;
        }
        ends.least_recently_written = match (ends.least_recently_written, meta.last_modified) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    ends
}

/// How many of the newest failure logs `status --watch` reads for its failure reasons.
pub const RECENT_FAILURES: usize = 500;

/// The reasons of the granules failing now (each granule once, its latest failure's), counted
/// over the newest [`RECENT_FAILURES`] logs
/// under `outcome=failure` (a granule that later succeeded has had its failure logs moved under
/// `outcome=success`). `seen` keeps each log's reason across redraws: a log is read once.
pub async fn recent_failure_reasons(
    ctx: &Ctx,
    seen: &mut std::collections::HashMap<String, String>,
) -> Result<Vec<granary::domain::report::ReasonCount>> {
    let prefix = format!("{}outcome=failure/", ctx.config.layout.log_prefix);
    let mut listed = ctx
        .store
        .list(&prefix)
        .await
        .with_context(|| format!("listing {prefix}"))?;
    listed.sort_by_key(|m| std::cmp::Reverse(m.last_modified));
    listed.truncate(RECENT_FAILURES);
    // A granule counts once, under its latest failure's reason (keys sort by attempt).
    listed.sort_by(|a, b| a.key.cmp(&b.key));
    let mut latest: std::collections::BTreeMap<String, String> = Default::default();
    for meta in listed {
        let reason = match seen.get(&meta.key) {
            Some(reason) => reason.clone(),
            None => {
                let read = granary::repositories::read_json::<
                    granary::domain::layout::logs::LogRecord,
                >(ctx.store.as_ref(), &meta.key)
                .await
                .with_context(|| format!("reading {}", meta.key))?;
                // Moved under outcome=success since it was listed: not failing any more.
                let Some(log) = read else { continue };
                let reason =
                    granary::domain::report::mask_instance(&log.value.classification.reason);
                seen.insert(meta.key.clone(), reason.clone());
                reason
            }
        };
        let granule =
            granary::domain::layout::logs::LogKey::parse(&ctx.config.layout.log_prefix, &meta.key)
                .map_or_else(|_| meta.key.clone(), |k| k.granule_id.to_string());
        latest.insert(granule, reason);
    }
    let mut counts: std::collections::BTreeMap<String, u64> = Default::default();
    for reason in latest.into_values() {
        *counts.entry(reason).or_default() += 1;
    }
    let mut reasons: Vec<granary::domain::report::ReasonCount> = counts
        .into_iter()
        .map(|(reason, granules)| granary::domain::report::ReasonCount { reason, granules })
        .collect();
    reasons.sort_by(|a, b| b.granules.cmp(&a.granules).then(a.reason.cmp(&b.reason)));
    Ok(reasons)
}

/// Active jobs are counted up to this many (ListJobs pages of 100).
const COUNT_JOBS_UP_TO: u64 = 100_000;

/// Everything `granary status` shows. `batch` says whether the endpoint has AWS Batch to count
/// active jobs on (see `granary::adapters::aws::batch::endpoint_has_batch`).
pub async fn gather(ctx: &Ctx, now: DateTime<Utc>, batch: bool) -> Result<Status> {
    let tracker = ctx
        .tracker()
        .load()
        .await
        .context("reading the tracker")?
        .value;
    let active_jobs = if batch {
        Some(
            ctx.jobs
                .count_active(COUNT_JOBS_UP_TO)
                .await
                .context("counting active Batch jobs")?,
        )
    } else {
        None
    };
    let retry_queue = ctx.retry_queue.depth().await.context("retry queue depth")?;
    let failure_dlq = ctx.failure_dlq.depth().await.context("failure DLQ depth")?;
    let hold = ctx.hold().read().await.context("reading the hold")?;
    let downstream = match (&ctx.config.feeder.downstream, &ctx.downstream) {
        (Some(gate), Some(queue)) => {
            let depth = queue
                .depth()
                .await
                .with_context(|| format!("downstream queue {} depth", gate.queue_url))?;
            Some(Downstream {
                queue_url: gate.queue_url.clone(),
                waiting: depth.visible,
                in_flight: depth.in_flight,
                max_messages: gate.max_messages,
                feeder_waits: granary::domain::downstream::feeder_waits(gate, depth.visible),
            })
        }
        _ => None,
    };
    let layout = &ctx.config.layout;
    let cancelled = count_under(
        ctx,
        &granary::domain::layout::claims::cancelled_prefix(&layout.claim_prefix),
        "listing cancelled attempts",
    )
    .await?;
    let parked_retries = count_under(
        ctx,
        &granary::domain::layout::claims::parked_prefix(&layout.claim_prefix),
        "listing parked retries",
    )
    .await?;
    let campaign = ctx.campaign().map(|c| c.to_string());
    // Best effort: another campaign's listing refused does not hide this campaign's status.
    let (other_campaigns, other_campaigns_error) = match other_campaigns_open_ends(ctx).await {
        Ok(others) => (others, None),
        Err(e) => (Vec::new(), Some(format!("{e:#}"))),
    };
    let pace = ctx
        .pace()
        .read()
        .await
        .context("reading the pace")?
        .map(|pace| {
            let standing = granary::handlers::feeder::pace_standing(&tracker, now);
            let per_hour = rate(&tracker.samples, now, Duration::hours(24)).map(|r| r.per_hour);
            PaceStatus {
                forecast: granary::domain::pace::forecast(&pace, standing, per_hour),
                pace,
            }
        });
    Ok(Status {
        campaign,
        pace,
        downstream,
        cancelled,
        parked_retries,
        open_ends: open_ends_in(ctx).await?,
        other_campaigns,
        other_campaigns_error,
        ..assemble(&tracker, now, active_jobs, retry_queue, failure_dlq, hold)
    })
}

/// How many objects lie under `prefix` (one LIST a thousand).
async fn count_under(
    ctx: &granary::handlers::Ctx,
    prefix: &str,
    what: &'static str,
) -> Result<u64> {
    Ok(ctx.store.list(prefix).await.context(what)?.len() as u64)
}

/// The pure part: everything but the reads.
pub fn assemble(
    tracker: &granary::domain::tracker::Tracker,
    now: DateTime<Utc>,
    active_jobs: Option<ActiveJobs>,
    retry_queue: QueueDepth,
    failure_dlq: QueueDepth,
    hold: Option<Hold>,
) -> Status {
    let rates: Vec<Rate> = [1, 6, 24]
        .into_iter()
        .filter_map(|h| rate(&tracker.samples, now, Duration::hours(h)))
        .collect();
    let rows_submitted = tracker.rows_submitted();
    let rows_known = tracker.rows_known();
    let remaining: u64 = tracker
        .inventories
        .iter()
        .filter_map(|i| i.remaining())
        .sum();
    let unopened = tracker
        .inventories
        .iter()
        .filter(|i| i.total_rows.is_none())
        .count();
    let best = rates.iter().rev().find(|r| r.per_hour > 0.0);
    let eta = match best {
        Some(r) => eta(remaining, r.per_hour, now),
        None => eta(remaining, 0.0, now),
    };
    Status {
        at: now,
        campaign: None,
        pace: None,
        inventories: tracker
            .inventories
            .iter()
            .map(|i| InventoryStatus {
                key: i.key.clone(),
                submitted: i.rows_submitted,
                total: i.total_rows,
            })
            .collect(),
        rows_submitted,
        rows_known,
        inventories_unopened: unopened,
        active_jobs,
        retry_queue,
        failure_dlq,
        hold,
        downstream: None,
        cancelled: 0,
        parked_retries: 0,
        open_ends: OpenEnds::default(),
        other_campaigns: Vec::new(),
        other_campaigns_error: None,
        rates,
        eta,
    }
}

#[cfg(test)]
mod tests;
