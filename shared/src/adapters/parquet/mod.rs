//! Parquet granule inventories: read a window of rows touching only the bytes that hold it, and
//! write inventories laid out so that such windows are cheap.
//!
//! Reading: the footer comes with one suffix GET (64 KiB, more only if the footer is larger);
//! then only the row groups overlapping the window and only the id column are fetched, and when the
//! file has an offset index only the pages holding the window. Nearby ranges are merged into one
//! GET, since a request costs more than a few wasted kilobytes.

use crate::domain::granule::IdCell;
use crate::ports::{ObjectStore, StoreError};
use arrow::array::{Array, AsArray, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{FutureExt, TryStreamExt};
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, RowSelection, RowSelector,
};
use parquet::arrow::async_reader::{AsyncFileReader, MetadataFetch, MetadataSuffixFetch};
use parquet::arrow::{ArrowWriter, ParquetRecordBatchStreamBuilder, ProjectionMask};
use parquet::basic::{Compression, ZstdLevel};
use parquet::errors::ParquetError;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;
use std::ops::Range;
use std::sync::Arc;

/// The column granary's own inventories name granule ids in (the domain's fact).
pub use crate::domain::granule::INVENTORY_ID_COLUMN as DEFAULT_ID_COLUMN;
const FOOTER_PREFETCH: usize = 64 * 1024;
/// Ranges closer than this are fetched with one GET.
const COALESCE_GAP: u64 = 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error("inventory {key}: {source}")]
    Store {
        key: String,
        #[source]
        source: StoreError,
    },
    #[error("inventory {key} is not a readable Parquet file (truncated or corrupt?): {source}")]
    Parquet {
        key: String,
        #[source]
        source: ParquetError,
    },
    #[error("inventory {key} has no column {column:?} (columns: {found})")]
    NoIdColumn {
        key: String,
        column: String,
        found: String,
    },
    #[error("inventory {key}: column {column:?} is {found}, not a string column")]
    IdColumnType {
        key: String,
        column: String,
        found: String,
    },
    /// The parquet crate asserts on some corrupt metadata (negative column offsets, lengths that
    /// overflow) instead of returning an error; such a panic is caught and reported as this.
    #[error("inventory {key} is corrupt: the Parquet reader gave up with {why:?}")]
    Corrupt { key: String, why: String },
    #[error("inventory {key}: rows {start}..{end} are past its end ({total} rows)")]
    OutOfRange {
        key: String,
        start: u64,
        end: u64,
        total: u64,
    },
}

impl InventoryError {
    /// A read that failed in transit or for its rate: the file itself may be fine.
    pub fn is_transient(&self) -> bool {
        matches!(self, InventoryError::Store { source, .. } if source.is_transient())
    }
}

/// Adapts the object-store port to parquet's async reader traits.
#[derive(Clone)]
struct StoreReader {
    store: Arc<dyn ObjectStore>,
    key: String,
    metadata: Option<Arc<ParquetMetaData>>,
    /// Byte spans fetched ahead for one window read: the reader asks row group by row group,
    /// and a window across a row-group boundary would otherwise cost a GET for each.
    prefetched: Arc<Vec<(Range<u64>, Bytes)>>,
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

/// An opened inventory: its footer is read, rows can be taken by position.
pub struct Inventory {
    reader: StoreReader,
    key: String,
    id_column: String,
    arrow_metadata: ArrowReaderMetadata,
    /// The file row the metadata's first row group starts at (not 0 when opened from a
    /// [`PageMap`]), and the whole file's row count.
    row_base: u64,
    total_rows: u64,
}

/// Runs one reading step, turning a panic inside the parquet crate into an error naming the file,
/// so one corrupt inventory fails its feeder run with a reason instead of killing the process.
async fn guarded<T>(
    key: &str,
    step: impl std::future::Future<Output = Result<T, InventoryError>>,
) -> Result<T, InventoryError> {
    use futures::FutureExt;
    match std::panic::AssertUnwindSafe(step).catch_unwind().await {
        Ok(result) => result,
        Err(panic) => Err(InventoryError::Corrupt {
            key: key.to_owned(),
            why: panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_owned()),
        }),
    }
}

impl Inventory {
    pub async fn open(
        store: Arc<dyn ObjectStore>,
        key: &str,
        id_column: &str,
    ) -> Result<Self, InventoryError> {
        guarded(key, Self::open_unguarded(store, key, id_column)).await
    }

