//! An inventory opened for reading windows of its id column.

use super::*;

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
        let (groups, group_start) = self.groups_overlapping(start, end);
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
            reader.prefetched = Arc::new(self.fetch_pages(&pages).await?);
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
            self.push_ids(batch, &mut ids)?;
        }
        Ok(ids)
    }

    /// The row groups overlapping rows `start .. end`, and the row where the first one begins.
    fn groups_overlapping(&self, start: u64, end: u64) -> (Vec<usize>, u64) {
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
        (groups, first_group_start.unwrap_or(0))
    }

    /// The pages the window needs, fetched in coalesced ranges (one GET where they lie close).
    async fn fetch_pages(
        &self,
        pages: &[std::ops::Range<u64>],
    ) -> Result<Vec<(std::ops::Range<u64>, Bytes)>, InventoryError> {
        let mut fetched = Vec::new();
        for span in coalesce(pages, COALESCE_GAP) {
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
        Ok(fetched)
    }

    /// The id column of one decoded batch appended to `ids` (a null stays a null cell).
    fn push_ids(&self, batch: &RecordBatch, ids: &mut Vec<IdCell>) -> Result<(), InventoryError> {
        let col = batch.column(0);
        let push = |ids: &mut Vec<IdCell>, v: Option<&str>| {
            ids.push(v.map_or(IdCell::Null, |t| IdCell::Text(t.to_owned())))
        };
        match col.data_type() {
            DataType::Utf8 => col.as_string::<i32>().iter().for_each(|v| push(ids, v)),
            DataType::LargeUtf8 => col.as_string::<i64>().iter().for_each(|v| push(ids, v)),
            DataType::Utf8View => col.as_string_view().iter().for_each(|v| push(ids, v)),
            other => {
                return Err(InventoryError::IdColumnType {
                    key: self.key.clone(),
                    column: self.id_column.clone(),
                    found: other.to_string(),
                })
            }
        }
        Ok(())
    }
}
