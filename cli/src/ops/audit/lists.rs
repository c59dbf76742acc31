//! The audit's lists on disk, each as CSV and as Parquet (`<list>.csv`, `<list>.parquet`), with
//! the same three columns: `granule_id`, `attempt` (the latest attempt logged, or 1: the one a rerun sends round),
//! `detail`. Rows are written as the merge finds them, a batch at a time. `read_list` reads
//! either back for `granary resume --from-list` and `granary redrive --from-list`.

use anyhow::{bail, Context, Result};
use arrow::array::{Array, ArrayRef, StringArray, UInt32Array};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use granary::domain::audit::{AuditList, Finding};
use parquet::arrow::ArrowWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Rows a Parquet batch holds before it is written.
const BATCH_ROWS: usize = 8192;

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("granule_id", DataType::Utf8, false),
        Field::new("attempt", DataType::UInt32, false),
        Field::new("detail", DataType::Utf8, false),
    ]))
}

struct ListFiles {
    csv: csv::Writer<std::fs::File>,
    parquet: ArrowWriter<std::fs::File>,
    pending: Vec<Finding>,
    rows: u64,
}

/// One writer per list, in a directory.
pub struct ListWriters {
    dir: PathBuf,
    files: Vec<(AuditList, ListFiles)>,
}

impl ListWriters {
    pub fn create(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut files = Vec::new();
        for list in AuditList::ALL {
            let at = |ext: &str| dir.join(format!("{}.{ext}", list.name()));
            let create = |p: PathBuf| {
                std::fs::File::create(&p).with_context(|| format!("creating {}", p.display()))
            };
            let mut csv = csv::Writer::from_writer(create(at("csv"))?);
            csv.write_record(["granule_id", "attempt", "detail"])?;
            let parquet = ArrowWriter::try_new(create(at("parquet"))?, schema(), None)?;
            files.push((
                list,
                ListFiles {
                    csv,
                    parquet,
                    pending: Vec::new(),
                    rows: 0,
                },
            ));
        }
        Ok(Self {
            dir: dir.to_owned(),
            files,
        })
    }

    pub fn write(&mut self, finding: Finding) -> Result<()> {
        let Some((_, f)) = self.files.iter_mut().find(|(l, _)| *l == finding.list) else {
            bail!("no file for the list {:?}", finding.list);
        };
        f.csv.write_record([
            finding.granule_id.as_str(),
            &finding.attempt.to_string(),
            finding.detail.as_str(),
        ])?;
        f.rows += 1;
        f.pending.push(finding);
        if f.pending.len() >= BATCH_ROWS {
            flush(f)?;
        }
        Ok(())
    }

    /// Closes every file; the rows each list got.
    pub fn finish(mut self) -> Result<Vec<(AuditList, u64, PathBuf)>> {
        let mut out = Vec::new();
        for (list, mut f) in self.files.drain(..) {
            flush(&mut f)?;
            f.csv.flush()?;
            f.parquet.close()?;
            out.push((list, f.rows, self.dir.join(format!("{}.csv", list.name()))));
        }
        Ok(out)
    }
}

fn flush(f: &mut ListFiles) -> Result<()> {
    if f.pending.is_empty() {
        return Ok(());
    }
    let rows = std::mem::take(&mut f.pending);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.granule_id.as_str()),
        )),
        Arc::new(UInt32Array::from_iter_values(
            rows.iter().map(|r| r.attempt),
        )),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.detail.as_str()),
        )),
    ];
    f.parquet.write(&RecordBatch::try_new(schema(), columns)?)?;
    Ok(())
}

/// One row of a list read back: a granule and, where the file has the column, its attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub granule_id: String,
    pub attempt: Option<u32>,
}

