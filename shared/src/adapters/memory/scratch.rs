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

#[derive(Debug)]
pub struct ScratchFile {
    file: File,
    end: Mutex<u64>,
}

impl ScratchFile {
    /// `file`: empty, open for reading and writing (`tempfile::tempfile()` removes itself).
    pub fn new(file: File) -> Self {
        Self {
            file,
            end: Mutex::new(0),
        }
    }

    pub fn append(&self, bytes: &[u8]) -> io::Result<Spilled> {
        let len = u32::try_from(bytes.len()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} bytes is too much for one entry", bytes.len()),
            )
        })?;
        // The lock orders the appends; bytes already written are never moved.
        let mut end = self.end.lock().unwrap_or_else(|p| p.into_inner());
        self.file.write_all_at(bytes, *end)?;
        let offset = *end;
        *end += u64::from(len);
        Ok(Spilled { offset, len })
    }

    /// `len` bytes from `skip` bytes into the entry at `at`.
    pub fn read(&self, at: Spilled, skip: u64, len: u64) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; len.min(u64::from(at.len).saturating_sub(skip)) as usize];
        self.file.read_exact_at(&mut buf, at.offset + skip)?;
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
