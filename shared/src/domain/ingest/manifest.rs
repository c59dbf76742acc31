//! Depositors' manifests, in the checkm text format: optional `#%` header lines (`#%checkm_0.7`,
//! `#%profile | …`, `#%fields | nfo:fileUrl | nfo:hashAlgorithm | …`, `#%eof`), then one
//! `|`-separated line per entry. Without a `#%fields` line the columns are, in order: URL, digest
//! algorithm, digest value, size, last modified, file name, primary identifier, local identifier.
//!
//! A batch's manifest is one of three kinds, and each object becomes one job:
//! - **files**: each line a file; lines sharing a local identifier are one object, a line without
//!   one is an object of its own;
//! - **manifests** (a manifest of manifests): each line names an object's own files manifest;
//! - **file**: the submission is a single file, one object.
//!
//! A line that cannot be read is not dropped: it becomes an object whose job fails at once with
//! the reason (the depositor's report names it), and the rest of the batch goes on.

use serde::{Deserialize, Serialize};

/// The digest algorithms granary can check while downloading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DigestAlgorithm {
    Md5,
    Sha256,
}

impl DigestAlgorithm {
    pub fn parse(raw: &str) -> Option<Self> {
        match raw.trim().to_ascii_lowercase().replace('-', "").as_str() {
            "md5" => Some(Self::Md5),
            "sha256" => Some(Self::Sha256),
            _ => None,
        }
    }

    fn hex_len(self) -> usize {
        match self {
            Self::Md5 => 32,
            Self::Sha256 => 64,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Digest {
    pub algorithm: DigestAlgorithm,
    /// Lowercase hex.
    pub value: String,
}

/// One file a depositor listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestFile {
    pub url: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<Digest>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// What one job is about, as the manifest gave it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Payload {
    /// An object whose files are known.
    Files { files: Vec<ManifestFile> },
    /// An object whose files are in its own manifest, read when the job starts.
    Manifest { url: String },
    /// An object delivered as one zip: downloaded, then expanded into its files.
    Container { zip: ManifestFile },
    /// What could not be read, and why: the job fails at once.
    Unreadable {
        line: usize,
        input: String,
        why: String,
    },
}

/// One object of a batch: one job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestObject {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_id: Option<String>,
    pub payload: Payload,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ManifestKind {
    Files,
    Manifests,
    File,
    /// The URL is one zip holding the object's files (seed 004's container deposit).
    Container,
}

impl ManifestKind {
    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "files" => Some(Self::Files),
            "manifests" => Some(Self::Manifests),
            "file" => Some(Self::File),
            "container" => Some(Self::Container),
            _ => None,
        }
    }

    /// The kind a manifest's `#%profile` line names (a Merritt-style profile whose name has
    /// `manifest-batch` in it lists manifests); files otherwise.
    pub fn detect(text: &str) -> Self {
        let profile = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("#%profile"))
            .unwrap_or("")
            .to_ascii_lowercase();
        if profile.contains("manifest-batch") {
            Self::Manifests
        } else {
            Self::Files
        }
    }
}

const DEFAULT_FIELDS: [&str; 8] = [
    "fileurl",
    "hashalgorithm",
    "hashvalue",
    "filesize",
    "filelastmodified",
    "filename",
    "primaryidentifier",
    "localidentifier",
];

/// One data line, by column name (`nfo:fileUrl` → `fileurl`).
struct Line<'a> {
    columns: &'a [String],
    values: Vec<&'a str>,
}

impl Line<'_> {
    fn get(&self, name: &str) -> Option<&str> {
        let i = self.columns.iter().position(|c| c == name)?;
        self.values
            .get(i)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
    }
}

fn column_name(raw: &str) -> String {
    let raw = raw.trim();
    raw.rsplit(':').next().unwrap_or(raw).to_ascii_lowercase()
}

/// Why a line of a files manifest cannot be used as a file (its unreadable object's reason).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum UnusableFileLine {
    #[error("no file URL")]
    NoUrl,
    #[error("{0:?} is not an http(s) or s3 URL")]
    NotHttpOrS3(String),
    #[error("digest algorithm {0:?} is not md5 or sha256")]
    UnknownAlgorithm(String),
    #[error("{algorithm} digest {value:?} is not {digits} hex digits")]
    BadDigest {
        /// As the line spells it.
        algorithm: String,
        value: String,
        digits: usize,
    },
    #[error("a digest needs both its algorithm and its value")]
    HalfADigest,
    #[error("size {0:?} is not a number")]
    BadSize(String),
    #[error("no file name, and the URL ends in '/'")]
    NoName,
    #[error("file name {0:?} would leave the object's folder")]
    EscapingName(String),
}

