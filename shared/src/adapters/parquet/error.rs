//! Why an inventory could not be read.

use super::*;

#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error("inventory {key}: {source}")]
    Store {
        key: String,
        #[source]
        source: StoreError,
    },
    #[error("inventory {key} is not a readable Parquet file (truncated or corrupt?): {source}")]
    Parquet {
        key: String,
        #[source]
        source: ParquetError,
    },
    #[error("inventory {key} has no column {column:?} (columns: {found})")]
    NoIdColumn {
        key: String,
        column: String,
        found: String,
    },
    #[error("inventory {key}: column {column:?} is {found}, not a string column")]
    IdColumnType {
        key: String,
        column: String,
        found: String,
    },
    /// The parquet crate asserts on some corrupt metadata (negative column offsets, lengths that
    /// overflow) instead of returning an error; such a panic is caught and reported as this.
    #[error("inventory {key} is corrupt: the Parquet reader gave up with {why:?}")]
    Corrupt { key: String, why: String },
    #[error("inventory {key}: rows {start}..{end} are past its end ({total} rows)")]
    OutOfRange {
        key: String,
        start: u64,
        end: u64,
        total: u64,
    },
}

impl InventoryError {
    /// A read that failed in transit or for its rate: the file itself may be fine.
    pub fn is_transient(&self) -> bool {
        matches!(self, InventoryError::Store { source, .. } if source.is_transient())
    }
}
