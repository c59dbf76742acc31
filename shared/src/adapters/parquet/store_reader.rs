//! Parquet's async reader over the object-store port: suffix GETs for the footer, ranged
//! GETs for the rest, nearby ranges merged into one request.

use super::*;

/// Adapts the object-store port to parquet's async reader traits.
#[derive(Clone)]
pub(super) struct StoreReader {
    pub(super) store: Arc<dyn ObjectStore>,
    pub(super) key: String,
    pub(super) metadata: Option<Arc<ParquetMetaData>>,
    /// Byte spans fetched ahead for one window read: the reader asks row group by row group,
    /// and a window across a row-group boundary would otherwise cost a GET for each.
    pub(super) prefetched: Arc<Vec<(Range<u64>, Bytes)>>,
}

impl StoreReader {
    fn map_err(&self, e: StoreError) -> ParquetError {
        ParquetError::External(Box::new(e))
    }
}

impl MetadataFetch for StoreReader {
    fn fetch(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        async move {
            self.store
                .get_range(&self.key, range)
                .await
                .map_err(|e| self.map_err(e))
        }
        .boxed()
    }
}

impl MetadataSuffixFetch for StoreReader {
    fn fetch_suffix(&mut self, suffix: usize) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        async move {
            self.store
                .get_suffix(&self.key, suffix as u64)
                .await
                .map(|(b, _)| b)
                .map_err(|e| self.map_err(e))
        }
        .boxed()
    }
}

impl AsyncFileReader for StoreReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        self.fetch(range)
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        async move {
            let held = |r: &Range<u64>| {
                self.prefetched
                    .iter()
                    .find(|(s, _)| s.start <= r.start && r.end <= s.end)
                    .map(|(s, b)| (s.start, b.clone()))
            };
            if let Some(found) = ranges.iter().map(held).collect::<Option<Vec<_>>>() {
                return ranges
                    .iter()
                    .zip(found)
                    .map(|(r, (base, bytes))| {
                        let (a, b) = ((r.start - base) as usize, (r.end - base) as usize);
                        if b > bytes.len() {
                            return Err(ParquetError::EOF(format!(
                                "wanted bytes {r:?}, object ended first"
                            )));
                        }
                        Ok(bytes.slice(a..b))
                    })
                    .collect();
            }
            let spans = coalesce(&ranges, COALESCE_GAP);
            let mut fetched = Vec::with_capacity(spans.len());
            for span in &spans {
                fetched.push(
                    self.store
                        .get_range(&self.key, span.clone())
                        .await
                        .map_err(|e| self.map_err(e))?,
                );
            }
            ranges
                .iter()
                .map(|r| {
                    let (span, bytes) = spans
                        .iter()
                        .zip(&fetched)
                        .find(|(s, _)| s.start <= r.start && r.end <= s.end)
                        .ok_or_else(|| {
                            ParquetError::General("range outside fetched spans".into())
                        })?;
                    let (a, b) = (
                        (r.start - span.start) as usize,
                        (r.end - span.start) as usize,
                    );
                    if b > bytes.len() {
                        return Err(ParquetError::EOF(format!(
                            "wanted bytes {r:?}, object ended first"
                        )));
                    }
                    Ok(bytes.slice(a..b))
                })
                .collect()
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        _options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        async move {
            match &self.metadata {
                Some(m) => Ok(m.clone()),
                None => Err(ParquetError::General("metadata not loaded".into())),
            }
        }
        .boxed()
    }
}

/// Merges ranges (in any order) whose gaps are at most `gap` bytes.
pub fn coalesce(ranges: &[Range<u64>], gap: u64) -> Vec<Range<u64>> {
    let mut sorted: Vec<Range<u64>> = ranges.to_vec();
    sorted.sort_by_key(|r| r.start);
    let mut out: Vec<Range<u64>> = Vec::new();
    for r in sorted {
        match out.last_mut() {
            Some(last) if r.start <= last.end.saturating_add(gap) => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}
