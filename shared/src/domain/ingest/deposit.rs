//! Seed 004's processing step as pure rules: which identifier an object is stored under (the
//! one its record already holds, the one its local id is known by, the depositor's, or a new
//! one minted from EZID), how EZID's ANVL bodies and answers read, and the files the step writes
//! beside the object's own — the ERC record, Dublin Core, and the storage manifest (checkm) that
//! recording reads back.
//!
//! EZID's API (ezid.cdlib.org/doc/apidoc.html, API version 2): `POST /shoulder/<shoulder>`
//! mints an identifier on a shoulder; request and answer bodies are ANVL (`name: value` lines,
//! UTF-8, `text/plain`), in which `%`, `:`, CR and LF are percent-encoded in names and `%`, CR
//! and LF in values; an answer's first line is `success: <identifier>` (a DOI's adds
//! ` | <shadow ark>`) or `error: <reason>`. A mint is not idempotent: the same request sent
//! twice makes two identifiers, so granary writes a claim before it mints and never mints for
//! a job whose claim is not answered (see [`identifier_step`]).

use super::index::JobId;
use super::job::JobState;
use super::record::{Deposit, JobRecord, StoredFile};
use chrono::{DateTime, Utc};

mod identifier;
pub use identifier::{
    anvl, apply_mint_fix, binding_step, identifier_step, mint_answer, mint_metadata, on_stored,
    parse_anvl, rebind, resolve_mint, BindingStep, BoundElsewhere, Holder, IdentifierStep,
    LocalIdBinding, MintAnswerError, MintFix, MintFixRefused, MINT_UNKNOWN,
};

/// The object's folder in storage: `id=<identifier>` (every byte but the unreserved ones
/// percent-encoded, so two identifiers never share a folder), or `job=<job id>` for an object
/// stored without one; each deposit (job) of the object is a version under it
/// (`<object>/<job id>/`), so a later deposit never overwrites an earlier one.
pub fn storage_name(identifier: Option<&str>, job: &str) -> String {
    let object = match identifier {
        Some(id) => format!(
            "id={}",
            crate::domain::percent::encode(id, crate::domain::percent::unreserved)
        ),
        None => format!("job={job}"),
    };
    format!("{object}/{job}")
}

/// The ERC record (Kernel metadata: who, what, when, where) as ANVL. `where` is the object's
/// identifier when the depositor gave none; `(:unav)` marks what is unknown, as ERC does.
pub fn erc_file(deposit: &Deposit, identifier: Option<&str>) -> String {
    let unav = "(:unav)";
    let place = deposit.erc_where.as_deref().or(identifier).unwrap_or(unav);
    let mut body = String::from("erc:\n");
    body.push_str(&anvl(&[
        ("who", deposit.erc_who.as_deref().unwrap_or(unav)),
        ("what", deposit.erc_what.as_deref().unwrap_or(unav)),
        ("when", deposit.erc_when.as_deref().unwrap_or(unav)),
        ("where", place),
    ]));
    body
}

fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The Dublin Core record: creator, title, date from the ERC fields; identifier.
pub fn dublin_core_file(deposit: &Deposit, identifier: Option<&str>) -> String {
    let mut body = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<dc xmlns:dc=\"http://purl.org/dc/elements/1.1/\">\n",
    );
    for (element, value) in [
        ("creator", deposit.erc_who.as_deref()),
        ("title", deposit.erc_what.as_deref()),
        ("date", deposit.erc_when.as_deref()),
        ("identifier", identifier),
    ] {
        if let Some(v) = value {
            body.push_str(&format!(
                "  <dc:{element}>{}</dc:{element}>\n",
                xml_escape(v)
            ));
        }
    }
    body.push_str("</dc>\n");
    body
}

/// The files the processing step writes beside the object's own, under `system/`.
pub const ERC_FILE: &str = "system/mrt-erc.txt";
pub const DUBLIN_CORE_FILE: &str = "system/mrt-dc.xml";
/// The storage manifest, written last: its presence says every file listed in it is stored.
pub const STORAGE_MANIFEST: &str = "system/mrt-manifest.checkm";

/// One line of the storage manifest: a file as stored.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ManifestEntry {
    /// Its key in the store.
    pub key: String,
    pub sha256: String,
    pub size: u64,
    /// Its name in the object (`producer/…` for the depositor's, `system/…` for granary's).
    pub name: String,
}

