//! What an archive holds and how it proves itself: the manifest (every member by name, SHA-256
//! and size; members are stored under their SHA-256, so a member's key is its checksum), the
//! `SHA256SUMS` list calculated from the re-read members, and its Ed25519 signature.

use ed25519_dalek::{Signature, SignatureError, Signer, SigningKey, Verifier, VerifyingKey};
use hex::FromHexError;
use serde::{Deserialize, Serialize};

/// File names inside an archive (under its prefix at every destination).
pub const MANIFEST: &str = "manifest.json";
pub const SUMS: &str = "SHA256SUMS";
pub const SIGNATURE: &str = "SHA256SUMS.sig";
pub const PUBLIC_KEY: &str = "signing-key.pub";
pub const MEMBERS: &str = "members/";

/// One archived object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// Its name in the archive (the source key below the source prefix).
    pub name: String,
    /// Lowercase hex; the member is stored at `members/<sha256>`.
    pub sha256: String,
    pub size: u64,
}

impl Member {
    pub fn key(&self) -> String {
        format!("{MEMBERS}{}", self.sha256)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub archive: String,
    /// What was archived (`s3://bucket/prefix` or `ingest batch <id>`).
    pub source: String,
    /// In name order.
    pub members: Vec<Member>,
}

impl Manifest {
    pub fn new(archive: &str, source: &str, mut members: Vec<Member>) -> Self {
        members.sort_by(|a, b| a.name.cmp(&b.name));
        members.dedup_by(|a, b| a.name == b.name);
        Self {
            archive: archive.to_owned(),
            source: source.to_owned(),
            members,
        }
    }

    /// The `SHA256SUMS` text (`sha256sum -c` reads it): one line per member, name order, plus
    /// the manifest itself, so the signature covers both.
    pub fn sums(&self, manifest_sha256: &str) -> String {
        let mut out = String::new();
        for m in &self.members {
            out.push_str(&format!("{}  {}\n", m.sha256, m.name));
        }
        out.push_str(&format!("{manifest_sha256}  {MANIFEST}\n"));
        out
    }
}

/// A line of a `SHA256SUMS` text that is not `<64 hex>  <name>` (its number counts from 1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnreadableSums {
    #[error("line {line}: not `<sha256>  <name>`")]
    NoSeparator { line: usize },
    #[error("line {line}: {sum:?} is no SHA-256")]
    NotSha256 { line: usize, sum: String },
}

/// The lines of a `SHA256SUMS` text: (sha256, name). A line that is not `<64 hex>  <name>` is
/// an error naming it.
pub fn parse_sums(text: &str) -> Result<Vec<(String, String)>, UnreadableSums> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(n, line)| {
            let (sum, name) = line
                .split_once("  ")
                .ok_or(UnreadableSums::NoSeparator { line: n + 1 })?;
            if sum.len() != 64 || !sum.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(UnreadableSums::NotSha256 {
                    line: n + 1,
                    sum: sum.to_owned(),
                });
            }
            Ok((sum.to_ascii_lowercase(), name.to_owned()))
        })
        .collect()
}

/// SHA-256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(bytes))
}

/// Bytes as lowercase hex.
pub fn hex_of(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

/// Why a text is no Ed25519 seed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvalidSeed {
    #[error("not hex: {0}")]
    NotHex(#[source] FromHexError),
    /// The seed's length in bytes.
    #[error("{0} bytes, an Ed25519 seed has 32")]
    WrongLength(usize),
}

/// A signing key from its 32-byte seed (as hex, the way it is kept in SSM).
pub fn signing_key(seed_hex: &str) -> Result<SigningKey, InvalidSeed> {
    let bytes = hex::decode(seed_hex.trim()).map_err(InvalidSeed::NotHex)?;
    let seed: [u8; 32] = bytes
        .try_into()
        .map_err(|b: Vec<u8>| InvalidSeed::WrongLength(b.len()))?;
    Ok(SigningKey::from_bytes(&seed))
}

/// The signature of `message` (hex) and the public key that checks it (hex).
pub fn sign(key: &SigningKey, message: &[u8]) -> (String, String) {
    let signature = key.sign(message);
    (
        hex::encode(signature.to_bytes()),
        hex::encode(key.verifying_key().to_bytes()),
    )
}

/// Why a signature does not check out: the key or the signature is unreadable, or they do not
/// fit the message.
#[derive(Debug, thiserror::Error)]
pub enum SignatureCheckFailed {
    #[error("public key: not hex: {0}")]
    PublicKeyNotHex(#[source] FromHexError),
    #[error("public key: not 32 bytes")]
    PublicKeyLength,
    #[error("public key: {0}")]
    PublicKeyInvalid(#[source] SignatureError),
    #[error("signature: not hex: {0}")]
    SignatureNotHex(#[source] FromHexError),
    #[error("signature: not 64 bytes")]
    SignatureLength,
    #[error("the signature does not match the checksums")]
    Mismatch,
}

/// Checks `signature_hex` over `message` with `public_key_hex`.
pub fn verify(
    public_key_hex: &str,
    message: &[u8],
    signature_hex: &str,
) -> Result<(), SignatureCheckFailed> {
    let key: [u8; 32] = hex::decode(public_key_hex.trim())
        .map_err(SignatureCheckFailed::PublicKeyNotHex)?
        .try_into()
        .map_err(|_| SignatureCheckFailed::PublicKeyLength)?;
    let key = VerifyingKey::from_bytes(&key).map_err(SignatureCheckFailed::PublicKeyInvalid)?;
    let signature: [u8; 64] = hex::decode(signature_hex.trim())
        .map_err(SignatureCheckFailed::SignatureNotHex)?
        .try_into()
        .map_err(|_| SignatureCheckFailed::SignatureLength)?;
    key.verify(message, &Signature::from_bytes(&signature))
        .map_err(|_| SignatureCheckFailed::Mismatch)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, body: &[u8]) -> Member {
        Member {
            name: name.into(),
            sha256: sha256_hex(body),
            size: body.len() as u64,
        }
    }

    #[test]
    fn sums_list_every_member_in_name_order_and_read_back() {
        let m = Manifest::new(
            "a1",
            "s3://b/p/",
            vec![member("z", b"z"), member("a", b"a")],
        );
        let text = m.sums(&sha256_hex(b"{}"));
        let read = parse_sums(&text).unwrap();
        let names: Vec<&str> = read.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(names, ["a", "z", MANIFEST]);
        assert_eq!(read[0].0, sha256_hex(b"a"));
        assert!(parse_sums("abc  x\n")
            .unwrap_err()
            .to_string()
            .contains("line 1"));
        assert!(parse_sums("no separator").is_err());
        assert_eq!(m.members[0].key(), format!("members/{}", sha256_hex(b"a")));
    }

    #[test]
    fn a_signature_checks_and_a_flipped_byte_or_another_key_does_not() {
        let key = signing_key(&"07".repeat(32)).unwrap();
        let (sig, public) = sign(&key, b"sums");
        assert!(verify(&public, b"sums", &sig).is_ok());
        assert!(verify(&public, b"sumS", &sig).is_err());
        let other = signing_key(&"08".repeat(32)).unwrap();
        let (forged, _) = sign(&other, b"sums");
        assert!(verify(&public, b"sums", &forged).is_err());
        assert!(signing_key("07").unwrap_err().to_string().contains("32"));
    }
}
