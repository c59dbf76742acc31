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
//! - HDF5 (`.h5`, `.hdf5`, `.he5`; HDF5 File Format Specification, II.A "Format Signature and
//!   Superblock", <https://support.hdfgroup.org/archive/support/HDF5/doc/H5.format.html>):
//!   `89 48 44 46 0D 0A 1A 0A` at byte 0, or after a user block at 512, 1024 or 2048. The
//!   specification lets a user block go on doubling (4096, ...), but only the file's first
//!   [`SIGNATURE_BYTES`] are read, so a file whose superblock lies further in is refused: the
//!   HDF5 library writes no user block unless one is asked for (`H5Pset_userblock`), and a
//!   larger one is rarer still.

/// The furthest offset an HDF5 superblock is looked for at (see the module's doc).
const HDF5_LAST_OFFSET: usize = 2048;
/// Where the HDF5 format signature may begin: byte 0, then each user-block size from 512,
/// doubling, up to [`HDF5_LAST_OFFSET`].
const HDF5_OFFSETS: [usize; 4] = [0, 512, 1024, HDF5_LAST_OFFSET];
const HDF5_SIGNATURE: &[u8] = &[0x89, b'H', b'D', b'F', 0x0D, 0x0A, 0x1A, 0x0A];

/// How many bytes of the file's head and tail [`check`] needs: enough to hold an HDF5 signature
/// after the largest user block looked past; every other kind needs only its first 8. The
/// reader keeps this many of each end, so 2 KiB costs nothing beside its 8 MiB reads.
pub const SIGNATURE_BYTES: usize = HDF5_LAST_OFFSET + HDF5_SIGNATURE.len();

/// How many of the file's first bytes a [`WrongFileKind`] keeps to show: its message is stored
/// in the item's history, where 2 KiB of hex would bury the reason, and 16 bytes tell an HTML
/// page, zeros or another format apart.
const SHOWN_BYTES: usize = 16;

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
        "h5" | "hdf5" | "he5" => ("HDF5", hdf5_signature_in(head)),
        _ => return Ok(()),
    };
    if fits {
        Ok(())
    } else {
        Err(WrongFileKind {
            name: name.to_owned(),
            kind,
            head: head[..head.len().min(SHOWN_BYTES)].to_vec(),
        })
    }
}

/// Whether `head` holds the HDF5 format signature at one of [`HDF5_OFFSETS`]. An offset past
/// the end of a short file is simply not there (`get` gives `None`), never a panic.
fn hdf5_signature_in(head: &[u8]) -> bool {
    HDF5_OFFSETS
        .iter()
        .any(|&at| head.get(at..at + HDF5_SIGNATURE.len()) == Some(HDF5_SIGNATURE))
}

/// A file whose first or last bytes are not those of the kind its name says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name} is not a {kind} file: it begins {}", hex(.head))]
pub struct WrongFileKind {
    pub name: String,
    /// The kind its extension names ("PNG", "TIFF", ...).
    pub kind: &'static str,
    /// The file's first bytes, as [`check`] was given them: at most 16, enough to tell what it is.
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
        for name in ["README", "data.nc", "x.tar.gz"] {
            assert_eq!(check(name, b"anything", b"anything"), Ok(()));
        }
    }

    /// A file of `len` zeros but for the HDF5 signature at `at`.
    fn hdf5_with_signature_at(at: usize, len: usize) -> Vec<u8> {
        let mut file = vec![0u8; len];
        file[at..at + HDF5_SIGNATURE.len()].copy_from_slice(HDF5_SIGNATURE);
        file
    }

    fn head_and_tail(file: &[u8]) -> (&[u8], &[u8]) {
        (
            &file[..file.len().min(SIGNATURE_BYTES)],
            &file[file.len().saturating_sub(SIGNATURE_BYTES)..],
        )
    }

    #[test]
    fn an_hdf5_file_passes_with_its_signature_at_0_or_after_a_user_block() {
        for at in HDF5_OFFSETS {
            let file = hdf5_with_signature_at(at, 4096);
            let (head, tail) = head_and_tail(&file);
            for name in ["granule.h5", "granule.HDF5", "granule.he5"] {
                assert_eq!(check(name, head, tail), Ok(()), "{name}, signature at {at}");
            }
        }
        // A file just long enough for its signature after a 512-byte user block.
        let short = hdf5_with_signature_at(512, 520);
        let (head, tail) = head_and_tail(&short);
        assert_eq!(check("granule.h5", head, tail), Ok(()));
    }

    #[test]
    fn an_h5_of_zeros_or_an_error_page_is_no_hdf5_file() {
        let zeros = vec![0u8; 8192];
        let (head, tail) = head_and_tail(&zeros);
        let e = check("granule.h5", head, tail).unwrap_err();
        assert_eq!(e.kind, "HDF5");
        assert_eq!(
            e.to_string(),
            "granule.h5 is not a HDF5 file: it begins \
             00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
        );

        let page = b"<!DOCTYPE html><html><head><title>503 Service Unavailable</title></head>\
                     <body>Service Unavailable</body></html>"
            .repeat(40);
        let (head, tail) = head_and_tail(&page);
        let e = check("granule.h5", head, tail).unwrap_err();
        assert_eq!(
            e,
            WrongFileKind {
                name: "granule.h5".to_owned(),
                kind: "HDF5",
                head: b"<!DOCTYPE html><".to_vec(),
            }
        );
        assert!(e
            .to_string()
            .starts_with("granule.h5 is not a HDF5 file: it begins 3c 21 44 4f 43 54 59 50 45"));
    }

    #[test]
    fn an_hdf5_signature_anywhere_but_its_offsets_does_not_pass() {
        // Not at a user-block boundary: the library would not find it either.
        let off_boundary = hdf5_with_signature_at(100, 4096);
        let (head, tail) = head_and_tail(&off_boundary);
        assert!(check("granule.h5", head, tail).is_err());
        // After a 4096-byte user block: beyond what the check is given, so refused (module doc).
        let far = hdf5_with_signature_at(4096, 8192);
        let (head, tail) = head_and_tail(&far);
        assert!(check("granule.h5", head, tail).is_err());
        // Cut inside its signature, and empty.
        assert!(check("granule.h5", &HDF5_SIGNATURE[..7], &HDF5_SIGNATURE[..7]).is_err());
        assert!(check("granule.h5", b"", b"").is_err());
    }
}
