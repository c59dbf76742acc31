//! An append-only scratch file for the twins' bulk bytes (object bodies, job details): written
//! once, read back by position. A twin that keeps a million granules' logs and job details in
//! memory would need gigabytes; in a scratch file they cost disk, and the page cache holds them
//! or drops them as the machine allows.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;

/// Where a run of bytes was put.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spilled {
    pub offset: u64,
    pub len: u32,
}

/// Appends gather here and reach the file a mebibyte at a time: one write call per object
/// spent more CPU in the kernel than the twin spent on the object (perf, a 100,000-granule
/// campaign: 13% in pwrite).
const FLUSH_AT: usize = 1 << 20;

#[derive(Debug)]
pub struct ScratchFile {
    file: File,
    tail: Mutex<Tail>,
}

/// The bytes past the file's end, not written yet. An entry is appended whole, and the tail is
/// written whole: an entry is either all in the file or all in the tail.
#[derive(Debug, Default)]
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
        let len = u32::try_from(bytes.len()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} bytes is too much for one entry", bytes.len()),
            )
        })?;
        // The lock orders the appends; bytes already written are never moved.
        let mut tail = self.tail();
        let before = tail.bytes.len();
        let offset = tail.flushed + before as u64;
        tail.bytes.extend_from_slice(bytes);
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
        Ok(Spilled { offset, len })
    }

    /// `len` bytes from `skip` bytes into the entry at `at`.
    pub fn read(&self, at: Spilled, skip: u64, len: u64) -> io::Result<Vec<u8>> {
        let len = len.min(u64::from(at.len).saturating_sub(skip));
        if len == 0 {
            return Ok(Vec::new());
        }
        let start = at.offset + skip;
        {
            let tail = self.tail();
            if at.offset >= tail.flushed {
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
                let bytes = format!("entry {i} ")
                    .repeat(1 + (i as usize % 97))
                    .into_bytes();
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
    fn an_entry_whose_write_fails_leaves_and_the_ones_before_it_stay_readable() {
        // A file open for reading only: every write to it fails, as on a full disk.
        let path = std::env::temp_dir().join(format!("granary-scratch-ro-{}", std::process::id()));
        std::fs::write(&path, b"").unwrap();
        let read_only = std::fs::File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let scratch = ScratchFile::new(read_only);
        let kept = scratch.append(b"kept in the tail").unwrap();
        let big = vec![7u8; FLUSH_AT];
        assert!(scratch.append(&big).is_err());
        assert_eq!(scratch.tail().bytes.len(), b"kept in the tail".len());
        assert_eq!(scratch.read(kept, 0, 100).unwrap(), b"kept in the tail");
        assert!(
            scratch.append(&big).is_err(),
            "still failing, still not kept"
        );
        assert_eq!(scratch.tail().bytes.len(), b"kept in the tail".len());
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
