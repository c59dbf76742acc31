//! Container deposits (seed 004): the object arrives as one zip, which the download step stores
//! and then expands into the job's object folder, one stored file per file in the zip, so that
//! processing, recording and the catalog see the object's files as for any other deposit.
//!
//! The zip is read whole into memory and each file decompressed in turn and written with its
//! size and sha256; `GRANARY_INGEST_MAX_CONTAINER_BYTES` bounds the zip *and* everything it
//! expands to (a zip bomb stops at the bound, whatever its headers claim), so the dispatcher's
//! memory holds at most the zip and one file. Expanding again writes the same keys with the same
//! bytes, so a tick that died half-way is simply redone by the next. A zip is the depositor's
//! input: an entry whose path is not a plain relative one (absolute, with `..` or `.`, with a
//! backslash or a control character, or under `.container/`, where the zip itself waits), a
//! name twice, or more than [`MAX_CONTAINER_ENTRIES`] entries fail the job.

use super::Ctx;
use crate::domain::ingest::index::JobId;
use crate::domain::ingest::record::StoredFile;
use bytes::Bytes;
use sha2::{Digest, Sha256};
use std::io::Read;

/// At most this many entries in one container: a zip of a million empty files would otherwise
/// cost a million PUTs within the byte bound.
pub const MAX_CONTAINER_ENTRIES: usize = 10_000;

/// Why a container cannot be expanded (its words become the job's reason).
#[derive(Debug, thiserror::Error)]
pub enum ContainerRefused {
    /// `what`: the zip, or its expanded content; `size` counted so far.
    #[error("the container's {what} is {size} bytes or more, over GRANARY_INGEST_MAX_CONTAINER_BYTES ({max})")]
    TooLarge {
        what: &'static str,
        size: u64,
        max: u64,
    },
    #[error("the container holds {0} entries or more, over {MAX_CONTAINER_ENTRIES}")]
    TooManyEntries(usize),
    #[error(transparent)]
    Store(#[from] crate::ports::StoreError),
    #[error("{0} is missing")]
    Missing(String),
    #[error("not a readable zip: {0}")]
    NotAZip(zip::result::ZipError),
    #[error("zip entry {index}: {source}")]
    Entry {
        index: usize,
        source: zip::result::ZipError,
    },
    #[error("zip entry {name}: {source}")]
    Unreadable {
        name: String,
        source: std::io::Error,
    },
    #[error("zip entry {0:?} would be stored outside the object")]
    UnsafeName(String),
    #[error(
        "the container declares {declared} entries but names only {distinct}: a name is used twice"
    )]
    DuplicateNames { declared: usize, distinct: usize },
    #[error("the container holds no files")]
    Empty,
}

