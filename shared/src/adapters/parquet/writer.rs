//! Writing inventories laid out so that a window is cheap to read.

use super::*;

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
