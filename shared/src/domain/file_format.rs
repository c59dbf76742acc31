//! What a stored file's first and last bytes must be for the kind of file its name says it is:
//! size and digest prove a file arrived as published, not that the publisher sent the product it
//! names (an HTML error page saved as `scene.tif` has a digest too). Only kinds whose signature
//! is fixed by their specification are checked; any other file passes.
//!
//! - Parquet ("Apache Parquet file format"): the file begins and ends with the magic `PAR1`
//!   (the footer's length sits just before the closing one).
//! - PNG (PNG specification, 5.2 "PNG signature"): `89 50 4E 47 0D 0A 1A 0A`.
//! - TIFF (TIFF 6.0, "Image File Header"): `II` or `MM` byte order, then 42 in that order;
//!   BigTIFF: 43.
//! - JPEG (ITU T.81, B.1.1.2): the SOI marker `FF D8`, then the next marker's `FF`.

/// How many bytes of the file's head and tail [`check`] needs.
pub const SIGNATURE_BYTES: usize = 8;

const PARQUET_MAGIC: &[u8] = b"PAR1";
const PNG_SIGNATURE: &[u8] = &[0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A];
const TIFF_HEADERS: [&[u8]; 4] = [b"II*\0", b"MM\0*", b"II+\0", b"MM\0+"];
const JPEG_START: &[u8] = &[0xFF, 0xD8, 0xFF];

/// Whether `head` and `tail` (the file's first and last [`SIGNATURE_BYTES`], or all of a
/// shorter file) are those of the kind `name`'s extension says; the reason when they are not.
pub fn check(name: &str, head: &[u8], tail: &[u8]) -> Result<(), WrongFileKind> {
    let extension = name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    let (kind, fits) = match extension.as_str() {
        "parquet" => (
            "Parquet",
            head.starts_with(PARQUET_MAGIC) && tail.ends_with(PARQUET_MAGIC),
        ),
        "png" => ("PNG", head.starts_with(PNG_SIGNATURE)),
        "tif" | "tiff" => ("TIFF", TIFF_HEADERS.iter().any(|h| head.starts_with(h))),
        "jpg" | "jpeg" => ("JPEG", head.starts_with(JPEG_START)),
        _ => return Ok(()),
    };
    if fits {
        Ok(())
    } else {
        Err(WrongFileKind {
            name: name.to_owned(),
            kind,
            head: head.to_vec(),
        })
    }
}

/// A file whose first or last bytes are not those of the kind its name says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name} is not a {kind} file: it begins {}", hex(.head))]
pub struct WrongFileKind {
    pub name: String,
    /// The kind its extension names ("PNG", "TIFF", ...).
    pub kind: &'static str,
    /// The file's first bytes, as [`check`] was given them.
    pub head: Vec<u8>,
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_passes_with_its_signature_and_fails_without() {
        let png = [PNG_SIGNATURE, b"IHDR"].concat();
        assert_eq!(check("scene.PNG", &png, &png), Ok(()));
        assert_eq!(
            check("a.parquet", b"PAR1\x15\x04", b"\x10\0\0\0PAR1"),
            Ok(())
        );
        assert_eq!(check("a.tif", b"II*\0\x08\0", b"x"), Ok(()));
        assert_eq!(check("a.tiff", b"MM\0*", b"x"), Ok(()));
        assert_eq!(check("big.tif", b"II+\0", b"x"), Ok(()));
        assert_eq!(check("a.jpeg", &[0xFF, 0xD8, 0xFF, 0xE0], b"x"), Ok(()));
        let page = b"<html><body>503</body></html>";
        for name in ["scene.png", "a.tif", "a.jpg", "a.parquet"] {
            let e = check(name, &page[..8], &page[page.len() - 8..])
                .unwrap_err()
                .to_string();
            assert!(e.contains("is not a") && e.contains("3c 68 74 6d"), "{e}");
        }
        // A Parquet file cut short has its head but not its closing magic.
        assert!(check("a.parquet", b"PAR1\x15\x04", b"\x15\x04\x00\x00").is_err());
        // An empty file is no PNG.
        assert!(check("a.png", b"", b"").is_err());
    }

    #[test]
    fn kinds_without_a_fixed_signature_pass() {
        for name in ["granule.h5", "README", "data.nc", "x.tar.gz"] {
            assert_eq!(check(name, b"anything", b"anything"), Ok(()));
        }
    }
}
