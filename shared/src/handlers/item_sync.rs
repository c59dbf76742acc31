//! Keeps each granule's item record in step with the backfill loop: PROCESSING when its attempt
//! is submitted, PROCESSED / PROCESSING_FAILED when the monitor sees the job end, ABANDONED when
//! the requeuer spends the last attempt. Backfill items enter at READY: the inventory vouches for
//! them. Every step is guarded by the attempt number, so duplicate and late events change nothing.

use super::Ctx;
use crate::domain::granule::GranuleProcessingEvent;
use crate::domain::item::ItemRecord;
use crate::domain::item::NewItem;
use crate::domain::lifecycle::decisions;
use crate::domain::lifecycle::ItemState::{self, *};
use crate::domain::window::WindowClaim;
use crate::repositories::items::Created;
use crate::repositories::json::{Changed, RecordError};

/// Why a backfill granule's record exists.
const LISTED: &str = "listed in an inventory";

/// Why a record made by the monitor exists: its job's end came before its submitter's record.
const ENDED_FIRST: &str = "its job ended before its submitter recorded it";

/// The attempt was submitted as `job_id`: READY (or PROCESSING_FAILED, for a retry) → PROCESSING.
pub async fn submitted(
    ctx: &Ctx,
    event: &GranuleProcessingEvent,
    job_id: &str,
    source: Option<String>,
    by: &str,
) -> Result<(), RecordError> {
    if !ctx.config.layout.track_items {
        return Ok(());
    }
    let result = record_submitted(ctx, event, job_id, source, by).await;
    unless_corrupt(ctx, result).await
}

async fn record_submitted(
    ctx: &Ctx,
    event: &GranuleProcessingEvent,
    job_id: &str,
    source: Option<String>,
    by: &str,
) -> Result<(), RecordError> {
    let items = ctx.items();
    let id = &event.granule_id;
    let attempt = event.attempt;
    let new = NewItem::ready(id.clone(), LISTED, source);
    let submission = [decisions::submission(attempt, job_id)];
    // The common case, a granule's first attempt: READY and PROCESSING in one PUT.
    if attempt == 1 {
        if let Created::New(_) = items.create_along(new.clone(), &submission, by).await? {
            return Ok(());
        }
    }
    // An attempt begins on entering PROCESSING, so PROCESSING with attempt n means n has begun.
    // A retry goes PROCESSING_FAILED → READY → PROCESSING in one write.
    let advance = || items.advance_steps(id, by, |r| decisions::on_submitted(r, attempt, job_id));
    let moved = advance().await?;
    // A later attempt finds its record, made by its first attempt's submitter or by the monitor
    // at that attempt's end; one that does not (both writes lost, or a granule from before
    // records were kept) is made here, counting this attempt's number.
    let moved = match moved {
        Changed::Missing
            if !(attempt > 1 && crate::mutants::on("records-made-only-at-a-first-attempt")) =>
        {
            match items.create_along(new, &submission, by).await? {
                Created::New(_) => return Ok(()),
                Created::Existing(_) => advance().await?,
            }
        }
        moved => moved,
    };
    warn_if_lagging(&moved, event, Processing);
    Ok(())
}

/// A window's first attempts were submitted (`submitted`: each granule's attempt, job and
/// source): the granules without a record get one at PROCESSING, created together with their
/// history as lines of the window's batch objects ([`crate::repositories::items::Items::create_batch`]). Returns, in the same
/// order, whether each record was made here; the others (a record existed, or was unreadable)
/// are for [`submitted`], one by one. With item records off, every one counts as done.
/// `known_absent`: the caller found none of these records just before (see
/// [`crate::repositories::items::Items::create_batch`]).
pub async fn window_submitted(
    ctx: &Ctx,
    window: &WindowClaim,
    submitted: &[(GranuleProcessingEvent, String, String)],
    known_absent: bool,
    by: &str,
) -> Result<Vec<bool>, RecordError> {
    if !ctx.config.layout.track_items {
        return Ok(vec![true; submitted.len()]);
    }
    let new = submitted
        .iter()
        .map(|(event, job_id, source)| {
            let item = NewItem::ready(event.granule_id.clone(), LISTED, Some(source.clone()));
            (item, vec![decisions::submission(1, job_id)])
        })
        .collect();
    let made = ctx
        .items()
        .create_batch(
            &window.history_tag(),
            window.recorded_at(),
            by,
            new,
            crate::repositories::items::BatchCalls {
                at_once: ctx.config.feeder.submit_concurrency,
                known_absent,
            },
            |r| decisions::submission_recorded(r, crate::domain::window::WINDOW_ATTEMPT),
        )
        .await?;
    Ok(made.iter().map(Option::is_some).collect())
}

/// An attempt's end as the monitor handled it: its job, the states its route takes the record
/// along (`decisions::end_states`), the reason, and — for a first attempt of an array window
/// whose record is made at its end — where it was listed (its window claim's key).
pub struct End<'a> {
    pub job_id: &'a str,
    pub ends: &'a [ItemState],
    pub reason: &'a str,
    pub listed_in: Option<&'a str>,
    /// The end's log was there already (a repeated delivery): its record most likely is too.
    pub repeated: bool,
}

