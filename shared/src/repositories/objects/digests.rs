//! A file's size and digests as it streams past: SHA-256 always (what granary records), MD5 too
//! when the source published one; and the check of an expected digest against them.

use md5::Md5;
use sha2::{Digest, Sha256};

/// Running digests of a file: always sha256 (what granary records), md5 too when the source
/// published an md5.
pub struct Digests {
    sha256: Sha256,
    md5: Option<Md5>,
    size: u64,
}

/// A file's size and digests, once read to the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub size: u64,
    pub sha256: String,
    pub md5: Option<String>,
}

/// Why a file's digest does not check out (digests as `sha256:<hex>` or `md5:<hex>`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DigestError {
    #[error("digest mismatch: expected {expected}, got {actual}")]
    Mismatch { expected: String, actual: String },
    /// The expected digest is of a kind the file's digests were not computed in.
    #[error("cannot check {expected}: unsupported digest")]
    Unsupported { expected: String },
}

impl Found {
    /// Checks `expected` (`sha256:<hex>` or `md5:<hex>`; `None` checks nothing).
    pub fn verify(&self, expected: Option<&str>) -> Result<(), DigestError> {
        let Some(expected) = expected else {
            return Ok(());
        };
        let actual = if expected.starts_with("md5:") {
            self.md5.as_deref()
        } else {
            Some(self.sha256.as_str())
        };
        match actual {
            Some(a) if a.eq_ignore_ascii_case(expected) => Ok(()),
            Some(a) => Err(DigestError::Mismatch {
                expected: expected.to_owned(),
                actual: a.to_owned(),
            }),
            None => Err(DigestError::Unsupported {
                expected: expected.to_owned(),
            }),
        }
    }
}

impl Digests {
    pub fn new(expected: Option<&str>) -> Self {
        Self {
            sha256: Sha256::new(),
            md5: expected
                .is_some_and(|d| d.starts_with("md5:"))
                .then(Md5::new),
            size: 0,
        }
    }

    pub fn update(&mut self, chunk: &[u8]) {
        self.sha256.update(chunk);
        if let Some(m) = self.md5.as_mut() {
            m.update(chunk);
        }
        self.size += chunk.len() as u64;
    }

    pub fn finish(self) -> Found {
        Found {
            size: self.size,
            sha256: format!("sha256:{:x}", self.sha256.finalize()),
            md5: self.md5.map(|m| format!("md5:{:x}", m.finalize())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_verify_sha256_and_md5() {
        let mut d = Digests::new(Some("md5:900150983cd24fb0d6963f7d28e17f72"));
        d.update(b"ab");
        d.update(b"c");
        let f = d.finish();
        assert_eq!(f.size, 3);
        assert_eq!(
            f.sha256,
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(f
            .verify(Some("md5:900150983cd24fb0d6963f7d28e17f72"))
            .is_ok());
        assert!(f
            .verify(Some(&f.sha256.to_uppercase().replace("SHA256", "sha256")))
            .is_ok());
        assert!(f.verify(None).is_ok());
        let bad = f.verify(Some("sha256:00")).unwrap_err().to_string();
        assert!(bad.starts_with("digest mismatch"), "{bad}");
        let plain = Digests::new(None).finish();
        assert!(plain
            .verify(Some("md5:00"))
            .unwrap_err()
            .to_string()
            .contains("unsupported"));
    }
}
