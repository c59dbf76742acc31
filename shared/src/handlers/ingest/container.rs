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
//! backslash, or under `.container/`, where the zip itself waits) fails the job.

use super::Ctx;
use crate::domain::ingest::index::JobId;
use crate::domain::ingest::record::StoredFile;
use bytes::Bytes;
use sha2::{Digest, Sha256};
use std::io::Read;

/// Expands the zip stored at `zip_key` into job `job`'s object folder; the files it holds, in
/// the zip's order. `Err` says why, for the job's reason.
pub async fn expand(
    ctx: &Ctx,
    job: &JobId,
    zip_key: &str,
    zip_size: u64,
) -> Result<Vec<StoredFile>, String> {
    let max = ctx.config.ingest.max_container_bytes;
    let over = |what: &str, n: u64| {
        format!("the container's {what} is {n} bytes or more, over GRANARY_INGEST_MAX_CONTAINER_BYTES ({max})")
    };
    // Before reading it: the size the download measured.
    if zip_size > max {
        return Err(over("zip", zip_size));
    }
    let files = ctx.ingest().files();
    let zip = files
        .container(zip_key)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("{zip_key} is missing"))?
        .body;
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(zip))
        .map_err(|e| format!("not a readable zip: {e}"))?;
    let mut stored = Vec::new();
    let mut expanded = 0u64;
    for i in 0..archive.len() {
        let (name, body) = {
            let entry = archive
                .by_index(i)
                .map_err(|e| format!("zip entry {i}: {e}"))?;
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
                .map_err(|e| format!("zip entry {name}: {e}"))?;
            expanded += body.len() as u64;
            if expanded > max {
                return Err(over("expanded content", expanded));
            }
            (name, body)
        };
        let key = ctx.ingest().keys.object(job, &name);
        let size = body.len() as u64;
        let sha256 = format!("sha256:{:x}", Sha256::digest(&body));
        files
            .put_expanded_file(&key, Bytes::from(body))
            .await
            .map_err(|e| e.to_string())?;
        stored.push(StoredFile {
            name,
            key,
            size,
            sha256,
        });
    }
    if stored.is_empty() {
        return Err("the container holds no files".to_owned());
    }
    Ok(stored)
}

/// An entry's name, if it is a plain relative path inside the object (`a/b.txt`): not empty,
/// no backslash (a separator to whoever writes the file to disk later), no `.`, `..` or empty
/// component, not absolute, and not under `.container/`.
fn safe_name(raw: &str) -> Result<String, String> {
    let unsafe_entry = || format!("zip entry {raw:?} would be stored outside the object");
    if raw.is_empty() || raw.contains('\\') || raw.starts_with('/') {
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
            assert_eq!(safe_name(ok).as_deref(), Ok(ok));
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
        ] {
            assert!(safe_name(bad).is_err(), "{bad:?}");
        }
    }
}