    async fn open_unguarded(
        store: Arc<dyn ObjectStore>,
        key: &str,
        id_column: &str,
    ) -> Result<Self, InventoryError> {
        let reader = StoreReader {
            store,
            key: key.to_owned(),
            metadata: None,
            prefetched: Arc::default(),
        };
        let parquet_err = |source| InventoryError::Parquet {
            key: key.to_owned(),
            source,
        };
        // Only the offset index (where each page starts) is needed to fetch single pages; the
        // column index (per-page min/max of every column) can be larger than the window itself.
        let metadata = ParquetMetaDataReader::new()
            .with_prefetch_hint(Some(FOOTER_PREFETCH))
            .with_column_index_policy(PageIndexPolicy::Skip)
            .with_offset_index_policy(PageIndexPolicy::Optional)
            .load_via_suffix_and_finish(reader.clone())
            .await
            .map_err(|e| match e {
                ParquetError::External(inner) => match inner.downcast::<StoreError>() {
                    Ok(se) => InventoryError::Store {
                        key: key.to_owned(),
                        source: *se,
                    },
                    Err(other) => parquet_err(ParquetError::External(other)),
                },
                other => parquet_err(other),
            })?;
        let total_rows = metadata.file_metadata().num_rows().max(0) as u64;
        Self::with_metadata(reader, key, id_column, metadata, 0, total_rows)
    }

    /// An inventory opened from a page map the feeder kept: no request at all.
    pub fn from_page_map(
        store: Arc<dyn ObjectStore>,
        key: &str,
        id_column: &str,
        map: &PageMap,
    ) -> Result<Self, InventoryError> {
        let parquet_err = |source| InventoryError::Parquet {
            key: key.to_owned(),
            source,
        };
        let bytes = aws_smithy_types::base64::decode(&map.metadata)
            .map_err(|e| parquet_err(ParquetError::General(format!("page map: {e}"))))?;
        let metadata = ParquetMetaDataReader::new()
            .with_column_index_policy(PageIndexPolicy::Skip)
            .with_offset_index_policy(PageIndexPolicy::Optional)
            .parse_and_finish(&Bytes::from(bytes))
            .map_err(parquet_err)?;
        let reader = StoreReader {
            store,
            key: key.to_owned(),
            metadata: None,
            prefetched: Arc::default(),
        };
        Self::with_metadata(
            reader,
            key,
            id_column,
            metadata,
            map.first_row,
            map.total_rows,
        )
    }

