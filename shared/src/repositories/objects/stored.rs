//! Whether a stored object is an item's file: present, its registered size, its recorded
//! digest, and the first and last bytes of the kind its name says.

use super::digests::{DigestError, Digests, Found};
use crate::domain::file_format::{self, WrongFileKind, SIGNATURE_BYTES};
use crate::domain::item::ItemRecord;
use crate::ports::{ObjectStore, StoreError};

/// Bytes read per request when a stored file is read through to check it.
const READ_BYTES: u64 = 8 * 1024 * 1024;

/// Why a stored object is not the item's file, or could not be read to tell.
#[derive(Debug, thiserror::Error)]
pub enum InvalidStoredFile {
    #[error("no stored file is recorded")]
    NotRecorded,
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{key} is missing")]
    Missing { key: String },
    /// `size`: the stored object's; `expected`: the item's registered size.
    #[error("{key} holds {size} bytes, expected {expected}")]
    WrongSize {
        key: String,
        size: u64,
        expected: u64,
    },
    #[error("{key} is empty")]
    Empty { key: String },
    #[error("{key} ended at byte {offset} of {size}")]
    EndedEarly { key: String, offset: u64, size: u64 },
    #[error(transparent)]
    Digest(#[from] DigestError),
    #[error(transparent)]
    Format(#[from] WrongFileKind),
}

/// Whether the object at `key` is the item's file: present, the registered size, the recorded
/// digest, and the first and last bytes of the kind its name says (`domain::file_format`). Read
/// in ranges, so a large file never sits in memory whole.
pub(super) async fn check_stored(
    store: &dyn ObjectStore,
    key: &str,
    record: &ItemRecord,
) -> Result<Found, InvalidStoredFile> {
    let listed = store.list(key).await?;
    let Some(meta) = listed.into_iter().find(|m| m.key == key) else {
        return Err(InvalidStoredFile::Missing {
            key: key.to_owned(),
        });
    };
    if let Some(n) = record.size.filter(|n| *n != meta.size) {
        return Err(InvalidStoredFile::WrongSize {
            key: key.to_owned(),
            size: meta.size,
            expected: n,
        });
    }
    if meta.size == 0 {
        return Err(InvalidStoredFile::Empty {
            key: key.to_owned(),
        });
    }
    let mut digests = Digests::new(record.checksum.as_deref());
    let (mut head, mut tail) = (Vec::new(), Vec::new());
    let mut offset = 0;
    while offset < meta.size {
        let end = (offset + READ_BYTES).min(meta.size);
        let chunk = store.get_range(key, offset..end).await?;
        if chunk.is_empty() {
            return Err(InvalidStoredFile::EndedEarly {
                key: key.to_owned(),
                offset,
                size: meta.size,
            });
        }
        offset += chunk.len() as u64;
        digests.update(&chunk);
        let wanted = SIGNATURE_BYTES.saturating_sub(head.len());
        head.extend_from_slice(&chunk[..wanted.min(chunk.len())]);
        tail.extend_from_slice(&chunk[chunk.len().saturating_sub(SIGNATURE_BYTES)..]);
        tail.drain(..tail.len().saturating_sub(SIGNATURE_BYTES));
    }
    let found = digests.finish();
    found.verify(record.checksum.as_deref())?;
    file_format::check(&record.name, &head, &tail)?;
    Ok(found)
}