/// The monitor saw attempt `event.attempt` end: PROCESSING → along `end.ends`.
pub async fn finished(
    ctx: &Ctx,
    event: &GranuleProcessingEvent,
    end: End<'_>,
    by: &str,
) -> Result<(), RecordError> {
    if !ctx.config.layout.track_items {
        return Ok(());
    }
    let result = record_finished(ctx, event, end, by).await;
    unless_corrupt(ctx, result).await
}

async fn record_finished(
    ctx: &Ctx,
    event: &GranuleProcessingEvent,
    end: End<'_>,
    by: &str,
) -> Result<(), RecordError> {
    let items = ctx.items();
    let attempt = event.attempt;
    let End {
        job_id,
        ends,
        reason,
        listed_in,
        repeated,
    } = end;
    let to = ends.last().copied().unwrap_or(ItemState::ProcessingFailed);
    let advance = || {
        items.advance_steps(&event.granule_id, by, |r| {
            decisions::on_job_finished(r, attempt, job_id, ends, reason)
        })
    };
    let changes = decisions::on_job_finished_unrecorded(attempt, job_id, ends, reason);
    // A first attempt of an array window has no record until now (its window left it to its
    // end): made at once, READY to its end in one conditional PUT, its listing its source. A
    // record there already (a duplicate delivery, the reconciler's recovery) refuses it and is
    // advanced as any record, which changes nothing at the same attempt's end.
    if let Some(claim) = listed_in {
        // A repeated end reads first: a GET where a refused conditional PUT would be billed as
        // a PUT, twelve times as dear (S3 bills 4XX answers in general: "Billing for Amazon S3
        // error responses", S3 user guide). Either order ends with one record at the end state.
        if repeated {
            let moved = advance().await?;
            if !matches!(moved, Changed::Missing) {
                warn_if_lagging(&moved, event, to);
                return Ok(());
            }
        }
        let new = NewItem::ready(event.granule_id.clone(), LISTED, Some(claim.to_owned()));
        if let Created::Existing(_) = items.create_along(new, &changes, by).await? {
            let moved = advance().await?;
            warn_if_lagging(&moved, event, to);
        }
        return Ok(());
    }
    let moved = advance().await?;
    // No record: its submitter has not made it yet (a window's records follow its jobs, and a
    // job — or a first attempt and its retry — can end first). Made here at its end, so that the
    // late creation finds it and changes nothing; a creation that won the race meanwhile is
    // advanced as any record.
    let Changed::Missing = moved else {
        warn_if_lagging(&moved, event, to);
        return Ok(());
    };
    if crate::mutants::on("monitor-leaves-a-missing-record")
        || (attempt > 1 && crate::mutants::on("records-made-only-at-a-first-attempt"))
    {
        warn_if_lagging(&moved, event, to);
        return Ok(());
    }
    let new = NewItem::ready(event.granule_id.clone(), ENDED_FIRST, None);
    if let Created::Existing(_) = items.create_along(new, &changes, by).await? {
        let moved = advance().await?;
        warn_if_lagging(&moved, event, to);
    }
    Ok(())
}

/// The requeuer spent the last attempt: PROCESSING_FAILED → ABANDONED.
/// The requeuer held the next attempt back for a cancel: PROCESSING_FAILED → ABANDONED.
pub async fn held_back(
    ctx: &Ctx,
    event: &GranuleProcessingEvent,
    cancel: &str,
) -> Result<(), RecordError> {
    given_up(ctx, event, |r, attempt| {
        decisions::on_held_back(r, attempt, cancel)
    })
    .await
}

/// The requeuer found the granule's attempt budget spent (`why`, as the budget says it).
pub async fn abandoned(
    ctx: &Ctx,
    event: &GranuleProcessingEvent,
    why: &str,
) -> Result<(), RecordError> {
    given_up(ctx, event, |r, attempt| {
        decisions::on_attempts_spent(r, attempt, why)
    })
    .await
}

/// The requeuer gives the item up as `decide` says (a no-op with item records off).
async fn given_up(
    ctx: &Ctx,
    event: &GranuleProcessingEvent,
    decide: impl Fn(&crate::domain::item::ItemRecord, u32) -> Option<crate::domain::item::Change>,
) -> Result<(), RecordError> {
    if !ctx.config.layout.track_items {
        return Ok(());
    }
    let attempt = event.attempt;
    let moved = ctx
        .items()
        .advance(&event.granule_id, "requeuer", |r| decide(r, attempt))
        .await;
    unless_corrupt(ctx, moved.map(|_| ())).await
}

