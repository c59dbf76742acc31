//! Admit: a DOWNLOADED item becomes READY when its file validates, it is eligible (name, not
//! outdated), it belongs to an ACTIVE slot and its prerequisites are there; SKIPPED when it is
//! ineligible or its slot inactive; back to DOWNLOADING_FAILED when its file is corrupt. Missing
//! prerequisites leave it DOWNLOADED, and the message comes back later.

use super::{Ctx, Step};
use crate::domain::granule::GranuleId;
use crate::domain::item::ItemRecord;
use crate::domain::lifecycle::decisions;
use crate::domain::lifecycle::{decide_admission, Admission, AdmissionFacts, ItemState};
use crate::handlers::HandlerError;
use crate::repositories::json::Changed;

const BY: &str = "importer-admit";

/// Why an item's metadata makes it ineligible (SKIPPED, with these words as its reason).
#[derive(Debug, thiserror::Error)]
pub enum Ineligible {
    #[error("name {name:?} does not match GRANARY_ELIGIBLE_PATTERN {pattern}")]
    Name { name: String, pattern: String },
    /// Both times as RFC 3339.
    #[error("outdated: modified {modified} before GRANARY_NOT_BEFORE {not_before}")]
    Outdated {
        modified: String,
        not_before: String,
    },
}

/// What the item's metadata says about eligibility.
pub fn eligibility(ctx: &Ctx, record: &ItemRecord) -> Result<(), Ineligible> {
    let cfg = &ctx.config.importer;
    if !cfg.eligible_pattern.is_match(&record.name) {
        return Err(Ineligible::Name {
            name: record.name.clone(),
            pattern: cfg.eligible_pattern.as_str().to_owned(),
        });
    }
    if let (Some(not_before), Some(modified)) = (cfg.not_before, record.source_modified) {
        if modified < not_before {
            return Err(Ineligible::Outdated {
                modified: modified.to_rfc3339(),
                not_before: not_before.to_rfc3339(),
            });
        }
    }
    Ok(())
}

pub fn slot_of(ctx: &Ctx, record: &ItemRecord) -> Option<String> {
    ctx.config
        .importer
        .slot_pattern
        .captures(&record.name)
        .and_then(|c| c.get(1))
        .map(|m| m.as_str().to_owned())
}

pub async fn admit(ctx: &Ctx, id: &GranuleId) -> Result<ItemState, HandlerError> {
    let items = ctx.items();
    let Some(current) = items.get(id).await? else {
        return Ok(ItemState::Discovered);
    };
    let record = current.value;
    if record.state != ItemState::Downloaded {
        return Ok(record.state);
    }
    let validation = match &record.stored_key {
        Some(key) => ctx
            .objects()
            .check_item_file(key, &record)
            .await
            .map(|_| ()),
        None => Err(crate::repositories::objects::InvalidStoredFile::NotRecorded),
    };
    let facts = AdmissionFacts {
        validation,
        eligibility: eligibility(ctx, &record),
        slot: slot_of(ctx, &record),
        prerequisites: ctx.prerequisites.check(&ctx.objects(), &record).await,
    };
    let admission = decide_admission(&facts, &ctx.config.importer.active_slots);
    let Some(to) = admission.target() else {
        let Admission::Wait(why) = admission else {
            return Ok(record.state);
        };
        return Err(HandlerError::Waiting {
            id: id.to_string(),
            why,
        });
    };
    let reason = match &admission {
        Admission::Ready => match &facts.slot {
            Some(s) => format!("validated; slot {s} is ACTIVE; prerequisites present"),
            None => "validated; prerequisites present".to_owned(),
        },
        Admission::Skip(why) => why.clone(),
        Admission::Corrupt(why) => format!("validation failed: {why}"),
        Admission::Wait(why) => why.clone(),
    };
    let seq = record.seq;
    let moved = items
        .advance(id, BY, |r| decisions::on_admission(r, seq, to, &reason))
        .await?;
    let Changed::Moved(r) = moved else {
        return Ok(moved.record().map_or(ItemState::Downloaded, |r| r.state));
    };
    match r.state {
        ItemState::Ready => ctx.hand_to_processing(&r).await?,
        ItemState::DownloadingFailed => ctx.enqueue(id, Some(Step::Download)).await?,
        _ => {}
    }
    Ok(r.state)
}
