//! An append-only scratch file for the twins' bulk bytes (object bodies, job details): written
//! once, read back by position. A twin that keeps a million granules' logs and job details in
//! memory would need gigabytes; in a scratch file they cost disk, and the page cache holds them
//! or drops them as the machine allows.
//!
//! Each entry is compressed on its own (Snappy) so that it can still be read back alone: the
//! twins' bytes are JSON (logs, item records, job details, history lines), which shrink several
//! times over, and uncompressed a ten-million-granule campaign would spill ~84 GB
//! (BENCHMARKS.md). An entry that does not shrink by an eighth is kept as it is: a partial read
//! of a compressed entry unpacks all of it, and what does not shrink is mostly compressed already
//! (Parquet inventories, read a page range at a time).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;

/// Where a run of bytes was put.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spilled {
    pub offset: u64,
    /// The entry's own length (what a reader gets back).
    pub len: u32,
    /// Its bytes in the file: fewer than `len` when compressed, `len` when kept as it is.
    pub stored: u32,
}

impl Spilled {
    fn compressed(&self) -> bool {
        self.stored < self.len
    }
}

/// Appends gather here and reach the file a mebibyte at a time: one write call per object
/// spent more CPU in the kernel than the twin spent on the object (perf, a 100,000-granule
/// campaign: 13% in pwrite).
const FLUSH_AT: usize = 1 << 20;

/// A framed entry's header: its length and its stored length, four bytes each.
const FRAME: u64 = 8;

pub struct ScratchFile {
    file: File,
    tail: Mutex<Tail>,
}

thread_local! {
    /// Each thread's Snappy encoder (its hash table, made once a thread on first use): threads
    /// compress side by side, outside the tail's lock.
    static PACK: std::cell::RefCell<snap::raw::Encoder> =
        std::cell::RefCell::new(snap::raw::Encoder::new());
}

/// `bytes` compressed, or `None` when that does not make them smaller. Snappy, not zstd: the
/// twins compress every object a campaign writes, most of them a few kilobytes, and zstd (level
/// 1, then -1) spent 16%, then ~12% of a million-granule campaign's CPU (perf), much of it
/// building entropy tables for each small entry; Snappy has no entropy stage (BENCHMARKS.md,
/// "Ten million inside fifteen minutes").
fn packed(bytes: &[u8]) -> io::Result<Option<Vec<u8>>> {
    PACK.with(|cell| {
        let mut out = vec![0; snap::raw::max_compress_len(bytes.len())];
        Ok(match cell.borrow_mut().compress(bytes, &mut out) {
            Ok(n) if n <= bytes.len() - bytes.len() / 8 => {
                out.truncate(n);
                Some(out)
            }
            // Not an eighth smaller (or Snappy could not): kept as it is. Bytes compressed
            // already (the Parquet inventories) stay readable by range without unpacking the
            // whole entry, which a compressed entry needs for every partial read.
            _ => None,
        })
    })
}

/// The `len` bytes `packed` holds.
fn unpacked(packed: &[u8], len: usize) -> io::Result<Vec<u8>> {
    let mut out = vec![0; len];
    let n = snap::raw::Decoder::new()
        .decompress(packed, &mut out)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    if n != len {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a scratch entry of {len} bytes unpacked to {n}"),
        ));
    }
    Ok(out)
}

impl std::fmt::Debug for ScratchFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tail = self.tail();
        f.debug_struct("ScratchFile")
            .field("flushed", &tail.flushed)
            .field("unwritten", &tail.bytes.len())
            .finish()
    }
}

/// The bytes past the file's end, not written yet. An entry is appended whole, and the tail is
/// written whole: an entry is either all in the file or all in the tail.
#[derive(Default)]
struct Tail {
    /// Where the file ends (and the tail starts).
    flushed: u64,
    bytes: Vec<u8>,
}

impl ScratchFile {
    /// `file`: empty, open for reading and writing (`tempfile::tempfile()` removes itself).
    pub fn new(file: File) -> Self {
        Self {
            file,
            tail: Mutex::new(Tail::default()),
        }
    }

    fn tail(&self) -> std::sync::MutexGuard<'_, Tail> {
        self.tail.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn append(&self, bytes: &[u8]) -> io::Result<Spilled> {
        let (len, kept) = Self::entry(bytes)?;
        let stored = kept.len() as u32; // no longer than `len`, which fits
        let offset = self.put(&[&kept])?;
        Ok(Spilled {
            offset,
            len,
            stored,
        })
    }

    /// [`Self::append`], with the entry's two lengths written before it, so that its offset
    /// alone finds it again ([`Self::read_framed`]): 8 bytes to keep where a [`Spilled`] is 16
    /// (the Batch twin keeps one for each of ten million array children).
    pub fn append_framed(&self, bytes: &[u8]) -> io::Result<u64> {
        let (len, kept) = Self::entry(bytes)?;
        let stored = kept.len() as u32;
        let mut frame = [0u8; FRAME as usize];
        frame[..4].copy_from_slice(&len.to_le_bytes());
        frame[4..].copy_from_slice(&stored.to_le_bytes());
        self.put(&[&frame, &kept])
    }

