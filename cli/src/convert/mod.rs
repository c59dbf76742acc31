//! `granary inventory convert`: any list of granule ids (text, CSV, JSON lines, Parquet) to an
//! inventory in granary's layout, sorted newest first by the id parser's time, duplicates and
//! invalid ids left out and counted. Streaming: the ids go through an external sort
//! ([`sort::Sorter`]) with a memory budget, and the Parquet file is written a row group at a time.

pub mod sort;

use anyhow::{bail, Context, Result};
use granary::adapters::parquet::{inventory_schema, InventoryLayout};
use granary::domain::granule::{GranuleId, IdParser};
use serde::Serialize;
use sort::{Entry, Sorter, UNDATED};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How an input lists its ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// One id a line.
    Text,
    /// A header row and an id column.
    Csv,
    /// One JSON object a line with an id field.
    Jsonl,
    /// A Parquet file with an id column.
    Parquet,
}

impl Format {
    /// The format a file name says: .csv, .jsonl/.ndjson/.json, .parquet; anything else is text.
    pub fn of(path: &Path) -> Self {
        match path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("csv") => Format::Csv,
            Some("jsonl" | "ndjson" | "json") => Format::Jsonl,
            Some("parquet") => Format::Parquet,
            _ => Format::Text,
        }
    }
}

pub struct Options {
    pub inputs: Vec<PathBuf>,
    /// Every input's format; `None` guesses each from its name.
    pub format: Option<Format>,
    /// The id column of CSV, JSON-lines and Parquet inputs.
    pub id_column: String,
    pub id_parser: IdParser,
    /// Memory the sort may hold before it spills to run files.
    pub memory_budget_bytes: usize,
    pub layout: InventoryLayout,
    /// Only the first this many ids of the inputs (valid or not), in the inputs' order: a dry run
    /// over part of an inventory (`granary-local demo --inventory FILE --granules N`).
    pub first: Option<u64>,
}

/// An id that was left out, and where it was.
#[derive(Debug, Clone, Serialize)]
pub struct Invalid {
    pub at: String,
    pub why: String,
}

const INVALID_SAMPLE: usize = 5;

#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// Ids read from the inputs (valid or not).
    pub read: u64,
    pub written: u64,
    pub duplicates: u64,
    pub invalid: u64,
    /// The first few invalid ids.
    pub invalid_sample: Vec<Invalid>,
    /// Valid ids the id parser reads no time from: written after every dated one.
    pub undated: u64,
    /// Ids past `Options::first`, read and left out.
    pub beyond_first: u64,
    pub newest: Option<String>,
    pub oldest: Option<String>,
    /// Sorted run files the sort spilled to disk (0: it fitted in memory).
    pub sort_runs: usize,
    pub bytes_written: u64,
}

/// What the conversion reports as it goes (bytes of input read, rows written).
pub trait Progress {
    fn read(&self, bytes: u64);
    fn written(&self, rows: u64);
}

/// Reads the inputs, sorts, and writes the inventory to `out`.
pub fn convert(options: &Options, out: std::fs::File, progress: &dyn Progress) -> Result<Summary> {
    let mut summary = Summary::default();
    let mut sorter = Sorter::new(options.memory_budget_bytes);
    for path in &options.inputs {
        let format = options.format.unwrap_or_else(|| Format::of(path));
        let mut take = |raw: Option<&str>, at: &dyn Fn() -> String| -> Result<()> {
            if options.first.is_some_and(|n| summary.read >= n) {
                summary.beyond_first += 1;
                return Ok(());
            }
            summary.read += 1;
            let checked = match raw {
                None => Err("no id".to_owned()),
                Some(text) => GranuleId::parse(text).map_err(|e| e.to_string()),
            };
            match checked {
                Ok(id) => {
                    let at = options
                        .id_parser
                        .acquired_at(id.as_str())
                        .map_or(UNDATED, |t| t.and_utc().timestamp());
                    if at == UNDATED {
                        summary.undated += 1;
                    }
                    sorter
                        .push(Entry {
                            at,
                            id: id.as_str().to_owned(),
                        })
                        .context("spilling sorted ids to a temporary file")?;
                }
                Err(why) => {
                    summary.invalid += 1;
                    if summary.invalid_sample.len() < INVALID_SAMPLE {
                        summary.invalid_sample.push(Invalid { at: at(), why });
                    }
                }
            }
            Ok(())
        };
        read_input(path, format, &options.id_column, progress, &mut take)
            .with_context(|| format!("reading {} as {format:?}", path.display()))?;
    }
    summary.sort_runs = sorter.runs();
    let mut merged = sorter.finish().context("sorting")?;
    let (written, bytes) = write_sorted(&mut merged, out, options, &mut summary, progress)?;
    summary.written = written;
    summary.bytes_written = bytes;
    summary.duplicates = merged.duplicates;
    Ok(summary)
}

type Take<'a> = dyn FnMut(Option<&str>, &dyn Fn() -> String) -> Result<()> + 'a;

fn open(path: &Path) -> Result<Box<dyn Read>> {
    if path == Path::new("-") {
        return Ok(Box::new(std::io::stdin()));
    }
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    Ok(Box::new(file))
}