/// A list written by `granary audit` (CSV or Parquet, by its extension), or any CSV or Parquet
/// file with a `granule_id` column (`attempt` optional). Errors name the file and the row.
pub fn read_list(path: &Path) -> Result<Vec<Listed>> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or_default();
    match ext {
        "csv" => read_csv(path),
        "parquet" => read_parquet(path),
        _ => bail!(
            "{}: a list is a .csv or .parquet file with a granule_id column (as `granary audit` writes)",
            path.display()
        ),
    }
}

fn read_csv(path: &Path) -> Result<Vec<Listed>> {
    let mut r = csv::Reader::from_path(path).with_context(|| format!("{}", path.display()))?;
    let headers = r
        .headers()
        .with_context(|| format!("{}: header", path.display()))?;
    let column = |name: &str| headers.iter().position(|h| h == name);
    let Some(id) = column("granule_id") else {
        bail!("{}: no granule_id column in the header", path.display());
    };
    let attempt = column("attempt");
    let mut out = Vec::new();
    for (i, row) in r.records().enumerate() {
        let line = i + 2;
        let row = row.with_context(|| format!("{}:{line}", path.display()))?;
        let granule_id = row.get(id).unwrap_or_default().trim().to_owned();
        if granule_id.is_empty() {
            bail!("{}:{line}: the granule_id is empty", path.display());
        }
        let attempt = match attempt.and_then(|a| row.get(a)) {
            None => None,
            Some(a) => Some(a.trim().parse().with_context(|| {
                format!("{}:{line}: attempt {a:?} is not a number", path.display())
            })?),
        };
        out.push(Listed {
            granule_id,
            attempt,
        });
    }
    Ok(out)
}

fn read_parquet(path: &Path) -> Result<Vec<Listed>> {
    let file = std::fs::File::open(path).with_context(|| format!("{}", path.display()))?;
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .with_context(|| format!("{}: not a Parquet file", path.display()))?
        .build()?;
    let mut out = Vec::new();
    for batch in reader {
        let batch = batch.with_context(|| format!("{}: unreadable", path.display()))?;
        let ids = batch
            .column_by_name("granule_id")
            .and_then(|c| c.as_any().downcast_ref::<StringArray>())
            .with_context(|| format!("{}: no granule_id text column", path.display()))?;
        let attempts = batch
            .column_by_name("attempt")
            .and_then(|c| c.as_any().downcast_ref::<UInt32Array>());
        for row in 0..batch.num_rows() {
            if ids.is_null(row) {
                bail!(
                    "{}: row {} has no granule_id",
                    path.display(),
                    out.len() + 1
                );
            }
            out.push(Listed {
                granule_id: ids.value(row).to_owned(),
                attempt: attempts.filter(|a| !a.is_null(row)).map(|a| a.value(row)),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_reads_back_and_a_bad_one_names_its_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = ListWriters::create(dir.path()).unwrap();
        w.write(Finding {
            list: AuditList::Missing,
            granule_id: "G1".into(),
            attempt: 2,
            detail: "a, \"quoted\" detail".into(),
        })
        .unwrap();
        w.finish().unwrap();
        let want = vec![Listed {
            granule_id: "G1".into(),
            attempt: Some(2),
        }];
        assert_eq!(read_list(&dir.path().join("missing.csv")).unwrap(), want);
        assert_eq!(
            read_list(&dir.path().join("missing.parquet")).unwrap(),
            want
        );
        let bad = dir.path().join("bad.csv");
        std::fs::write(&bad, "granule_id,attempt\nG1,1\nG2,two\n").unwrap();
        let e = format!("{:#}", read_list(&bad).unwrap_err());
        assert!(e.contains("bad.csv:3") && e.contains("\"two\""), "{e}");
        std::fs::write(&bad, "id\nG1\n").unwrap();
        let e = format!("{:#}", read_list(&bad).unwrap_err());
        assert!(e.contains("no granule_id column"), "{e}");
        let e = format!("{:#}", read_list(&dir.path().join("ids.txt")).unwrap_err());
        assert!(e.contains(".csv or .parquet"), "{e}");
    }
}