/// Reads one line as a file; `Err(why)` when it cannot be used.
fn file_of(line: &Line) -> Result<ManifestFile, UnusableFileLine> {
    let url = line.get("fileurl").ok_or(UnusableFileLine::NoUrl)?;
    if !(url.starts_with("http://") || url.starts_with("https://") || url.starts_with("s3://")) {
        return Err(UnusableFileLine::NotHttpOrS3(url.to_owned()));
    }
    let digest = match (line.get("hashalgorithm"), line.get("hashvalue")) {
        (None, None) => None,
        (Some(alg), Some(value)) => {
            let algorithm = DigestAlgorithm::parse(alg)
                .ok_or_else(|| UnusableFileLine::UnknownAlgorithm(alg.to_owned()))?;
            let value = value.to_ascii_lowercase();
            if value.len() != algorithm.hex_len() || !value.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(UnusableFileLine::BadDigest {
                    algorithm: alg.to_owned(),
                    value,
                    digits: algorithm.hex_len(),
                });
            }
            Some(Digest { algorithm, value })
        }
        _ => return Err(UnusableFileLine::HalfADigest),
    };
    let size = match line.get("filesize") {
        None => None,
        Some(s) => Some(
            s.parse::<u64>()
                .map_err(|_| UnusableFileLine::BadSize(s.to_owned()))?,
        ),
    };
    let name = match line.get("filename") {
        Some(n) => n.to_owned(),
        None => url
            .rsplit('/')
            .next()
            .filter(|n| !n.is_empty())
            .ok_or(UnusableFileLine::NoName)?
            .to_owned(),
    };
    if name.contains("..") || name.starts_with('/') {
        return Err(UnusableFileLine::EscapingName(name));
    }
    Ok(ManifestFile {
        url: url.to_owned(),
        name,
        digest,
        size,
    })
}

/// Why a text is not a manifest of its kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CorruptManifest {
    #[error("no entries: not a manifest, or an empty one")]
    NoEntries,
    /// A single-file submission's manifest lists this many objects, not one.
    #[error("a single-file submission lists {0} objects")]
    NotOneObject(usize),
}

/// The objects of a manifest of `kind`. Only a text that is not a manifest at all (empty, or no
/// entry line) is an error; bad lines become unreadable objects.
pub fn parse(text: &str, kind: ManifestKind) -> Result<Vec<ManifestObject>, CorruptManifest> {
    let mut columns: Vec<String> = DEFAULT_FIELDS.iter().map(|s| (*s).to_owned()).collect();
    let mut objects: Vec<ManifestObject> = Vec::new();
    let mut entries = 0;
    for (n, raw) in text.lines().enumerate() {
        let trimmed = raw.trim();
        if let Some(header) = trimmed.strip_prefix("#%") {
            if let Some(fields) = header.strip_prefix("fields") {
                columns = fields
                    .split('|')
                    .map(column_name)
                    .filter(|c| !c.is_empty())
                    .collect();
            }
            if header.trim() == "eof" {
                break;
            }
            continue;
        }
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        entries += 1;
        let line = Line {
            columns: &columns,
            values: trimmed.split('|').collect(),
        };
        add_entry(&mut objects, &line, n + 1, trimmed, kind);
    }
    if entries == 0 {
        return Err(CorruptManifest::NoEntries);
    }
    if kind == ManifestKind::File && objects.len() != 1 {
        return Err(CorruptManifest::NotOneObject(objects.len()));
    }
    Ok(objects)
}

/// One entry line of a manifest (line number `line_no`) added to `objects`: a file joins the
/// object its local id names, a line that cannot be read becomes an unreadable object.
fn add_entry(
    objects: &mut Vec<ManifestObject>,
    line: &Line,
    line_no: usize,
    trimmed: &str,
    kind: ManifestKind,
) {
    let local_id = line.get("localidentifier").map(str::to_owned);
    let primary_id = line.get("primaryidentifier").map(str::to_owned);
    let unreadable = |why: String| ManifestObject {
        local_id: local_id.clone(),
        primary_id: primary_id.clone(),
        payload: Payload::Unreadable {
            line: line_no,
            input: trimmed.chars().take(500).collect(),
            why,
        },
    };
    match kind {
        ManifestKind::Manifests => match line.get("fileurl") {
            Some(url) => objects.push(ManifestObject {
                local_id,
                primary_id,
                payload: Payload::Manifest {
                    url: url.to_owned(),
                },
            }),
            None => objects.push(unreadable("no manifest URL".to_owned())),
        },
        // A container deposit's URL is its zip, never a manifest (see [`container`]).
        ManifestKind::Container => objects.push(unreadable(
            "a container deposit is one zip, not a manifest".to_owned(),
        )),
        ManifestKind::Files | ManifestKind::File => match file_of(line) {
            Err(why) => objects.push(unreadable(why.to_string())),
            Ok(file) => {
                let same = local_id.as_ref().and_then(|id| {
                    objects.iter_mut().find(|o| {
                        o.local_id.as_ref() == Some(id)
                            && matches!(o.payload, Payload::Files { .. })
                    })
                });
                match same {
                    Some(ManifestObject {
                        payload: Payload::Files { files },
                        ..
                    }) => files.push(file),
                    _ => objects.push(ManifestObject {
                        local_id,
                        primary_id,
                        payload: Payload::Files { files: vec![file] },
                    }),
                }
            }
        },
    }
}