/// Expands the zip stored at `zip_key` into job `job`'s object folder; the files it holds, in
/// the zip's order. `Err` says why, for the job's reason.
pub async fn expand(
    ctx: &Ctx,
    job: &JobId,
    zip_key: &str,
    zip_size: u64,
) -> Result<Vec<StoredFile>, ContainerRefused> {
    let max = ctx.config.ingest.max_container_bytes;
    let over = |what: &'static str, size: u64| ContainerRefused::TooLarge { what, size, max };
    // Before reading it: the size the download measured.
    if zip_size > max {
        return Err(over("zip", zip_size));
    }
    let files = ctx.ingest().files();
    let zip = files
        .container(zip_key)
        .await?
        .ok_or_else(|| ContainerRefused::Missing(zip_key.to_owned()))?
        .body;
    let declared = entries_declared(&zip);
    let mut archive =
        zip::ZipArchive::new(std::io::Cursor::new(zip)).map_err(ContainerRefused::NotAZip)?;
    let entries = declared.unwrap_or(archive.len()).max(archive.len());
    if entries > MAX_CONTAINER_ENTRIES {
        return Err(ContainerRefused::TooManyEntries(entries));
    }
    // The zip crate keeps one entry a name (the last): a zip that declares more entries than
    // it reads names a file twice, and which of them is the object's is anyone's guess.
    if entries > archive.len() {
        return Err(ContainerRefused::DuplicateNames {
            declared: entries,
            distinct: archive.len(),
        });
    }
    let mut stored: Vec<StoredFile> = Vec::new();
    let mut expanded = 0u64;
    for index in 0..archive.len() {
        let (name, body) = {
            let entry = archive
                .by_index(index)
                .map_err(|source| ContainerRefused::Entry { index, source })?;
            if entry.is_dir() {
                continue;
            }
            let name = safe_name(entry.name())?;
            // Never more than what is left of the bound, whatever the entry's header says.
            let left = max - expanded;
            let mut body = Vec::new();
            entry
                .take(left + 1)
                .read_to_end(&mut body)
                .map_err(|source| ContainerRefused::Unreadable {
                    name: name.clone(),
                    source,
                })?;
            expanded += body.len() as u64;
            if expanded > max {
                return Err(over("expanded content", expanded));
            }
            (name, body)
        };
        let key = ctx.ingest().keys.object(job, &name);
        let size = body.len() as u64;
        let sha256 = format!("sha256:{:x}", Sha256::digest(&body));
        files.put_expanded_file(&key, Bytes::from(body)).await?;
        stored.push(StoredFile {
            name,
            key,
            size,
            sha256,
        });
    }
    if stored.is_empty() {
        return Err(ContainerRefused::Empty);
    }
    Ok(stored)
}

/// The number of entries the zip's end-of-central-directory record declares (`None`: no such
/// record found, or a ZIP64 archive, whose count lives elsewhere). APPNOTE.TXT 4.3.16: the
/// record is signature `PK\x05\x06`, 22 bytes and a comment of up to 65,535; the total
/// number of entries is the little-endian u16 at offset 10.
fn entries_declared(zip: &[u8]) -> Option<usize> {
    const RECORD: usize = 22;
    let earliest = zip.len().saturating_sub(RECORD + usize::from(u16::MAX));
    let last = zip.len().checked_sub(RECORD)?;
    let at = (earliest..=last)
        .rev()
        .find(|&i| zip[i..].starts_with(b"PK\x05\x06"))?;
    let count = u16::from_le_bytes([*zip.get(at + 10)?, *zip.get(at + 11)?]);
    (count != u16::MAX).then_some(usize::from(count))
}

/// An entry's name, if it is a plain relative path inside the object (`a/b.txt`): not empty,
/// no backslash (a separator to whoever writes the file to disk later), no control character
/// (a line break in a name would forge lines of a manifest or a log), no `.`, `..` or empty
/// component, not absolute, and not under `.container/`.
fn safe_name(raw: &str) -> Result<String, ContainerRefused> {
    let unsafe_entry = || ContainerRefused::UnsafeName(raw.to_owned());
    if raw.is_empty()
        || raw.contains('\\')
        || raw.starts_with('/')
        || raw.chars().any(char::is_control)
    {
        return Err(unsafe_entry());
    }
    let parts: Vec<&str> = raw.split('/').collect();
    if parts
        .iter()
        .any(|p| p.is_empty() || *p == "." || *p == "..")
        || parts[0] == ".container"
    {
        return Err(unsafe_entry());
    }
    Ok(raw.to_owned())
}

#[cfg(test)]
mod tests {
    use super::safe_name;

    #[test]
    fn only_plain_relative_names_are_safe() {
        for ok in ["a.txt", "pages/b.txt", "deep/er/c.tif", ".hidden"] {
            assert_eq!(safe_name(ok).ok().as_deref(), Some(ok));
        }
        for bad in [
            "../evil",
            "a/../../b",
            "a/../b",
            "..\\..\\x",
            "/etc/passwd",
            "./a",
            "a//b",
            ".container/scans.zip",
            "",
            "a\nb.txt",
            "tab\there",
        ] {
            assert!(safe_name(bad).is_err(), "{bad:?}");
        }
    }
}