    fn with_metadata(
        mut reader: StoreReader,
        key: &str,
        id_column: &str,
        metadata: ParquetMetaData,
        row_base: u64,
        total_rows: u64,
    ) -> Result<Self, InventoryError> {
        let parquet_err = |source| InventoryError::Parquet {
            key: key.to_owned(),
            source,
        };
        let metadata = Arc::new(metadata);
        reader.metadata = Some(metadata.clone());
        let options = ArrowReaderOptions::new()
            .with_column_index_policy(PageIndexPolicy::Skip)
            .with_offset_index_policy(PageIndexPolicy::Optional);
        let arrow_metadata =
            ArrowReaderMetadata::try_new(metadata, options).map_err(parquet_err)?;
        let schema = arrow_metadata.schema();
        let field = schema
            .field_with_name(id_column)
            .map_err(|_| InventoryError::NoIdColumn {
                key: key.to_owned(),
                column: id_column.to_owned(),
                found: schema
                    .fields()
                    .iter()
                    .map(|f| f.name().as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        if !matches!(
            field.data_type(),
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
        ) {
            return Err(InventoryError::IdColumnType {
                key: key.to_owned(),
                column: id_column.to_owned(),
                found: field.data_type().to_string(),
            });
        }
        Ok(Self {
            reader,
            key: key.to_owned(),
            id_column: id_column.to_owned(),
            arrow_metadata,
            row_base,
            total_rows,
        })
    }

    pub fn num_rows(&self) -> u64 {
        self.total_rows
    }

    /// The page map of the row groups holding rows `from .. from + span` (at least the one holding
    /// `from`), for reading them later without this file's footer and index. `None` when the file
    /// has no offset index for the id column (a window read then needs the footer anyway) or
    /// `from` is past its end.
    pub fn page_map(&self, from: u64, span: u64) -> Result<Option<PageMap>, InventoryError> {
        let metadata = self.arrow_metadata.metadata();
        let Some(id_index) = metadata
            .file_metadata()
            .schema_descr()
            .columns()
            .iter()
            .position(|c| c.path().string() == self.id_column)
        else {
            return Ok(None);
        };
        let Some(page_index) = metadata.page_index() else {
            return Ok(None);
        };
        let end = from.saturating_add(span.max(1));
        let mut kept = Vec::new();
        let mut offsets = Vec::new();
        let (mut first_row, mut rows) = (None, 0u64);
        let mut offset = self.row_base;
        for (i, rg) in metadata.row_groups().iter().enumerate() {
            let n = rg.num_rows().max(0) as u64;
            if offset < end && offset + n > from {
                let Some(index) = page_index.offset_index(i, id_index) else {
                    return Ok(None);
                };
                first_row.get_or_insert(offset);
                rows += n;
                kept.push(rg.clone());
                offsets.push(index.clone());
            }
            offset += n;
        }
        let Some(first_row) = first_row else {
            return Ok(None);
        };
        let columns = metadata.file_metadata().schema_descr().num_columns();
        let mut index =
            parquet::file::metadata::page_index::PageIndexBuilder::new(kept.len(), columns);
        for (i, o) in offsets.into_iter().enumerate() {
            index.put_offset_index(o, i, id_index);
        }
        let trimmed =
            parquet::file::metadata::ParquetMetaDataBuilder::new(metadata.file_metadata().clone())
                .set_row_groups(kept)
                .set_page_index(Some(Arc::new(index.build())))
                .build();
        let mut bytes = Vec::new();
        parquet::file::metadata::ParquetMetaDataWriter::new(&mut bytes, &trimmed)
            .with_preserve_page_index_locations(false)
            .finish()
            .map_err(|source| InventoryError::Parquet {
                key: self.key.clone(),
                source,
            })?;
        Ok(Some(PageMap {
            first_row,
            rows,
            total_rows: self.total_rows,
            metadata: aws_smithy_types::base64::encode(&bytes),
        }))
    }

    pub fn num_row_groups(&self) -> usize {
        self.arrow_metadata.metadata().num_row_groups()
    }

    /// The byte ranges of the id column's pages (and dictionary pages) holding rows
    /// `start .. end` in row groups `groups` (the first starting at row `group_start`), from the
    /// offset index; empty when a group has none (the reader then fetches whole column chunks).
    fn page_ranges(
        &self,
        groups: &[usize],
        group_start: u64,
        start: u64,
        end: u64,
    ) -> Vec<Range<u64>> {
        let metadata = self.arrow_metadata.metadata();
        let (Some(page_index), Some(column)) = (
            metadata.page_index(),
            metadata
                .file_metadata()
                .schema_descr()
                .columns()
                .iter()
                .position(|c| c.path().string() == self.id_column),
        ) else {
            return Vec::new();
        };
        let mut ranges = Vec::new();
        let mut rg_start = group_start;
        for &g in groups {
            let Some(rg) = metadata.row_groups().get(g) else {
                return Vec::new();
            };
            let rg_rows = rg.num_rows().max(0) as u64;
            let Some(index) = page_index.offset_index(g, column) else {
                return Vec::new();
            };
            let chunk = rg.column(column);
            let locations = index.page_locations();
            if let (Some(dict), Some(first)) = (chunk.dictionary_page_offset(), locations.first()) {
                ranges.push(dict.max(0) as u64..first.offset.max(0) as u64);
            }
            for (j, page) in locations.iter().enumerate() {
                let first = rg_start + page.first_row_index.max(0) as u64;
                let next = locations.get(j + 1).map_or(rg_start + rg_rows, |p| {
                    rg_start + p.first_row_index.max(0) as u64
                });
                if first < end && next > start {
                    let at = page.offset.max(0) as u64;
                    ranges.push(at..at + page.compressed_page_size.max(0) as u64);
                }
            }
            rg_start += rg_rows;
        }
        ranges
    }

    /// The id cells of rows `start .. start + n` (clamped to the end).
    pub async fn read_ids(&self, start: u64, n: u64) -> Result<Vec<IdCell>, InventoryError> {
        guarded(&self.key, self.read_ids_unguarded(start, n)).await
    }

    async fn read_ids_unguarded(&self, start: u64, n: u64) -> Result<Vec<IdCell>, InventoryError> {
        let total = self.num_rows();
        let end = start.saturating_add(n).min(total);
        if start > total {
            return Err(InventoryError::OutOfRange {
                key: self.key.clone(),
                start,
                end: start + n,
                total,
            });
        }
        if start == end {
            return Ok(Vec::new());
        }
        let held = self.row_base
            + self
                .arrow_metadata
                .metadata()
                .row_groups()
                .iter()
                .map(|rg| rg.num_rows().max(0) as u64)
                .sum::<u64>();
        if start < self.row_base || end > held {
            return Err(InventoryError::OutOfRange {
                key: self.key.clone(),
                start,
                end,
                total: held,
            });
        }
        match self.decode_ids(start, end).await {
            // The Arrow reader refuses a whole read for one cell that is not UTF-8 (and a whole
            // column chunk for one bad dictionary entry): the span is read again cell by cell.
            Err(e) if is_not_utf8(&e) => self.raw_ids(start, end).await,
            read => read,
        }
    }

    /// The id cells of rows `start .. end` read with the column reader, which hands back bytes
    /// unchecked: each cell is checked on its own. Reads the id column's whole chunk of each row
    /// group the span touches (one GET each), so it is kept for spans the Arrow reader refused.
    async fn raw_ids(&self, start: u64, end: u64) -> Result<Vec<IdCell>, InventoryError> {
        let metadata = self.arrow_metadata.metadata();
        let parquet_err = |source| InventoryError::Parquet {
            key: self.key.clone(),
            source,
        };
        let schema = metadata.file_metadata().schema_descr();
        let column = schema
            .columns()
            .iter()
            .position(|c| c.path().string() == self.id_column)
            .ok_or_else(|| InventoryError::NoIdColumn {
                key: self.key.clone(),
                column: self.id_column.clone(),
                found: String::new(),
            })?;
        let mut cells = Vec::with_capacity((end - start) as usize);
        let mut offset = self.row_base;
        for rg in metadata.row_groups() {
            let rows = rg.num_rows().max(0) as u64;
            let group = offset..offset + rows;
            offset += rows;
            if group.end <= start || group.start >= end {
                continue;
            }
            let chunk = rg.column(column);
            let (at, len) = chunk.byte_range();
            let bytes = self
                .reader
                .store
                .get_range(&self.key, at..at + len)
                .await
                .map_err(|source| InventoryError::Store {
                    key: self.key.clone(),
                    source,
                })?;
            let all = raw_column_cells(
                Arc::new(ChunkAt { at, bytes }),
                chunk,
                schema.column(column),
                rows as usize,
            )
            .map_err(parquet_err)?;
            let from = start.max(group.start) - group.start;
            let to = end.min(group.end) - group.start;
            cells.extend(
                all.into_iter()
                    .skip(from as usize)
                    .take((to - from) as usize),
            );
        }
        Ok(cells)
    }

    /// The id cells of rows `start .. end`, already checked to lie within this file.
    async fn decode_ids(&self, start: u64, end: u64) -> Result<Vec<IdCell>, InventoryError> {
        // Row groups overlapping [start, end), and where the first one begins.
        let mut groups = Vec::new();
        let mut first_group_start = None;
        let mut offset = self.row_base;
        for (i, rg) in self
            .arrow_metadata
            .metadata()
            .row_groups()
            .iter()
            .enumerate()
        {
            let rows = rg.num_rows().max(0) as u64;
            if offset < end && offset + rows > start {
                groups.push(i);
                first_group_start.get_or_insert(offset);
            }
            offset += rows;
        }
        let group_start = first_group_start.unwrap_or(0);
        let selection = RowSelection::from(vec![
            RowSelector::skip((start - group_start) as usize),
            RowSelector::select((end - start) as usize),
        ]);
        let parquet_err = |source| InventoryError::Parquet {
            key: self.key.clone(),
            source,
        };
        let mask = ProjectionMask::columns(
            self.arrow_metadata
                .metadata()
                .file_metadata()
                .schema_descr(),
            [self.id_column.as_str()],
        );
        let mut reader = self.reader.clone();
        let pages = self.page_ranges(&groups, group_start, start, end);
        if !pages.is_empty() {
            let mut fetched = Vec::new();
            for span in coalesce(&pages, COALESCE_GAP) {
                let bytes = self
                    .reader
                    .store
                    .get_range(&self.key, span.clone())
                    .await
                    .map_err(|source| InventoryError::Store {
                        key: self.key.clone(),
                        source,
                    })?;
                fetched.push((span, bytes));
            }
            reader.prefetched = Arc::new(fetched);
        }
        let stream =
            ParquetRecordBatchStreamBuilder::new_with_metadata(reader, self.arrow_metadata.clone())
                .with_row_groups(groups)
                .with_row_selection(selection)
                .with_projection(mask)
                .with_batch_size(8192)
                .build()
                .map_err(parquet_err)?;
        let batches: Vec<RecordBatch> = stream.try_collect().await.map_err(parquet_err)?;
        let mut ids = Vec::with_capacity((end - start) as usize);
        for batch in &batches {
            let col = batch.column(0);
            let push = |ids: &mut Vec<IdCell>, v: Option<&str>| {
                ids.push(v.map_or(IdCell::Null, |t| IdCell::Text(t.to_owned())))
            };
            match col.data_type() {
                DataType::Utf8 => col
                    .as_string::<i32>()
                    .iter()
                    .for_each(|v| push(&mut ids, v)),
                DataType::LargeUtf8 => col
                    .as_string::<i64>()
                    .iter()
                    .for_each(|v| push(&mut ids, v)),
                DataType::Utf8View => col.as_string_view().iter().for_each(|v| push(&mut ids, v)),
                other => {
                    return Err(InventoryError::IdColumnType {
                        key: self.key.clone(),
                        column: self.id_column.clone(),
                        found: other.to_string(),
                    })
                }
            }
        }
        Ok(ids)
    }
}

pub use crate::domain::tracker::PageMap;

/// One column chunk's bytes, answering reads at the file offsets the metadata names.
struct ChunkAt {
    at: u64,
    bytes: Bytes,
}

impl parquet::file::reader::Length for ChunkAt {
    fn len(&self) -> u64 {
        self.at + self.bytes.len() as u64
    }
}

impl parquet::file::reader::ChunkReader for ChunkAt {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        use bytes::Buf;
        // An empty read checks that `start` lies within the chunk.
        self.get_bytes(start, 0)?;
        Ok(self.bytes.slice((start - self.at) as usize..).reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let from = start
            .checked_sub(self.at)
            .map(|f| f as usize)
            .filter(|f| f + length <= self.bytes.len())
            .ok_or_else(|| {
                ParquetError::General(format!(
                    "read of {length} bytes at {start} outside the column chunk at {} ({} bytes)",
                    self.at,
                    self.bytes.len()
                ))
            })?;
        Ok(self.bytes.slice(from..from + length))
    }
}

/// Every cell of one string column chunk, each checked for UTF-8 on its own.
fn raw_column_cells(
    chunk_reader: Arc<ChunkAt>,
    chunk: &parquet::file::metadata::ColumnChunkMetaData,
    descr: parquet::schema::types::ColumnDescPtr,
    rows: usize,
) -> Result<Vec<IdCell>, ParquetError> {
    use parquet::column::reader::{get_column_reader, ColumnReader};
    let pages = parquet::file::serialized_reader::SerializedPageReader::new(
        chunk_reader,
        chunk,
        rows,
        None,
    )?;
    let max_def = descr.max_def_level();
    let ColumnReader::ByteArrayColumnReader(mut reader) = get_column_reader(descr, Box::new(pages))
    else {
        return Err(ParquetError::General(
            "the id column is not a byte-array column".into(),
        ));
    };
    let mut cells = Vec::with_capacity(rows);
    while cells.len() < rows {
        let mut values = Vec::new();
        let mut levels = Vec::new();
        let (records, _, _) = reader.read_records(
            8192,
            (max_def > 0).then_some(&mut levels),
            None,
            &mut values,
        )?;
        if records == 0 {
            break;
        }
        let mut present = values.iter();
        for i in 0..records {
            let defined = max_def == 0 || levels.get(i) == Some(&max_def);
            cells.push(match (defined, defined.then(|| present.next()).flatten()) {
                (true, Some(v)) => match std::str::from_utf8(v.data()) {
                    Ok(text) => IdCell::Text(text.to_owned()),
                    Err(_) => IdCell::NotUtf8,
                },
                _ => IdCell::Null,
            });
        }
    }
    Ok(cells)
}

/// The Parquet reader's refusal of a string that is not UTF-8 (`parquet::util::utf8`,
/// "encountered non UTF-8 data").
fn is_not_utf8(e: &InventoryError) -> bool {
    matches!(e, InventoryError::Parquet { source, .. } if source.to_string().contains("non UTF-8"))
}

/// How granary writes inventories: row groups and pages sized so that a feeder window touches
/// little, with an offset index so the reader can fetch single pages.
#[derive(Debug, Clone)]
pub struct InventoryLayout {
    pub row_group_rows: usize,
    pub page_rows: usize,
    pub offset_index: bool,
}

impl InventoryLayout {
    /// granary's layout: 128k-row groups, ~1,000-row pages, page index on, no dictionary for ids.
    pub fn granary() -> Self {
        Self {
            row_group_rows: 128 * 1024,
            page_rows: 1024,
            offset_index: true,
        }
    }

    /// The writer settings for this layout.
    pub fn properties(&self) -> WriterProperties {
        WriterProperties::builder()
            .set_max_row_group_row_count(Some(self.row_group_rows))
            .set_data_page_row_count_limit(self.page_rows)
            // Window reads need the offset index (page locations); page-level statistics would
            // add a column index that no reader of ours fetches.
            .set_offset_index_disabled(!self.offset_index)
            .set_statistics_enabled(EnabledStatistics::Chunk)
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            // Ids are unique: a dictionary only adds a large page every window read must fetch.
            .set_column_dictionary_enabled(ColumnPath::from(DEFAULT_ID_COLUMN), false)
            .build()
    }
}

/// What `pyarrow.parquet.write_table` writes by default — the inventories operators already have:
/// 1,048,576-row groups, ~1 MiB pages with no row limit, dictionary encoding, Snappy, chunk-level
/// statistics and no page index.
pub fn pyarrow_default_properties() -> WriterProperties {
    WriterProperties::builder()
        .set_max_row_group_row_count(Some(1024 * 1024))
        .set_data_page_size_limit(1024 * 1024)
        .set_data_page_row_count_limit(usize::MAX)
        .set_dictionary_enabled(true)
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_offset_index_disabled(true)
        .set_compression(Compression::SNAPPY)
        .build()
}

/// One inventory row: an id and when the granule was acquired (ISO-8601).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InventoryRow {
    pub granule_id: String,
    pub start_datetime: String,
}

/// Writes rows (already in feed order, newest first) as a Parquet inventory.
/// The columns of an inventory granary writes: the id, and when the granule was acquired.
pub fn inventory_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new(DEFAULT_ID_COLUMN, DataType::Utf8, false),
        Field::new("start_datetime", DataType::Utf8, false),
    ]))
}

