//! Poison inputs — an inventory row with an unusable id, an event no delivery can handle, a retry
//! message that is not one, an item record that is not JSON — are set aside one by one so that the
//! rest goes on. Each is first **recorded in S3** (`<reject prefix>kind=<kind>/<hash>.json`: the
//! reason, where it came from and the input itself) and then **dead-lettered** with the reason
//! and the record's key as attributes. S3 keeps what SQS drops after 14 days; the DLQ message is
//! what alarms and operators see.
//!
//! Order and crash points: the record is written with `If-None-Match` under a key derived from the
//! input, so a redelivery after a crash finds it already there and only sends; a crash after the
//! send and before the caller moves on sends the DLQ message again (at least once), never loses it.

pub use crate::domain::poison::RejectKind;
use crate::domain::poison::{hex, RawText};
use crate::ports::{ObjectStore, PutCondition, Queue, QueueError, StoreError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Inputs up to this size are kept whole in the record; larger ones by start, length and hash.
pub const KEPT_WHOLE_BYTES: usize = 256 * 1024;

/// One rejected input, as recorded in S3.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RejectRecord {
    pub kind: RejectKind,
    pub reason: String,
    /// Where it came from: `inventories/a.parquet#row=17`, a queue, a record's key.
    pub source: String,
    pub recorded_at: chrono::DateTime<chrono::Utc>,
    pub input: RawText,
    /// The whole input when it is at most [`KEPT_WHOLE_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_whole: Option<String>,
}

pub use crate::contracts::messages::RejectNotice;

#[derive(Debug, thiserror::Error)]
pub enum RejectError {
    #[error("recording a rejected input: {0}")]
    Store(#[from] StoreError),
    #[error("dead-lettering a rejected input: {0}")]
    Queue(#[from] QueueError),
    #[error(transparent)]
    Encode(#[from] crate::contracts::EncodeError),
}

/// Records `input` under the reject prefix and dead-letters a notice of it. Returns the record's key.
pub async fn reject(
    store: &dyn ObjectStore,
    dlq: &dyn Queue,
    prefix: &str,
    kind: RejectKind,
    reason: &str,
    source: &str,
    input: &str,
) -> Result<String, RejectError> {
    let mut hash = Sha256::new();
    hash.update(source.as_bytes());
    hash.update([0]);
    hash.update(input.as_bytes());
    let id = hex(&hash.finalize()[..16]);
    let key = crate::domain::layout::reject_key(prefix, kind.as_str(), &id);
    let record = RejectRecord {
        kind,
        reason: reason.to_owned(),
        source: source.to_owned(),
        recorded_at: crate::clock::now(),
        input: RawText::of(input),
        input_whole: (input.len() <= KEPT_WHOLE_BYTES).then(|| input.to_owned()),
    };
    let body = crate::contracts::encode("a reject record", &record)?;
    match store.put(&key, body, PutCondition::IfAbsent).await {
        Ok(_) | Err(StoreError::Conflict { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    let notice = RejectNotice {
        rejected: kind,
        reason: reason.to_owned(),
        source: source.to_owned(),
        record_key: key.clone(),
        input: record.input,
    };
    dlq.send(notice.to_message()?).await?;
    tracing::warn!(
        kind = kind.as_str(),
        source,
        reason,
        record_key = key,
        "input rejected: recorded and dead-lettered"
    );
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::memory::{MemoryQueue, MemoryStore};
    use crate::repositories::read_json;

    #[tokio::test]
    async fn a_huge_input_is_recorded_and_noticed_small_and_only_once_in_s3() {
        let (store, dlq) = (MemoryStore::new(), MemoryQueue::new("dlq"));
        let huge = "x".repeat(1_000_000);
        let k1 = reject(
            &store,
            &dlq,
            "rejects/",
            RejectKind::InvalidInventoryRow,
            "too long",
            "inv#row=3",
            &huge,
        )
        .await
        .unwrap();
        let k2 = reject(
            &store,
            &dlq,
            "rejects/",
            RejectKind::InvalidInventoryRow,
            "too long",
            "inv#row=3",
            &huge,
        )
        .await
        .unwrap();
        assert_eq!(k1, k2, "a redelivery finds the same record");
        assert!(k1.starts_with("rejects/kind=invalid_inventory_row/"));
        let rec = read_json::<RejectRecord>(&store, &k1)
            .await
            .unwrap()
            .unwrap()
            .value;
        assert_eq!(rec.input.bytes, 1_000_000);
        assert!(rec.input_whole.is_none());
        let sent = dlq.receive(10, 30, 0).await.unwrap();
        assert_eq!(sent.len(), 2, "the notice is at least once");
        assert!(sent[0].body.len() < 1_000);
        assert_eq!(sent[0].attributes["kind"], "invalid_inventory_row");
        assert_eq!(sent[0].attributes["record_key"], k1);
        let notice: RejectNotice = serde_json::from_str(&sent[0].body).unwrap();
        assert_eq!(notice.reason, "too long");
    }
}
