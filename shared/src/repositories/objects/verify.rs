//! `granary archive verify`: an archive re-checked from a stored copy alone — the signature over
//! `SHA256SUMS` (with the key stored beside it, or one the operator pins), the manifest's own
//! checksum, and every member read back against its checksum and size.

use super::transfer::hash_object;
use crate::domain::archive::manifest::{self, Manifest};
use crate::ports::{ObjectStore, StoreError};
use serde::Serialize;
use std::sync::Arc;

#[derive(Debug, Clone, Default, Serialize)]
pub struct VerifyReport {
    /// `s3://bucket/prefix` of the copy checked.
    pub archive: String,
    pub members_checked: u64,
    pub signature_ok: bool,
    /// The public key the signature was checked with (hex).
    pub public_key: String,
    /// Every mismatch found; empty means the copy is intact.
    pub problems: Vec<String>,
}

impl VerifyReport {
    pub fn intact(&self) -> bool {
        self.signature_ok && self.problems.is_empty()
    }
}

/// Why a file of the archive cannot be read as text (each names the file's key); a problem the
/// report lists.
#[derive(Debug, thiserror::Error)]
enum UnreadableText {
    #[error("{key} is not text")]
    NotText { key: String },
    #[error("{key} is missing")]
    Missing { key: String },
    #[error("{key}: {source}")]
    Store { key: String, source: StoreError },
}

async fn text(store: &dyn ObjectStore, key: &str) -> Result<String, UnreadableText> {
    let key_owned = || key.to_owned();
    match store.get(key).await {
        Ok(Some(o)) => String::from_utf8(o.body.to_vec())
            .map_err(|_| UnreadableText::NotText { key: key_owned() }),
        Ok(None) => Err(UnreadableText::Missing { key: key_owned() }),
        Err(source) => Err(UnreadableText::Store {
            key: key_owned(),
            source,
        }),
    }
}

/// Checks the archive under `prefix` of `store`. `pinned_key` (hex) replaces the stored public
/// key: the stored one proves only that whoever wrote the copy held some key.
pub async fn verify(
    store: Arc<dyn ObjectStore>,
    label: &str,
    prefix: &str,
    pinned_key: Option<&str>,
) -> VerifyReport {
    let mut r = VerifyReport {
        archive: label.to_owned(),
        ..VerifyReport::default()
    };
    let at = |name: &str| format!("{prefix}{name}");
    let sums = match text(store.as_ref(), &at(manifest::SUMS)).await {
        Ok(t) => t,
        Err(e) => {
            r.problems.push(e.to_string());
            return r;
        }
    };
    check_signature(store.as_ref(), prefix, pinned_key, &sums, &mut r).await;
    let listed: std::collections::BTreeMap<String, String> = match manifest::parse_sums(&sums) {
        Ok(lines) => lines.into_iter().map(|(sum, name)| (name, sum)).collect(),
        Err(e) => {
            r.problems.push(format!("{}: {e}", manifest::SUMS));
            return r;
        }
    };
    let manifest_key = at(manifest::MANIFEST);
    let body = match store.get(&manifest_key).await {
        Ok(Some(o)) => o.body,
        Ok(None) => {
            r.problems.push(format!("{manifest_key} is missing"));
            return r;
        }
        Err(e) => {
            r.problems.push(format!("{manifest_key}: {e}"));
            return r;
        }
    };
    if listed.get(manifest::MANIFEST) != Some(&manifest::sha256_hex(&body)) {
        r.problems.push(format!(
            "{} does not match its checksum in {}",
            manifest::MANIFEST,
            manifest::SUMS
        ));
    }
    let manifest: Manifest = match serde_json::from_slice(&body) {
        Ok(m) => m,
        Err(e) => {
            r.problems.push(format!("{manifest_key}: {e}"));
            return r;
        }
    };
    check_members(&store, prefix, &manifest, &listed, &mut r).await;
    if manifest.members.len() + 1 != listed.len() {
        r.problems.push(format!(
            "{} lists {} files, the manifest {} members",
            manifest::SUMS,
            listed.len(),
            manifest.members.len()
        ));
    }
    r
}

/// The checksum file's signature against the pinned key, or the stored one.
async fn check_signature(
    store: &dyn ObjectStore,
    prefix: &str,
    pinned_key: Option<&str>,
    sums: &str,
    r: &mut VerifyReport,
) {
    let at = |name: &str| format!("{prefix}{name}");
    let public = match pinned_key {
        Some(k) => Ok(k.trim().to_owned()),
        None => text(store, &at(manifest::PUBLIC_KEY))
            .await
            .map(|t| t.trim().to_owned()),
    };
    let signature = text(store, &at(manifest::SIGNATURE)).await;
    match (public, signature) {
        (Ok(public), Ok(signature)) => {
            match manifest::verify(&public, sums.as_bytes(), &signature) {
                Ok(()) => r.signature_ok = true,
                Err(e) => r.problems.push(format!("{}: {e}", manifest::SIGNATURE)),
            }
            r.public_key = public;
        }
        (Err(e), _) | (_, Err(e)) => r.problems.push(e.to_string()),
    }
}

/// Each member of the manifest: listed with the same checksum, and stored with its size and
/// SHA-256.
async fn check_members(
    store: &Arc<dyn ObjectStore>,
    prefix: &str,
    manifest: &Manifest,
    listed: &std::collections::BTreeMap<String, String>,
    r: &mut VerifyReport,
) {
    let at = |name: &str| format!("{prefix}{name}");
    for m in &manifest.members {
        if listed.get(&m.name) != Some(&m.sha256) {
            r.problems.push(format!(
                "member {}: the manifest and {} disagree",
                m.name,
                manifest::SUMS
            ));
        }
        let key = at(&m.key());
        match hash_object(store.clone(), &key).await {
            Ok((size, sha)) if size == m.size && sha == m.sha256 => {}
            Ok((size, sha)) => r.problems.push(format!(
                "member {} ({key}): {size} bytes with SHA-256 {sha}, expected {} bytes with {}",
                m.name, m.size, m.sha256
            )),
            Err(e) => r.problems.push(format!("member {} ({key}): {e}", m.name)),
        }
        r.members_checked += 1;
    }
}
