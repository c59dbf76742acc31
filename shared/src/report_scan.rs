//! `granary report --scan`: the report inputs read straight from the log objects (a LIST of the
//! log prefix and one GET per log), for when Athena is not at hand — the emulator, a small
//! campaign, or a check on Athena's numbers.

use crate::domain::log_key::{LogKey, LogRecord};
use crate::domain::report::LogFact;
use crate::ports::ObjectStore;
use crate::state::{read_json, StateError};
use futures::StreamExt;

/// Reads every log under `prefix`; `progress(done, total)` is called as logs are read. Objects
/// that are not granary logs are skipped with a warning.
pub async fn scan_log_facts(
    store: &dyn ObjectStore,
    prefix: &str,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<Vec<LogFact>, StateError> {
    let listed = store.list(prefix).await?;
    let total = listed.len() as u64;
    let mut done = 0u64;
    let mut facts = Vec::with_capacity(listed.len());
    let mut reads =
        futures::stream::iter(listed.into_iter().filter_map(|meta| {
            match LogKey::parse(prefix, &meta.key) {
                Ok(key) => Some((meta.key, key)),
                Err(e) => {
                    tracing::warn!(error = %e, "not a log; skipped");
                    None
                }
            }
        }))
        .map(|(raw, key)| async move {
            let record = read_json::<LogRecord>(store, &raw).await;
            (key, record)
        })
        .buffered(32);
    while let Some((key, record)) = reads.next().await {
        done += 1;
        progress(done, total);
        let Some(record) = record? else { continue };
        let r = record.value;
        facts.push(LogFact {
            granule_id: key.granule_id.to_string(),
            attempt: key.attempt,
            outcome: key.outcome.as_str().to_owned(),
            platform: key.platform.clone(),
            acquisition_date: key
                .acquisition_date
                .map(|d| d.format("%Y-%m-%d").to_string())
                .unwrap_or_else(|| "unknown".to_owned()),
            reason: r.classification.reason,
            logged_at: r.logged_at.to_rfc3339(),
            superseded: r.superseded.is_some(),
        });
    }
    Ok(facts)
}
