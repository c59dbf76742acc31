//! Parquet granule inventories: read a window of rows touching only the bytes that hold it, and
//! write inventories laid out so that such windows are cheap.
//!
//! Reading: the footer comes with one suffix GET (64 KiB, more only if the footer is larger);
//! then only the row groups overlapping the window and only the id column are fetched, and when the
//! file has an offset index only the pages holding the window. Nearby ranges are merged into one
//! GET, since a request costs more than a few wasted kilobytes.

mod cells;
mod error;
mod reader;
mod store_reader;
mod writer;

use cells::*;
pub use error::*;
pub use reader::*;
use store_reader::*;
pub use writer::*;

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
pub use crate::domain::tracker::PageMap;
const FOOTER_PREFETCH: usize = 64 * 1024;
/// Ranges closer than this are fetched with one GET.
const COALESCE_GAP: u64 = 1024 * 1024;

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
            inv.read_ids(10, 5).await.unwrap()[3]
                .granule()
                .unwrap_err()
                .to_string(),
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