pub fn write_inventory(
    rows: &[InventoryRow],
    layout: &InventoryLayout,
) -> Result<Bytes, ParquetError> {
    let schema = inventory_schema();
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, schema.clone(), Some(layout.properties()))?;
    for chunk in rows.chunks(layout.row_group_rows.max(1)) {
        let ids = StringArray::from_iter_values(chunk.iter().map(|r| r.granule_id.as_str()));
        let dates = StringArray::from_iter_values(chunk.iter().map(|r| r.start_datetime.as_str()));
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(ids), Arc::new(dates)])
            .map_err(|e| ParquetError::General(e.to_string()))?;
        writer.write(&batch)?;
    }
    writer.close()?;
    Ok(Bytes::from(out))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::adapters::memory::MemoryStore;
    use crate::ports::PutCondition;

    /// An inventory whose id column is a Parquet string holding exactly these bytes, valid
    /// UTF-8 or not (ArrowWriter cannot write that; the column writer does not check), in row
    /// groups of `group_rows`, plain-encoded.
    pub(crate) fn inventory_of_bytes(ids: &[&[u8]], group_rows: usize) -> Bytes {
        let cells: Vec<Option<&[u8]>> = ids.iter().map(|b| Some(*b)).collect();
        inventory_of_cells(&cells, group_rows, false)
    }

    /// The same with nulls (`None`; the column is then optional), dictionary-encoded when
    /// `dictionary` (as pyarrow writes by default).
    pub(crate) fn inventory_of_cells(
        cells: &[Option<&[u8]>],
        group_rows: usize,
        dictionary: bool,
    ) -> Bytes {
        use parquet::data_type::{ByteArray, ByteArrayType};
        use parquet::file::writer::SerializedFileWriter;
        let optional = cells.iter().any(Option::is_none);
        let schema = Arc::new(
            parquet::schema::parser::parse_message_type(&format!(
                "message inventory {{ {} binary granule_id (STRING); }}",
                if optional { "optional" } else { "required" }
            ))
            .unwrap(),
        );
        let props = Arc::new(
            WriterProperties::builder()
                .set_dictionary_enabled(dictionary)
                .build(),
        );
        let mut out = Vec::new();
        let mut writer = SerializedFileWriter::new(&mut out, schema, props).unwrap();
        for group in cells.chunks(group_rows) {
            let mut rg = writer.next_row_group().unwrap();
            let mut col = rg.next_column().unwrap().unwrap();
            let values: Vec<ByteArray> = group
                .iter()
                .flatten()
                .map(|b| ByteArray::from(b.to_vec()))
                .collect();
            let levels: Vec<i16> = group.iter().map(|c| i16::from(c.is_some())).collect();
            col.typed::<ByteArrayType>()
                .write_batch(&values, optional.then_some(&levels[..]), None)
                .unwrap();
            col.close().unwrap();
            rg.close().unwrap();
        }
        writer.close().unwrap();
        Bytes::from(out)
    }

    /// One id that is not UTF-8 is a cell of its own; its neighbours, in its row group and
    /// others, read as they are.
    #[tokio::test]
    async fn a_cell_that_is_not_utf8_is_read_as_such_and_its_neighbours_are_read() {
        for (dictionary, nulls) in [(false, false), (true, false), (true, true), (false, true)] {
            a_cell_that_is_not_utf8_among(dictionary, nulls).await;
        }
    }

    async fn a_cell_that_is_not_utf8_among(dictionary: bool, nulls: bool) {
        let good: Vec<String> = (0..40).map(|i| format!("g{i:02}")).collect();
        let mut ids: Vec<Option<&[u8]>> = good.iter().map(|g| Some(g.as_bytes())).collect();
        ids[13] = Some(b"bad\xff\xfeid");
        ids[30] = Some(b"\xc3");
        if nulls {
            ids[14] = None;
            ids[31] = None;
        }
        let store = Arc::new(MemoryStore::new());
        store
            .put(
                "inv.parquet",
                inventory_of_cells(&ids, 16, dictionary),
                PutCondition::Overwrite,
            )
            .await
            .unwrap();
        let inv = Inventory::open(store, "inv.parquet", DEFAULT_ID_COLUMN)
            .await
            .unwrap();
        let cells = inv.read_ids(0, 40).await.unwrap();
        assert_eq!(cells.len(), 40);
        for (i, cell) in cells.iter().enumerate() {
            let want = match i {
                13 | 30 => IdCell::NotUtf8,
                14 | 31 if nulls => IdCell::Null,
                _ => IdCell::Text(good[i].clone()),
            };
            assert_eq!(
                *cell, want,
                "row {i}, dictionary {dictionary}, nulls {nulls}"
            );
        }
        assert_eq!(
            inv.read_ids(10, 5).await.unwrap()[3].granule().unwrap_err(),
            "granule id is not valid UTF-8"
        );
    }

    fn rows(n: usize) -> Vec<InventoryRow> {
        (0..n)
            .map(|i| InventoryRow {
                granule_id: format!("g{i:06}"),
                start_datetime: "2022-01-01T00:00:00Z".into(),
            })
            .collect()
    }

    async fn store_with(n: usize, layout: InventoryLayout) -> Arc<dyn ObjectStore> {
        let store = Arc::new(MemoryStore::new());
        let bytes = write_inventory(&rows(n), &layout).unwrap();
        store
            .put("inv.parquet", bytes, PutCondition::Overwrite)
            .await
            .unwrap();
        store
    }

    #[test]
    fn coalescing() {
        assert_eq!(coalesce(&[10..20, 0..5, 6..8], 1), vec![0..8, 10..20]);
        assert_eq!(coalesce(&[0..5, 100..110], 1000), vec![0..110]);
        assert!(coalesce(&[], 10).is_empty());
    }

    #[tokio::test]
    async fn windows_across_row_groups() {
        let layout = InventoryLayout {
            row_group_rows: 1000,
            page_rows: 100,
            offset_index: true,
        };
        let store = store_with(3500, layout).await;
        let inv = Inventory::open(store, "inv.parquet", DEFAULT_ID_COLUMN)
            .await
            .unwrap();
        assert_eq!(inv.num_rows(), 3500);
        assert_eq!(inv.num_row_groups(), 4);
        for (start, n) in [
            (0u64, 10u64),
            (995, 10),
            (1000, 1000),
            (2999, 2),
            (3490, 100),
            (0, 3500),
            (3500, 5),
        ] {
            let ids = inv.read_ids(start, n).await.unwrap();
            let end = (start + n).min(3500);
            let want: Vec<IdCell> = (start..end)
                .map(|i| IdCell::Text(format!("g{i:06}")))
                .collect();
            assert_eq!(ids, want, "window {start}+{n}");
        }
        assert!(matches!(
            inv.read_ids(3501, 1).await,
            Err(InventoryError::OutOfRange { .. })
        ));
    }

    /// A page map kept from one open reads later windows of its stretch with one GET each and
    /// the same ids as the whole file gives; outside its stretch it refuses.
    #[tokio::test]
    async fn a_page_map_reads_a_window_with_one_get() {
        use crate::adapters::tap::counting::RequestCounts;
        use crate::adapters::tap::TappedStore;
        use std::sync::atomic::Ordering;
        let layout = InventoryLayout {
            row_group_rows: 10_000,
            page_rows: 1024,
            offset_index: true,
        };
        let memory = store_with(45_000, layout).await;
        let whole = Inventory::open(memory.clone(), "inv.parquet", DEFAULT_ID_COLUMN)
            .await
            .unwrap();
        let map = whole.page_map(19_950, 200).unwrap().unwrap();
        assert_eq!(
            (map.first_row, map.rows, map.total_rows),
            (10_000, 20_000, 45_000)
        );
        assert!(map.covers(19_950, 200) && map.covers(10_000, 20_000));
        assert!(!map.covers(9_999, 10) && !map.covers(29_990, 20));
        let counts = Arc::new(RequestCounts::default());
        let store: Arc<dyn ObjectStore> = Arc::new(TappedStore {
            inner: memory,
            tap: counts.clone(),
        });
        let mapped =
            Inventory::from_page_map(store, "inv.parquet", DEFAULT_ID_COLUMN, &map).unwrap();
        assert_eq!(mapped.num_rows(), 45_000);
        assert_eq!(
            counts.s3_get.load(Ordering::Relaxed),
            0,
            "opening costs nothing"
        );
        for (start, n) in [(19_950u64, 200u64), (10_000, 1), (25_000, 4_000)] {
            let before = counts.s3_get.load(Ordering::Relaxed);
            let bytes_before = counts.s3_bytes_read.load(Ordering::Relaxed);
            let ids = mapped.read_ids(start, n).await.unwrap();
            assert_eq!(ids, whole.read_ids(start, n).await.unwrap());
            assert_eq!(
                counts.s3_get.load(Ordering::Relaxed) - before,
                1,
                "{start}+{n}"
            );
            let read = counts.s3_bytes_read.load(Ordering::Relaxed) - bytes_before;
            assert!(read < 64 * 1024, "{read} bytes for {start}+{n}");
        }
        assert!(matches!(
            mapped.read_ids(29_990, 20).await,
            Err(InventoryError::OutOfRange { .. })
        ));
        // A file without an offset index has no page map.
        let foreign = store_with(
            1_000,
            InventoryLayout {
                row_group_rows: 1_000,
                page_rows: 100,
                offset_index: false,
            },
        )
        .await;
        let inv = Inventory::open(foreign, "inv.parquet", DEFAULT_ID_COLUMN)
            .await
            .unwrap();
        assert_eq!(inv.page_map(0, 10).unwrap(), None);
    }

    /// The feeder must not read a large inventory whole to take a window: count what it fetches.
    #[tokio::test]
    async fn a_window_fetches_only_its_pages() {
        use crate::adapters::tap::counting::RequestCounts;
        use crate::adapters::tap::TappedStore;
        use std::sync::atomic::Ordering;
        let layout = InventoryLayout {
            row_group_rows: 50_000,
            page_rows: 1024,
            offset_index: true,
        };
        let memory = store_with(300_000, layout).await;
        let size = memory.get("inv.parquet").await.unwrap().unwrap().body.len() as u64;
        let counts = Arc::new(RequestCounts::default());
        let store: Arc<dyn ObjectStore> = Arc::new(TappedStore {
            inner: memory,
            tap: counts.clone(),
        });
        let inv = Inventory::open(store, "inv.parquet", DEFAULT_ID_COLUMN)
            .await
            .unwrap();
        let footer_bytes = counts.s3_bytes_read.load(Ordering::Relaxed);
        let ids = inv.read_ids(175_500, 1000).await.unwrap();
        assert_eq!(ids.first().and_then(IdCell::text), Some("g175500"));
        assert_eq!(ids.len(), 1000);
        let window_bytes = counts.s3_bytes_read.load(Ordering::Relaxed) - footer_bytes;
        let requests = counts.s3_get.load(Ordering::Relaxed);
        assert!(requests <= 3, "{requests} GETs");
        // two or three ~1,000-row pages of one column, out of a 300,000-row file
        assert!(
            window_bytes * 20 < size,
            "window read {window_bytes} of {size} bytes"
        );
    }

    #[tokio::test]
    async fn truncated_and_wrong_files_are_clear_errors() {
        let store = Arc::new(MemoryStore::new());
        let bytes = write_inventory(&rows(100), &InventoryLayout::granary()).unwrap();
        store
            .put(
                "trunc.parquet",
                bytes.slice(..bytes.len() / 2),
                PutCondition::Overwrite,
            )
            .await
            .unwrap();
        store
            .put(
                "json.parquet",
                Bytes::from_static(b"{\"not\": \"parquet\"}"),
                PutCondition::Overwrite,
            )
            .await
            .unwrap();
        let s: Arc<dyn ObjectStore> = store.clone();
        assert!(matches!(
            Inventory::open(s.clone(), "trunc.parquet", "granule_id").await,
            Err(InventoryError::Parquet { .. })
        ));
        assert!(matches!(
            Inventory::open(s.clone(), "json.parquet", "granule_id").await,
            Err(InventoryError::Parquet { .. })
        ));
        assert!(matches!(
            Inventory::open(s.clone(), "missing.parquet", "granule_id").await,
            Err(InventoryError::Store { .. })
        ));
        store
            .put("ok.parquet", bytes, PutCondition::Overwrite)
            .await
            .unwrap();
        assert!(matches!(
            Inventory::open(s.clone(), "ok.parquet", "nope").await,
            Err(InventoryError::NoIdColumn { .. })
        ));
    }
}
