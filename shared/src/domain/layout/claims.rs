//! Claims: `claims/granule_id=<id>/attempt=<n>.json` (one job's claim: a later attempt) and
//! `claims/windows/<inventory key>/start=<row, 12 digits>.json` (a feeder window's), each with its
//! marker under the open-claims prefix at the same relative key.

use crate::domain::granule::{GranuleId, GranuleProcessingEvent};

/// `claims/granule_id=G/attempt=N.json`: all attempts of a granule under one prefix.
pub fn claim_key(prefix: &str, event: &GranuleProcessingEvent) -> String {
    format!(
        "{prefix}granule_id={}/attempt={}.json",
        event.granule_id, event.attempt
    )
}

/// The (granule, attempt) a key made by [`claim_key`] under `prefix` names; `None` for any other key.
pub fn parse_claim_key(prefix: &str, key: &str) -> Option<GranuleProcessingEvent> {
    let rest = key.strip_prefix(prefix)?.strip_prefix("granule_id=")?;
    let (granule, attempt) = rest.rsplit_once("/attempt=")?;
    Some(GranuleProcessingEvent {
        granule_id: GranuleId::parse(granule).ok()?,
        attempt: attempt.strip_suffix(".json")?.parse().ok()?,
    })
}

/// `claims/windows/<inventory key>/start=<row, 12 digits>.json`: one per window, under the claim
/// prefix so the roles that read claims read these too.
pub fn window_key(prefix: &str, inventory: &str, start: u64) -> String {
    format!("{}start={start:012}.json", windows_of(prefix, inventory))
}

/// Where every window claim of `inventory` lives (for `domain::window::RETRY_WINDOWS`, every
/// window of retries).
pub fn windows_of(prefix: &str, inventory: &str) -> String {
    format!("{}{inventory}/", windows_root(prefix))
}

/// Where every window (claim, or open marker) under `prefix` lives.
pub fn windows_root(prefix: &str) -> String {
    format!("{prefix}windows/")
}

/// The (inventory, start) a key made by [`window_key`] under `prefix` names.
pub fn parse_window_key(prefix: &str, key: &str) -> Option<(String, u64)> {
    let rest = key.strip_prefix(prefix)?.strip_prefix("windows/")?;
    let (inventory, start) = rest.rsplit_once("/start=")?;
    let start = start.strip_suffix(".json")?;
    if inventory.is_empty() || start.len() != 12 {
        return None;
    }
    Some((inventory.to_owned(), start.parse().ok()?))
}

/// `claims/cancels/<id>.json`: what `granary cancel` meant to terminate, written before it did.
pub fn cancel_record_key(prefix: &str, id: &str) -> String {
    format!("{prefix}cancels/{id}.json")
}

/// `claims/cancelled/`: the attempts granary's cancel ended, one object each, until
/// `granary resume --cancelled` sends them round again.
pub fn cancelled_prefix(prefix: &str) -> String {
    format!("{prefix}cancelled/")
}

/// `claims/cancelled/granule_id=G/attempt=N.json`; [`parse_claim_key`] with
/// [`cancelled_prefix`] reads it back.
pub fn cancelled_key(prefix: &str, event: &GranuleProcessingEvent) -> String {
    claim_key(&cancelled_prefix(prefix), event)
}

/// Where the requeuer parks retries for the feeder's next window of retries
/// (`GRANARY_ARRAY_RETRIES`): `claims/retries/pending/`.
pub fn parked_prefix(prefix: &str) -> String {
    format!("{prefix}retries/pending/")
}

/// `claims/retries/pending/granule_id=G/attempt=N.json`: a parked retry's marker (its claim, at
/// [`claim_key`], says what it is); [`parse_claim_key`] with [`parked_prefix`] reads it back.
pub fn parked_key(prefix: &str, event: &GranuleProcessingEvent) -> String {
    claim_key(&parked_prefix(prefix), event)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_keys_parse_back() {
        let e = GranuleProcessingEvent {
            granule_id: GranuleId::parse("HLS.L30.T18TYN.2020001T153012.v2.0").unwrap(),
            attempt: 3,
        };
        assert_eq!(
            parse_claim_key("open/", &claim_key("open/", &e)),
            Some(e.clone())
        );
        // A cancelled attempt's key is no claim's, and reads back under its own prefix.
        let cancelled = cancelled_key("claims/", &e);
        assert_eq!(parse_claim_key("claims/", &cancelled), None);
        assert_eq!(
            parse_claim_key(&cancelled_prefix("claims/"), &cancelled),
            Some(e)
        );
        for foreign in [
            "open/x",
            "open/granule_id=g/attempt=x.json",
            "open/granule_id=g/attempt=1",
            "other/granule_id=g/attempt=1.json",
        ] {
            assert_eq!(parse_claim_key("open/", foreign), None, "{foreign}");
        }
    }

    #[test]
    fn window_keys_parse_back_and_sort_by_row() {
        let k = window_key("claims/", "inventories/2024/a.parquet", 400);
        assert_eq!(
            k,
            "claims/windows/inventories/2024/a.parquet/start=000000000400.json"
        );
        assert_eq!(
            parse_window_key("claims/", &k),
            Some(("inventories/2024/a.parquet".to_owned(), 400))
        );
        assert!(k < window_key("claims/", "inventories/2024/a.parquet", 1_000));
        for foreign in [
            "claims/granule_id=g/attempt=1.json",
            "claims/windows/a.parquet/start=12.json",
            "claims/windows//start=000000000400.json",
            "claims/windows/a.parquet/start=000000000400",
        ] {
            assert_eq!(parse_window_key("claims/", foreign), None, "{foreign}");
        }
    }
}
