//! An external sort of text lines: lines gathered in memory up to a budget, sorted, spilled to
//! run files in the temporary directory, then merged. The audit's facts are lines that start
//! with their granule id, so the merge hands each granule's facts over together, in the memory
//! of one line per run.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{BufRead, BufReader, BufWriter, Seek, SeekFrom, Write};

pub struct LineSorter {
    chunk: Vec<String>,
    chunk_bytes: usize,
    budget_bytes: usize,
    runs: Vec<std::fs::File>,
    pub lines: u64,
}

impl LineSorter {
    /// Keeps about `budget_bytes` of lines in memory; the rest goes to run files (removed when
    /// they are dropped).
    pub fn new(budget_bytes: usize) -> Self {
        Self {
            chunk: Vec::new(),
            chunk_bytes: 0,
            budget_bytes: budget_bytes.max(1),
            runs: Vec::new(),
            lines: 0,
        }
    }

    pub fn push(&mut self, line: String) -> std::io::Result<()> {
        self.chunk_bytes += line.len() + std::mem::size_of::<String>();
        self.chunk.push(line);
        self.lines += 1;
        if self.chunk_bytes >= self.budget_bytes {
            self.spill()?;
        }
        Ok(())
    }

    /// Run files written so far.
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    fn spill(&mut self) -> std::io::Result<()> {
        self.chunk.sort_unstable();
        let mut file = tempfile::tempfile()?;
        {
            let mut w = BufWriter::new(&mut file);
            for line in self.chunk.drain(..) {
                w.write_all(line.as_bytes())?;
                w.write_all(b"\n")?;
            }
            w.flush()?;
        }
        file.seek(SeekFrom::Start(0))?;
        self.runs.push(file);
        self.chunk_bytes = 0;
        Ok(())
    }

    /// Every line pushed, in order.
    pub fn finish(mut self) -> std::io::Result<SortedLines> {
        if self.runs.is_empty() {
            self.chunk.sort_unstable();
            return Ok(SortedLines {
                memory: self.chunk.into_iter(),
                readers: Vec::new(),
                heap: BinaryHeap::new(),
            });
        }
        if !self.chunk.is_empty() {
            self.spill()?;
        }
        let mut readers: Vec<_> = self.runs.into_iter().map(BufReader::new).collect();
        let mut heap = BinaryHeap::new();
        for (i, r) in readers.iter_mut().enumerate() {
            if let Some(line) = read_line(r)? {
                heap.push(Reverse((line, i)));
            }
        }
        Ok(SortedLines {
            memory: Vec::new().into_iter(),
            readers,
            heap,
        })
    }
}

pub struct SortedLines {
    memory: std::vec::IntoIter<String>,
    readers: Vec<BufReader<std::fs::File>>,
    heap: BinaryHeap<Reverse<(String, usize)>>,
}

impl SortedLines {
    pub fn next_line(&mut self) -> std::io::Result<Option<String>> {
        if self.readers.is_empty() {
            return Ok(self.memory.next());
        }
        let Some(Reverse((line, i))) = self.heap.pop() else {
            return Ok(None);
        };
        if let Some(next) = read_line(&mut self.readers[i])? {
            self.heap.push(Reverse((next, i)));
        }
        Ok(Some(line))
    }
}

fn read_line(r: &mut BufReader<std::fs::File>) -> std::io::Result<Option<String>> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    if line.ends_with('\n') {
        line.pop();
    }
    Ok(Some(line))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_come_back_in_order_from_memory_and_from_many_runs() {
        for budget in [1 << 20, 64] {
            let mut s = LineSorter::new(budget);
            let lines: Vec<String> = (0..500u32)
                .map(|i| format!("{}\tx", (i * 7919) % 500))
                .collect();
            for l in &lines {
                s.push(l.clone()).unwrap();
            }
            let spilled = s.runs() > 0;
            assert_eq!(spilled, budget == 64);
            let mut sorted = s.finish().unwrap();
            let mut out = Vec::new();
            while let Some(l) = sorted.next_line().unwrap() {
                out.push(l);
            }
            let mut want = lines.clone();
            want.sort();
            assert_eq!(out, want);
        }
    }
}