/// Item records follow the backfill loop; they do not gate it. A record no code can read is
/// recorded under the reject prefix and dead-lettered with its reason, and the loop goes on
/// without it — rather than failing every feeder run or message that touches the granule.
async fn unless_corrupt(ctx: &Ctx, result: Result<(), RecordError>) -> Result<(), RecordError> {
    let Err(RecordError::Repository(crate::repositories::RepositoryError::Corrupt { key, source })) =
        result
    else {
        return result;
    };
    let why = source.to_string();
    match ctx.reject_corrupt_record(&key, &why, "item records").await {
        Ok(_) => {
            tracing::error!(
                key,
                why,
                "corrupt item record set aside; the backfill loop goes on"
            );
            Ok(())
        }
        // Not recorded: fail as before, so the work is retried rather than the record forgotten.
        Err(e) => {
            tracing::warn!(key, error = %e, "corrupt item record could not be recorded");
            Err(RecordError::Repository(
                crate::repositories::RepositoryError::Corrupt { key, source },
            ))
        }
    }
}

fn warn_if_lagging(moved: &Changed<ItemRecord>, event: &GranuleProcessingEvent, wanted: ItemState) {
    match moved {
        Changed::Missing => tracing::warn!(
            granule_id = %event.granule_id, attempt = event.attempt,
            "no item record: it was removed while this event was handled"
        ),
        Changed::Unchanged(r) if r.state != wanted => tracing::info!(
            granule_id = %event.granule_id, attempt = event.attempt, state = %r.state,
            record_attempt = r.attempts.processing, "item record already past this event"
        ),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::domain::granule::GranuleId;
    use crate::domain::layout::items::record_key;
    use crate::ports::PutCondition;

    #[tokio::test]
    async fn a_corrupt_item_record_is_set_aside_and_the_loop_goes_on() {
        let ctx = Ctx::in_memory(Config::for_unit_tests(&[]));
        let id = GranuleId::parse("HLS.L30.T18TYN.2020001T153012.v2.0").unwrap();
        let key = record_key(&ctx.config.layout.item_prefixes.items, &id);
        ctx.store
            .put(
                &key,
                bytes::Bytes::from_static(b"{not json"),
                PutCondition::Overwrite,
            )
            .await
            .unwrap();
        let event = GranuleProcessingEvent {
            granule_id: id,
            attempt: 2,
        };
        submitted(&ctx, &event, "job-1", None, "t").await.unwrap();
        let end = End {
            job_id: "job-1",
            ends: &[Processed],
            reason: "ok",
            listed_in: None,
            repeated: false,
        };
        finished(&ctx, &event, end, "job-monitor").await.unwrap();
        let rejects = ctx
            .store
            .list(&ctx.config.layout.reject_prefix)
            .await
            .unwrap();
        assert_eq!(rejects.len(), 1, "{rejects:?}");
        assert!(rejects[0].key.contains("kind=corrupt_item_record"));
        let dlq = ctx.failure_dlq.receive(10, 30, 0).await.unwrap();
        assert!(!dlq.is_empty());
        assert!(dlq[0].attributes["reason"].contains("not valid JSON"));
    }

    #[tokio::test]
    async fn a_repeated_end_of_an_array_child_reads_its_record_before_writing() {
        use crate::adapters::tap::counting::RequestCounts;
        use std::sync::atomic::Ordering;
        let plain = Ctx::in_memory(Config::for_unit_tests(&[]));
        let counts = std::sync::Arc::new(RequestCounts::default());
        let ctx = plain.tapped(counts.clone());
        let claim = "claims/windows/inv.parquet/start=0.json";
        let end = |repeated| End {
            job_id: "array-1:3",
            ends: &[Processed],
            reason: "ok",
            listed_in: Some(claim),
            repeated,
        };
        let first = GranuleProcessingEvent {
            granule_id: GranuleId::parse("HLS.L30.T18TYN.2020001T153012.v2.0").unwrap(),
            attempt: 1,
        };
        // The first delivery makes the record at its end; a repeat whose first delivery died
        // before the record (its log there) makes it too.
        let died = GranuleProcessingEvent {
            granule_id: GranuleId::parse("HLS.S30.T18TYN.2020001T153012.v2.0").unwrap(),
            attempt: 1,
        };
        finished(&ctx, &first, end(false), "job-monitor")
            .await
            .unwrap();
        finished(&ctx, &died, end(true), "job-monitor")
            .await
            .unwrap();
        for event in [&first, &died] {
            let record = ctx
                .items()
                .get(&event.granule_id)
                .await
                .unwrap()
                .unwrap()
                .value;
            assert_eq!(record.state, Processed);
            assert_eq!(record.source.as_deref(), Some(claim));
        }
        // A repeat where the record is there: one GET, no refused PUT.
        let puts = counts.s3_put.load(Ordering::Relaxed);
        let gets = counts.s3_get.load(Ordering::Relaxed);
        finished(&ctx, &first, end(true), "job-monitor")
            .await
            .unwrap();
        assert_eq!(counts.s3_put.load(Ordering::Relaxed), puts);
        assert_eq!(counts.s3_get.load(Ordering::Relaxed), gets + 1);
        let record = ctx
            .items()
            .get(&first.granule_id)
            .await
            .unwrap()
            .unwrap()
            .value;
        assert_eq!(record.state, Processed);
    }
}