const MANIFEST_FIELDS: &str =
    "#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileLastModified | nfo:fileName";

/// A key or a name as one checkm column: `%`, `|`, whitespace and control characters
/// percent-encoded (the column separator is ` | `, and readers trim).
fn checkm_field(text: &str) -> String {
    crate::domain::percent::encode(text, |b| b > b' ' && b != b'%' && b != b'|' && b != 0x7f)
}

/// The storage manifest (checkm, as Merritt's HandlerDigest writes it) of `files` stored at
/// `at`, for `identifier`, deposited by `job`.
pub fn storage_manifest(
    identifier: &str,
    job: &str,
    files: &[ManifestEntry],
    at: DateTime<Utc>,
) -> String {
    let mut body = format!(
        "#%checkm_0.7\n#%profile | http://uc3.cdlib.org/registry/ingest/manifest/mrt-ingest-manifest\n#%prefix | granary: | https://github.com/granary\n{MANIFEST_FIELDS}\n#%object | {}\n#%job | {}\n",
        checkm_field(identifier),
        checkm_field(job)
    );
    let when = at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    for f in files {
        body.push_str(&format!(
            "{} | sha256 | {} | {} | {when} | {}\n",
            checkm_field(&f.key),
            f.sha256,
            f.size,
            checkm_field(&f.name)
        ));
    }
    body.push_str("#%eof\n");
    body
}

/// A storage manifest read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageManifest {
    /// The identifier (or job id) the object is stored under.
    pub object: String,
    /// The job whose deposit it is.
    pub job: String,
    pub files: Vec<ManifestEntry>,
}

/// Why a storage manifest cannot be read back (a line's number counts from 1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnreadableStorageManifest {
    #[error("storage manifest line {line}: {columns} columns")]
    Columns { line: usize, columns: usize },
    #[error("storage manifest line {line}: {algorithm}")]
    Algorithm { line: usize, algorithm: String },
    #[error("storage manifest line {line}: size {size:?}")]
    Size { line: usize, size: String },
    #[error("storage manifest has no #%eof: it was cut short")]
    CutShort,
    #[error("storage manifest names no #%object")]
    NoObject,
    #[error("storage manifest names no #%job")]
    NoJob,
}

/// The storage manifest read back; `Err` says which line cannot be read.
pub fn parse_storage_manifest(text: &str) -> Result<StorageManifest, UnreadableStorageManifest> {
    let decode = crate::domain::percent::decode;
    let mut object = None;
    let mut job = None;
    let mut files = Vec::new();
    let mut ended = false;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("#%object |") {
            object = Some(decode(rest.trim()));
            continue;
        }
        if let Some(rest) = line.strip_prefix("#%job |") {
            job = Some(decode(rest.trim()));
            continue;
        }
        if line == "#%eof" {
            ended = true;
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let cols: Vec<&str> = line.split(" | ").map(str::trim).collect();
        let [key, algorithm, sha256, size, _modified, name] = cols[..] else {
            return Err(UnreadableStorageManifest::Columns {
                line: n + 1,
                columns: cols.len(),
            });
        };
        if algorithm != "sha256" {
            return Err(UnreadableStorageManifest::Algorithm {
                line: n + 1,
                algorithm: algorithm.to_owned(),
            });
        }
        let size = size.parse().map_err(|_| UnreadableStorageManifest::Size {
            line: n + 1,
            size: size.to_owned(),
        })?;
        files.push(ManifestEntry {
            key: decode(key),
            sha256: sha256.to_owned(),
            size,
            name: decode(name),
        });
    }
    if !ended {
        return Err(UnreadableStorageManifest::CutShort);
    }
    let object = object.ok_or(UnreadableStorageManifest::NoObject)?;
    let job = job.ok_or(UnreadableStorageManifest::NoJob)?;
    Ok(StorageManifest { object, job, files })
}

/// A stored file's entry under `at` (the object's storage prefix): the depositor's files go
/// under `producer/`.
pub fn producer_entry(file: &StoredFile, at: &str) -> ManifestEntry {
    let name = format!("producer/{}", file.name);
    ManifestEntry {
        key: format!("{at}{name}"),
        // Downloads record digests as the transfer checks them (`sha256:<hex>`).
        sha256: file
            .sha256
            .strip_prefix("sha256:")
            .unwrap_or(&file.sha256)
            .to_owned(),
        size: file.size,
        name,
    }
}

#[cfg(test)]
mod tests;