    /// The whole entry [`Self::append_framed`] put at `offset` (an offset it gave: any other
    /// is read as a frame all the same, and only a frame past the file's end is refused).
    pub fn read_framed(&self, offset: u64) -> io::Result<Vec<u8>> {
        let at = self.frame(offset)?;
        self.read(at, 0, u64::from(at.len))
    }

    /// Where the entry [`Self::append_framed`] put at `offset` is, from its frame: what
    /// [`Self::read`] takes, for a part of it.
    pub fn frame(&self, offset: u64) -> io::Result<Spilled> {
        let frame = self.read_stored(offset, FRAME)?;
        let length = |at: usize| {
            frame
                .get(at..at + 4)
                .and_then(|b| <[u8; 4]>::try_from(b).ok())
                .map(u32::from_le_bytes)
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "a short frame"))
        };
        let at = Spilled {
            offset: offset + FRAME,
            len: length(0)?,
            stored: length(4)?,
        };
        if at.stored > at.len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("no entry starts at {offset} of the scratch file"),
            ));
        }
        Ok(at)
    }

    /// An entry's length and the bytes to store for it (compressed when that pays).
    fn entry(bytes: &[u8]) -> io::Result<(u32, std::borrow::Cow<'_, [u8]>)> {
        let len = u32::try_from(bytes.len()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} bytes is too much for one entry", bytes.len()),
            )
        })?;
        Ok(match packed(bytes)? {
            Some(packed) => (len, std::borrow::Cow::Owned(packed)),
            None => (len, std::borrow::Cow::Borrowed(bytes)),
        })
    }

    /// Appends `parts` as one run of bytes; where it starts.
    fn put(&self, parts: &[&[u8]]) -> io::Result<u64> {
        // The lock orders the appends; bytes already written are never moved.
        let mut tail = self.tail();
        let before = tail.bytes.len();
        let offset = tail.flushed + before as u64;
        for part in parts {
            tail.bytes.extend_from_slice(part);
        }
        if tail.bytes.len() >= FLUSH_AT {
            if let Err(e) = self.file.write_all_at(&tail.bytes, tail.flushed) {
                // This entry fails and leaves; the ones before it stay readable in the tail and
                // are written by the next append that can (a full disk does not grow the tail).
                tail.bytes.truncate(before);
                return Err(e);
            }
            tail.flushed += tail.bytes.len() as u64;
            tail.bytes.clear();
        }
        Ok(offset)
    }

    /// `len` bytes from `skip` bytes into the entry at `at`.
    pub fn read(&self, at: Spilled, skip: u64, len: u64) -> io::Result<Vec<u8>> {
        let len = len.min(u64::from(at.len).saturating_sub(skip));
        if len == 0 {
            return Ok(Vec::new());
        }
        if !at.compressed() {
            return self.read_stored(at.offset + skip, len);
        }
        let packed = self.read_stored(at.offset, u64::from(at.stored))?;
        let whole = unpacked(&packed, at.len as usize)?;
        if whole.len() != at.len as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "an entry of {} bytes came back as {} from the scratch file",
                    at.len,
                    whole.len()
                ),
            ));
        }
        let from = usize::try_from(skip).map_err(io::Error::other)?;
        let to = from + usize::try_from(len).map_err(io::Error::other)?;
        if from == 0 && to == whole.len() {
            return Ok(whole);
        }
        Ok(whole[from..to].to_vec()) // to ≤ at.len: `len` was clamped above
    }

    /// `len` bytes of the file as written, from `start`: from the unwritten tail or the file.
    fn read_stored(&self, start: u64, len: u64) -> io::Result<Vec<u8>> {
        {
            let tail = self.tail();
            if start >= tail.flushed {
                let from = usize::try_from(start - tail.flushed).map_err(io::Error::other)?;
                let to = usize::try_from(len).map_err(io::Error::other)? + from;
                return tail.bytes.get(from..to).map(<[u8]>::to_vec).ok_or_else(|| {
                    io::Error::new(io::ErrorKind::UnexpectedEof, "past the scratch file's end")
                });
            }
        }
        // In the file, which never changes under bytes already written.
        let mut buf = vec![0u8; usize::try_from(len).map_err(io::Error::other)?];
        self.file.read_exact_at(&mut buf, start)?;
        Ok(buf)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn appended_entries_read_back_whole_and_in_part() {
        let scratch = ScratchFile::new(tempfile_in_temp_dir());
        let a = scratch.append(b"hello").unwrap();
        let b = scratch.append(b"world!").unwrap();
        assert_eq!(scratch.read(a, 0, 5).unwrap(), b"hello");
        assert_eq!(scratch.read(b, 1, 100).unwrap(), b"orld!");
        assert_eq!(scratch.read(b, 9, 2).unwrap(), b"");
    }

    #[test]
    fn entries_read_back_alike_from_the_file_and_from_the_unwritten_tail() {
        let scratch = ScratchFile::new(tempfile_in_temp_dir());
        // Enough entries that the early ones reach the file and the last ones do not.
        let entries: Vec<(Spilled, Vec<u8>)> = (0..3_000u32)
            .map(|i| {
                // Half compressible, half kept as they are.
                let mut bytes = format!("entry {i} ")
                    .repeat(1 + (i as usize % 97))
                    .into_bytes();
                if i % 2 == 1 {
                    bytes.extend(incompressible(800));
                }
                (scratch.append(&bytes).unwrap(), bytes)
            })
            .collect();
        assert!(scratch.tail().flushed > 0, "nothing reached the file");
        assert!(
            !scratch.tail().bytes.is_empty(),
            "nothing stayed in the tail"
        );
        for (at, bytes) in &entries {
            assert_eq!(&scratch.read(*at, 0, u64::from(at.len)).unwrap(), bytes);
            assert_eq!(scratch.read(*at, 2, 3).unwrap(), bytes[2..5].to_vec());
        }
    }

    #[test]
    fn framed_entries_are_found_again_from_their_offset_alone() {
        let scratch = ScratchFile::new(tempfile_in_temp_dir());
        // Framed and plain entries side by side, compressed and kept as they are, enough that
        // the first reach the file and the last stay in the tail.
        let mut framed = Vec::new();
        for i in 0..3_000usize {
            let mut bytes = format!("child {i} ").repeat(1 + i % 53).into_bytes();
            if i % 3 == 0 {
                bytes = incompressible(1_000 + i % 7);
            }
            framed.push((scratch.append_framed(&bytes).unwrap(), bytes));
            scratch.append(b"a plain entry between").unwrap();
        }
        framed.push((scratch.append_framed(b"").unwrap(), Vec::new()));
        assert!(scratch.tail().flushed > 0, "nothing reached the file");
        for (offset, bytes) in &framed {
            assert_eq!(&scratch.read_framed(*offset).unwrap(), bytes);
        }
        // A frame would run past the end: refused, not read from beyond the file.
        let last = scratch.append(b"ab").unwrap();
        assert_eq!(
            scratch.read_framed(last.offset).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
    }

    #[test]
    fn an_entry_whose_write_fails_leaves_and_the_ones_before_it_stay_readable() {
        // A file open for reading only: every write to it fails, as on a full disk.
        let path = std::env::temp_dir().join(format!("granary-scratch-ro-{}", std::process::id()));
        std::fs::write(&path, b"").unwrap();
        let read_only = std::fs::File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let scratch = ScratchFile::new(read_only);
        let kept = scratch.append(b"kept in the tail").unwrap();
        let big = incompressible(FLUSH_AT);
        assert!(scratch.append(&big).is_err());
        assert_eq!(scratch.tail().bytes.len(), b"kept in the tail".len());
        assert_eq!(scratch.read(kept, 0, 100).unwrap(), b"kept in the tail");
        assert!(
            scratch.append(&big).is_err(),
            "still failing, still not kept"
        );
        assert_eq!(scratch.tail().bytes.len(), b"kept in the tail".len());
    }

    #[test]
    fn json_is_kept_compressed_and_bytes_that_do_not_shrink_are_kept_as_they_are() {
        let scratch = ScratchFile::new(tempfile_in_temp_dir());
        let log = br#"{"granule_id":"HLS.S30.T10SEG.2024001T183959.v2.0","attempt":1,"state":"SUCCEEDED","job_id":"5b1f-0c2e:17","message":"processed"}"#
            .repeat(8);
        let at = scratch.append(&log).unwrap();
        assert!(
            at.stored * 3 < at.len,
            "{} bytes kept as {}",
            at.len,
            at.stored
        );
        let noise = incompressible(4_000);
        let raw = scratch.append(&noise).unwrap();
        assert_eq!(raw.stored, raw.len);
        // Both read back whole and in part, from the tail and (after a flush) from the file.
        for _ in 0..2 {
            assert_eq!(scratch.read(at, 0, u64::from(at.len)).unwrap(), log);
            assert_eq!(scratch.read(at, 10, 12).unwrap(), log[10..22].to_vec());
            assert_eq!(scratch.read(raw, 0, 4_000).unwrap(), noise);
            assert_eq!(
                scratch.read(raw, 3_990, 50).unwrap(),
                noise[3_990..].to_vec()
            );
            scratch.append(&incompressible(FLUSH_AT)).unwrap();
            assert!(scratch.tail().flushed > u64::from(at.len));
        }
    }

    /// Bytes Snappy cannot shrink (a linear congruential sequence's high bytes).
    fn incompressible(n: usize) -> Vec<u8> {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (x >> 56) as u8
            })
            .collect()
    }

    /// An unlinked file in the temp dir (the library has no tempfile dependency).
    pub(crate) fn tempfile_in_temp_dir() -> File {
        let path = std::env::temp_dir().join(format!(
            "granary-scratch-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        file
    }
}