/// Counts bytes as they are read, for the progress bar.
struct Counted<'a, R> {
    inner: R,
    progress: &'a dyn Progress,
}

impl<R: Read> Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.progress.read(n as u64);
        Ok(n)
    }
}

fn read_input(
    path: &Path,
    format: Format,
    id_column: &str,
    progress: &dyn Progress,
    take: &mut Take<'_>,
) -> Result<()> {
    let name = path.display().to_string();
    if format == Format::Parquet {
        return read_parquet(path, id_column, progress, take);
    }
    let reader = BufReader::with_capacity(
        1 << 20,
        Counted {
            inner: open(path)?,
            progress,
        },
    );
    match format {
        Format::Text => {
            for (n, line) in reader.lines().enumerate() {
                let line = line.with_context(|| format!("line {}", n + 1))?;
                let id = line.trim();
                if id.is_empty() {
                    continue;
                }
                take(Some(id), &|| format!("{name}:{}", n + 1))?;
            }
        }
        Format::Jsonl => {
            for (n, line) in reader.lines().enumerate() {
                let line = line.with_context(|| format!("line {}", n + 1))?;
                if line.trim().is_empty() {
                    continue;
                }
                let value: Option<serde_json::Value> = serde_json::from_str(&line).ok();
                let id = value
                    .as_ref()
                    .and_then(|v| v.get(id_column))
                    .and_then(|v| v.as_str());
                take(id, &|| format!("{name}:{}", n + 1))?;
            }
        }
        Format::Csv => {
            let mut csv = csv::ReaderBuilder::new().flexible(true).from_reader(reader);
            let headers = csv.headers().context("reading the CSV header")?.clone();
            let Some(column) = headers.iter().position(|h| h.trim() == id_column) else {
                bail!(
                    "no column {id_column:?} in the header (columns: {}); name the id column with --id-column",
                    headers.iter().collect::<Vec<_>>().join(", ")
                );
            };
            for (n, record) in csv.records().enumerate() {
                let record = record.with_context(|| format!("CSV record {}", n + 1))?;
                let id = record.get(column).map(str::trim).filter(|s| !s.is_empty());
                take(id, &|| format!("{name}:{}", n + 2))?;
            }
        }
        Format::Parquet => unreachable!("read above"),
    }
    Ok(())
}