/// The one object a container deposit makes: the zip at `url`, expanded once downloaded.
pub fn container(url: &str) -> ManifestObject {
    ManifestObject {
        local_id: None,
        primary_id: None,
        payload: Payload::Container {
            zip: ManifestFile {
                url: url.to_owned(),
                name: url.rsplit('/').next().unwrap_or(url).to_owned(),
                digest: None,
                size: None,
            },
        },
    }
}

/// A single file submitted on its own: one object of one file.
pub fn single_file(url: &str, local_id: Option<String>) -> ManifestObject {
    let name = url.rsplit('/').next().unwrap_or(url).to_owned();
    ManifestObject {
        local_id,
        primary_id: None,
        payload: Payload::Files {
            files: vec![ManifestFile {
                url: url.to_owned(),
                name,
                digest: None,
                size: None,
            }],
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MD5: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn files_sharing_a_local_id_are_one_object_and_a_bad_line_is_kept_with_its_reason() {
        let text = format!(
            "#%checkm_0.7\n#%profile | http://uc3.cdlib.org/registry/ingest/manifest/mrt-ingest-manifest\n\
             #%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileName | mrt:localIdentifier\n\
             http://h/a.txt | md5 | {MD5} | 10 | a.txt | loc1\n\
             http://h/b.txt | | | | b.txt | loc1\n\
             http://h/c.txt | sha1 | abc | | c.txt | loc2\n\
             http://h/d.txt | MD5 | {} | 3 | | \n#%eof\nhttp://after/eof | | | | x | y\n",
            MD5.to_uppercase()
        );
        assert_eq!(ManifestKind::detect(&text), ManifestKind::Files);
        let objects = parse(&text, ManifestKind::Files).unwrap();
        assert_eq!(objects.len(), 3);
        let Payload::Files { files } = &objects[0].payload else {
            panic!("{objects:?}")
        };
        assert_eq!(objects[0].local_id.as_deref(), Some("loc1"));
        assert_eq!(files.len(), 2);
        assert_eq!(files[0].size, Some(10));
        assert_eq!(files[1].digest, None);
        let Payload::Unreadable { line, why, .. } = &objects[1].payload else {
            panic!("{objects:?}")
        };
        assert_eq!(*line, 6);
        assert!(why.contains("sha1"), "{why}");
        let Payload::Files { files } = &objects[2].payload else {
            panic!("{objects:?}")
        };
        assert_eq!(files[0].name, "d.txt", "named from its URL");
        assert_eq!(files[0].digest.as_ref().unwrap().value, MD5);
    }

    #[test]
    fn default_columns_and_a_manifest_of_manifests() {
        let plain = format!("http://h/x.dat | md5 | {MD5} | 5 | | x.dat | | L9\n");
        let objects = parse(&plain, ManifestKind::Files).unwrap();
        assert_eq!(objects[0].local_id.as_deref(), Some("L9"));
        let text = "#%profile | http://uc3.cdlib.org/registry/ingest/manifest/mrt-manifest-batch-manifest\n\
                    #%fields | nfo:fileUrl | mrt:localIdentifier\n\
                    http://h/o1.checkm | o1\nhttp://h/o2.checkm | o2\n";
        assert_eq!(ManifestKind::detect(text), ManifestKind::Manifests);
        let objects = parse(text, ManifestKind::Manifests).unwrap();
        assert_eq!(objects.len(), 2);
        assert_eq!(
            objects[1].payload,
            Payload::Manifest {
                url: "http://h/o2.checkm".into()
            }
        );
    }

    #[test]
    fn what_is_not_a_manifest_is_refused_and_unsafe_or_partial_lines_are_unreadable() {
        assert!(parse("", ManifestKind::Files).is_err());
        assert!(parse("#%checkm_0.7\n#%eof\n", ManifestKind::Files).is_err());
        for (line, why) in [
            ("ftp://h/a | | | | a", "not an http"),
            (
                "http://h/a | md5 | | | a",
                "both its algorithm and its value",
            ),
            ("http://h/a | md5 | xyz | | a", "hex digits"),
            ("http://h/a | | | big | a", "not a number"),
            (
                "http://h/a | | | | | ../../etc/passwd",
                "leave the object's folder",
            ),
        ] {
            let objects = parse(line, ManifestKind::Files).unwrap();
            let Payload::Unreadable { why: got, .. } = &objects[0].payload else {
                panic!("{line}: {objects:?}")
            };
            assert!(got.contains(why), "{line}: {got}");
        }
        assert!(parse(
            "http://h/a | | | | a\nhttp://h/b | | | | b\n",
            ManifestKind::File
        )
        .is_err());
        assert_eq!(
            single_file("https://h/p/q.zip", None).payload,
            Payload::Files {
                files: vec![ManifestFile {
                    url: "https://h/p/q.zip".into(),
                    name: "q.zip".into(),
                    digest: None,
                    size: None
                }]
            }
        );
    }
}
