//! An external sort of granule ids, newest first: ids are gathered in memory up to a budget,
//! sorted, and spilled to run files; the runs are then merged. Equal ids meet in the merge (an
//! id's time is a function of the id, so duplicates sort next to each other) and are dropped
//! there, counted.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::io::{BufReader, BufWriter, Read, Write};

/// One id and the time the id parser read from it (seconds since the epoch; [`UNDATED`] when it
/// has none, which sorts after every dated id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub at: i64,
    pub id: String,
}

pub const UNDATED: i64 = i64::MIN;

impl Ord for Entry {
    /// Newest first; ties (and undated ids) by id.
    fn cmp(&self, other: &Self) -> Ordering {
        other.at.cmp(&self.at).then_with(|| self.id.cmp(&other.id))
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// What an entry costs in memory: the id's bytes, the String and the time.
fn footprint(e: &Entry) -> usize {
    e.id.len() + std::mem::size_of::<Entry>()
}

pub struct Sorter {
    chunk: Vec<Entry>,
    chunk_bytes: usize,
    budget_bytes: usize,
    runs: Vec<std::fs::File>,
    pub duplicates: u64,
}

impl Sorter {
    /// Keeps at most about `budget_bytes` of ids in memory; the rest goes to run files in the
    /// system's temporary directory (removed when the sorter is dropped).
    pub fn new(budget_bytes: usize) -> Self {
        Self {
            chunk: Vec::new(),
            chunk_bytes: 0,
            budget_bytes: budget_bytes.max(1),
            runs: Vec::new(),
            duplicates: 0,
        }
    }

    pub fn push(&mut self, entry: Entry) -> std::io::Result<()> {
        self.chunk_bytes += footprint(&entry);
        self.chunk.push(entry);
        if self.chunk_bytes >= self.budget_bytes {
            self.spill()?;
        }
        Ok(())
    }

    /// Run files written so far.
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    fn sort_chunk(&mut self) {
        self.chunk.sort_unstable();
        let before = self.chunk.len();
        self.chunk.dedup_by(|a, b| a.id == b.id);
        self.duplicates += (before - self.chunk.len()) as u64;
    }

    fn spill(&mut self) -> std::io::Result<()> {
        self.sort_chunk();
        let mut file = tempfile::tempfile()?;
        {
            let mut w = BufWriter::with_capacity(1 << 20, &mut file);
            for e in self.chunk.drain(..) {
                w.write_all(&e.at.to_le_bytes())?;
                w.write_all(&(e.id.len() as u32).to_le_bytes())?;
                w.write_all(e.id.as_bytes())?;
            }
            w.flush()?;
        }
        use std::io::Seek;
        file.rewind()?;
        self.runs.push(file);
        self.chunk_bytes = 0;
        self.chunk = Vec::new();
        Ok(())
    }

    /// Every distinct id, in order; `on_duplicate` is called for each one dropped in the merge.
    pub fn finish(mut self) -> std::io::Result<Merged> {
        if self.runs.is_empty() {
            self.sort_chunk();
            return Ok(Merged {
                sources: vec![Source::Memory(std::mem::take(&mut self.chunk).into_iter())],
                heap: BinaryHeap::new(),
                last: None,
                duplicates: self.duplicates,
                started: false,
            });
        }
        if !self.chunk.is_empty() {
            self.spill()?;
        }
        let sources = std::mem::take(&mut self.runs)
            .into_iter()
            .map(|f| Source::Run(BufReader::with_capacity(1 << 20, f)))
            .collect();
        Ok(Merged {
            sources,
            heap: BinaryHeap::new(),
            last: None,
            duplicates: self.duplicates,
            started: false,
        })
    }
}

enum Source {
    Memory(std::vec::IntoIter<Entry>),
    Run(BufReader<std::fs::File>),
}

impl Source {
    fn next(&mut self) -> std::io::Result<Option<Entry>> {
        match self {
            Source::Memory(it) => Ok(it.next()),
            Source::Run(r) => {
                let mut at = [0u8; 8];
                match r.read_exact(&mut at) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
                    Err(e) => return Err(e),
                }
                let mut len = [0u8; 4];
                r.read_exact(&mut len)?;
                let mut id = vec![0u8; u32::from_le_bytes(len) as usize];
                r.read_exact(&mut id)?;
                let id = String::from_utf8(id).map_err(|e| {
                    std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
                })?;
                Ok(Some(Entry {
                    at: i64::from_le_bytes(at),
                    id,
                }))
            }
        }
    }
}

/// The merge of the sorted runs, duplicates dropped.
pub struct Merged {
    sources: Vec<Source>,
    heap: BinaryHeap<std::cmp::Reverse<(Entry, usize)>>,
    last: Option<String>,
    pub duplicates: u64,
    started: bool,
}

impl Merged {
    pub fn next_entry(&mut self) -> std::io::Result<Option<Entry>> {
        if !self.started {
            self.started = true;
            for i in 0..self.sources.len() {
                if let Some(e) = self.sources[i].next()? {
                    self.heap.push(std::cmp::Reverse((e, i)));
                }
            }
        }
        while let Some(std::cmp::Reverse((entry, i))) = self.heap.pop() {
            if let Some(e) = self.sources[i].next()? {
                self.heap.push(std::cmp::Reverse((e, i)));
            }
            if self.last.as_deref() == Some(entry.id.as_str()) {
                self.duplicates += 1;
                continue;
            }
            self.last = Some(entry.id.clone());
            return Ok(Some(entry));
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(at: i64, id: &str) -> Entry {
        Entry {
            at,
            id: id.to_owned(),
        }
    }

    fn sorted(budget: usize, entries: &[Entry]) -> (Vec<Entry>, u64, usize) {
        let mut s = Sorter::new(budget);
        for x in entries {
            s.push(x.clone()).unwrap();
        }
        let runs = s.runs();
        let mut m = s.finish().unwrap();
        let mut out = Vec::new();
        while let Some(x) = m.next_entry().unwrap() {
            out.push(x);
        }
        (out, m.duplicates, runs)
    }

    #[test]
    fn newest_first_ties_by_id_undated_last_duplicates_dropped_in_memory_and_on_disk() {
        let input = vec![
            e(5, "b"),
            e(UNDATED, "z"),
            e(9, "c"),
            e(5, "a"),
            e(5, "b"),
            e(UNDATED, "y"),
            e(9, "c"),
            e(7, "d"),
        ];
        let want = vec![
            e(9, "c"),
            e(7, "d"),
            e(5, "a"),
            e(5, "b"),
            e(UNDATED, "y"),
            e(UNDATED, "z"),
        ];
        let (memory, dups, runs) = sorted(1 << 20, &input);
        assert_eq!((memory.clone(), dups, runs), (want.clone(), 2, 0));
        // A budget of one entry: every entry is its own run file.
        let (disk, dups, runs) = sorted(1, &input);
        assert_eq!((disk, dups, runs), (want, 2, input.len()));
    }
}