fn read_parquet(
    path: &Path,
    id_column: &str,
    progress: &dyn Progress,
    take: &mut Take<'_>,
) -> Result<()> {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::DataType;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::arrow::ProjectionMask;
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(file).context("not a readable Parquet file")?;
    let schema = builder.parquet_schema();
    let Some(index) = schema
        .columns()
        .iter()
        .position(|c| c.path().string() == id_column)
    else {
        bail!(
            "no column {id_column:?} (columns: {}); name the id column with --id-column",
            schema
                .columns()
                .iter()
                .map(|c| c.path().string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    let rows = builder.metadata().file_metadata().num_rows().max(1) as u64;
    let mask = ProjectionMask::leaves(schema, [index]);
    let reader = builder
        .with_projection(mask)
        .with_batch_size(64 * 1024)
        .build()?;
    let name = path.display().to_string();
    let mut row = 0u64;
    for batch in reader {
        let batch = batch.context("reading a row group")?;
        let col = batch.column(0);
        let mut each = |v: Option<&str>| -> Result<()> {
            row += 1;
            let at = row;
            take(v, &|| format!("{name}#row={}", at - 1))
        };
        match col.data_type() {
            DataType::Utf8 => col.as_string::<i32>().iter().try_for_each(&mut each)?,
            DataType::LargeUtf8 => col.as_string::<i64>().iter().try_for_each(&mut each)?,
            DataType::Utf8View => col.as_string_view().iter().try_for_each(&mut each)?,
            other => bail!("column {id_column:?} is {other}, not a string column"),
        }
        progress.read(size * batch.num_rows() as u64 / rows);
    }
    Ok(())
}

/// Writes the merged ids a row group at a time; returns rows and bytes written.
fn write_sorted(
    merged: &mut sort::Merged,
    out: std::fs::File,
    options: &Options,
    summary: &mut Summary,
    progress: &dyn Progress,
) -> Result<(u64, u64)> {
    use arrow::array::StringBuilder;
    use arrow::record_batch::RecordBatch;
    use parquet::arrow::ArrowWriter;
    let schema = inventory_schema();
    let mut writer = ArrowWriter::try_new(out, schema.clone(), Some(options.layout.properties()))
        .context("starting the Parquet file")?;
    let group = options.layout.row_group_rows.max(1);
    let mut written = 0u64;
    let mut last = None;
    loop {
        let mut ids = StringBuilder::with_capacity(group, group * 40);
        let mut times = StringBuilder::with_capacity(group, group * 20);
        let mut n = 0;
        while n < group {
            let Some(e) = merged.next_entry().context("reading the sorted runs")? else {
                break;
            };
            if summary.newest.is_none() {
                summary.newest = Some(e.id.clone());
            }
            ids.append_value(&e.id);
            times.append_value(if e.at == UNDATED {
                String::new()
            } else {
                chrono::DateTime::from_timestamp(e.at, 0)
                    .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
                    .unwrap_or_default()
            });
            last = Some(e.id);
            n += 1;
        }
        if n == 0 {
            break;
        }
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(ids.finish()), Arc::new(times.finish())],
        )?;
        writer.write(&batch).context("writing a row group")?;
        written += n as u64;
        progress.written(written);
        if n < group {
            break;
        }
    }
    summary.oldest = last;
    let file = writer.into_inner().context("finishing the Parquet file")?;
    let bytes = file
        .metadata()
        .map(|m| m.len())
        .context("the written file")?;
    Ok((written, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Quiet;
    impl Progress for Quiet {
        fn read(&self, _: u64) {}
        fn written(&self, _: u64) {}
    }

    fn options(inputs: Vec<PathBuf>, budget: usize) -> Options {
        Options {
            inputs,
            format: None,
            id_column: "granule_id".into(),
            id_parser: IdParser::hls(),
            memory_budget_bytes: budget,
            first: None,
            layout: InventoryLayout {
                row_group_rows: 3,
                ..InventoryLayout::granary()
            },
        }
    }

    fn ids_in(path: &Path) -> Vec<String> {
        use arrow::array::AsArray;
        let file = std::fs::File::open(path).unwrap();
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap();
        reader
            .flat_map(|b| {
                let b = b.unwrap();
                b.column(0)
                    .as_string::<i32>()
                    .iter()
                    .map(|v| v.unwrap().to_owned())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn every_format_in_one_file_newest_first_duplicates_and_invalid_counted() {
        let dir = tempfile::tempdir().unwrap();
        let p = |n: &str| dir.path().join(n);
        std::fs::write(
            p("a.txt"),
            "HLS.S30.T18TYN.2022002T153012.v2.0\n\nHLS.L30.T18TYN.2022001T153012.v2.0\nbad/id\n",
        )
        .unwrap();
        std::fs::write(
            p("b.csv"),
            "size,granule_id\n1,HLS.S30.T18TYN.2022003T153012.v2.0\n2,HLS.S30.T18TYN.2022002T153012.v2.0\n3,\n",
        )
        .unwrap();
        std::fs::write(
            p("c.jsonl"),
            "{\"granule_id\": \"HLS.S30.T18TYN.2021365T000000.v2.0\"}\n{\"other\": 1}\nnot json\n{\"granule_id\": \"zz-undated\"}\n",
        )
        .unwrap();
        let rows = [
            "HLS.L30.T18TYN.2022003T153012.v2.0",
            "HLS.S30.T18TYN.2022003T153012.v2.0",
        ]
        .map(|g| granary::adapters::parquet::InventoryRow {
            granule_id: g.into(),
            start_datetime: String::new(),
        });
        std::fs::write(
            p("d.parquet"),
            granary::adapters::parquet::write_inventory(&rows, &InventoryLayout::granary())
                .unwrap(),
        )
        .unwrap();
        for budget in [1usize << 20, 1] {
            let out = p("out.parquet");
            let summary = convert(
                &options(
                    vec![p("a.txt"), p("b.csv"), p("c.jsonl"), p("d.parquet")],
                    budget,
                ),
                std::fs::File::create(&out).unwrap(),
                &Quiet,
            )
            .unwrap();
            assert_eq!(
                ids_in(&out),
                vec![
                    "HLS.L30.T18TYN.2022003T153012.v2.0",
                    "HLS.S30.T18TYN.2022003T153012.v2.0",
                    "HLS.S30.T18TYN.2022002T153012.v2.0",
                    "HLS.L30.T18TYN.2022001T153012.v2.0",
                    "HLS.S30.T18TYN.2021365T000000.v2.0",
                    "zz-undated",
                ],
                "budget {budget}"
            );
            assert_eq!(
                (summary.read, summary.written, summary.duplicates),
                (12, 6, 2)
            );
            assert_eq!((summary.invalid, summary.undated), (4, 1));
            let sample: Vec<&str> = summary
                .invalid_sample
                .iter()
                .map(|i| i.at.as_str())
                .collect();
            assert!(sample[0].ends_with("a.txt:4"), "{sample:?}");
            assert!(sample[1].ends_with("b.csv:4"), "{sample:?}");
        }
    }

    #[test]
    fn unreadable_input_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let out = std::fs::File::create(dir.path().join("o.parquet")).unwrap();
        let e = convert(
            &options(vec![dir.path().join("missing.txt")], 1 << 20),
            out.try_clone().unwrap(),
            &Quiet,
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("cannot open"), "{e:#}");
        std::fs::write(dir.path().join("x.csv"), "a,b\n1,2\n").unwrap();
        let e = convert(
            &options(vec![dir.path().join("x.csv")], 1 << 20),
            out,
            &Quiet,
        )
        .unwrap_err();
        assert!(
            format!("{e:#}").contains("no column \"granule_id\""),
            "{e:#}"
        );
    }
}
