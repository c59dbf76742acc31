//! Reading an id column cell by cell, raw: for a window holding bytes that are not UTF-8, so
//! the one bad row is rejected and the rest are read.

use super::*;

/// One column chunk's bytes, answering reads at the file offsets the metadata names.
pub(super) struct ChunkAt {
    pub(super) at: u64,
    pub(super) bytes: Bytes,
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
pub(super) fn raw_column_cells(
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
pub(super) fn is_not_utf8(e: &InventoryError) -> bool {
    matches!(e, InventoryError::Parquet { source, .. } if source.to_string().contains("non UTF-8"))
}
