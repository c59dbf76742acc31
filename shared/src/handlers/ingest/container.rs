//! Container deposits (seed 004): the object arrives as one zip, which the download step stores
//! and then expands into the job's object folder, one stored file per file in the zip, so that
//! processing, recording and the catalog see the object's files as for any other deposit.
//!
//! The zip is read whole into memory (`GRANARY_INGEST_MAX_CONTAINER_BYTES` bounds it) and each
//! file decompressed in turn and written with its size and sha256. Expanding again writes the
//! same keys with the same bytes, so a tick that died half-way is simply redone by the next.
//! An entry whose path would leave the folder (absolute, or with `..`) fails the job: a zip is
//! the depositor's input, and "zip slip" is its classic abuse.

use super::Ctx;
use crate::domain::ingest::index::JobId;
use crate::domain::ingest::record::StoredFile;
use crate::ports::PutCondition;
use bytes::Bytes;
use sha2::{Digest, Sha256};
use std::io::Read;

/// Expands the zip stored at `zip_key` into job `job`'s object folder; the files it holds, in
/// the zip's order. `Err` says why, for the job's reason.
pub async fn expand(ictx: &Ctx, job: &JobId, zip_key: &str) -> Result<Vec<StoredFile>, String> {
    let max = ictx.config.ingest.max_container_bytes;
    let zip = ictx
        .store
        .get(zip_key)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("{zip_key} is missing"))?
        .body;
    if zip.len() as u64 > max {
        return Err(format!(
            "the container is {} bytes, over GRANARY_INGEST_MAX_CONTAINER_BYTES ({max})",
            zip.len()
        ));
    }
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(zip))
        .map_err(|e| format!("not a readable zip: {e}"))?;
    let mut stored = Vec::new();
    for i in 0..archive.len() {
        let (name, body) = {
            let mut entry = archive
                .by_index(i)
                .map_err(|e| format!("zip entry {i}: {e}"))?;
            if entry.is_dir() {
                continue;
            }
            let Some(path) = entry.enclosed_name() else {
                return Err(format!(
                    "zip entry {:?} would be stored outside the object",
                    entry.name()
                ));
            };
            let name = path.to_string_lossy().replace('\\', "/");
            let mut body = Vec::with_capacity(usize::try_from(entry.size()).unwrap_or(0));
            entry
                .read_to_end(&mut body)
                .map_err(|e| format!("zip entry {name}: {e}"))?;
            (name, body)
        };
        let key = ictx.ingest().keys.object(job, &name);
        let size = body.len() as u64;
        let sha256 = format!("sha256:{:x}", Sha256::digest(&body));
        ictx.store
            .put(&key, Bytes::from(body), PutCondition::Overwrite)
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
