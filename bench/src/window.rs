//! `granary-bench window` and `window-read`: the feeder's window read, measured per process.

use super::*;

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct WindowFigures {
    /// The page map's size as the tracker keeps it (base64), when one was kept.
    #[serde(default)]
    pub(crate) page_map_bytes: u64,
    pub(crate) median_ms: f64,
    pub(crate) requests: u64,
    pub(crate) bytes: u64,
    pub(crate) peak_rss_kib: u64,
}

pub(crate) fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// HLS-like rows, newest first: granule_id, start_datetime, status, published.
pub(crate) fn write_inventory(rows: u64, props: WriterProperties) -> Result<Vec<u8>> {
    let schema = Arc::new(Schema::new(vec![
        Field::new(DEFAULT_ID_COLUMN, DataType::Utf8, false),
        Field::new("start_datetime", DataType::Utf8, false),
        Field::new("status", DataType::Utf8, false),
        Field::new("published", DataType::Utf8, false),
    ]));
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, schema.clone(), Some(props))?;
    let start = chrono::NaiveDate::from_ymd_opt(2025, 2, 8)
        .and_then(|d| d.and_hms_opt(23, 59, 59))
        .context("date")?;
    let chunk = 262_144u64;
    let mut i = 0u64;
    while i < rows {
        let end = (i + chunk).min(rows);
        let (mut ids, mut starts, mut statuses, mut published) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for r in i..end {
            // ~20 granules per minute over the archive, newest first; tiles and platforms vary.
            let t = start - chrono::Duration::seconds((r * 3) as i64);
            let platform = if r % 5 < 3 { "S30" } else { "L30" };
            let zone = 1 + (r * 7919) % 60;
            let letters: String = [(r * 31) % 26, (r * 17) % 26, (r * 13) % 26]
                .iter()
                .map(|x| char::from(b'A' + *x as u8))
                .collect();
            ids.push(format!(
                "HLS.{platform}.T{zone:02}{letters}.{}.v2.0",
                t.format("%Y%jT%H%M%S")
            ));
            starts.push(t.format("%Y-%m-%dT%H:%M:%SZ").to_string());
            statuses.push(if r % 97 == 0 { "reprocess" } else { "ok" });
            published.push(
                (t + chrono::Duration::days(2))
                    .format("%Y-%m-%d")
                    .to_string(),
            );
        }
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(ids)),
                Arc::new(StringArray::from(starts)),
                Arc::new(StringArray::from(statuses)),
                Arc::new(StringArray::from(published)),
            ],
        )?;
        writer.write(&batch)?;
        i = end;
    }
    writer.close()?;
    Ok(out)
}

pub(crate) async fn window_read(
    bucket: &str,
    key: &str,
    start: u64,
    n: u64,
    reps: usize,
    page_map: bool,
) -> Result<WindowFigures> {
    let clients = AwsClients::new(&load_sdk_config().await);
    let s3: Arc<dyn ObjectStore> = Arc::new(S3Store::new(clients.s3.clone(), bucket));
    let mut times = Vec::new();
    let mut last = (0, 0);
    let mut map_bytes = 0;
    for _ in 0..reps.max(1) {
        let counts = Arc::new(RequestCounts::default());
        let store: Arc<dyn ObjectStore> = Arc::new(TappedStore {
            inner: s3.clone(),
            tap: counts.clone(),
        });
        let map = if page_map {
            Inventory::open(s3.clone(), key, DEFAULT_ID_COLUMN)
                .await?
                .page_map(start, n + 128 * 1024)?
        } else {
            None
        };
        map_bytes = map.as_ref().map_or(0, |m| m.metadata.len() as u64);
        let t = Instant::now();
        // A feeder run opens the inventory afresh each time: footer included in the cost,
        // unless it kept a page map from an earlier run.
        let inv = match &map {
            Some(map) => Inventory::from_page_map(store, key, DEFAULT_ID_COLUMN, map)?,
            None => Inventory::open(store, key, DEFAULT_ID_COLUMN).await?,
        };
        let ids = inv.read_ids(start, n).await?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        anyhow::ensure!(
            ids.len() as u64 == n.min(inv.num_rows() - start),
            "short window"
        );
        last = (
            counts.s3_get.load(Ordering::Relaxed),
            counts.s3_bytes_read.load(Ordering::Relaxed),
        );
    }
    times.sort_by(|a, b| a.total_cmp(b));
    Ok(WindowFigures {
        page_map_bytes: map_bytes,
        median_ms: times[times.len() / 2],
        requests: last.0,
        bytes: last.1,
        peak_rss_kib: peak_rss_kib(),
    })
}

pub(crate) async fn window(
    rows: Vec<u64>,
    reps: usize,
    n: u64,
    files: Vec<std::path::PathBuf>,
) -> Result<()> {
    let clients = AwsClients::new(&load_sdk_config().await);
    let bucket = format!("granary-bench-{}", std::process::id());
    clients
        .s3
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .context("creating the bench bucket (is AWS_ENDPOINT_URL set? use `make bench`)")?;
    let s3 = S3Store::new(clients.s3.clone(), &bucket);
    let window_read = WindowRead {
        me: std::env::current_exe()?,
        bucket: &bucket,
        n,
        reps,
    };
    let mut table = window_table();
    let mut inputs = upload_inventories(&s3, &rows).await?;
    upload_given_files(&s3, &files, &mut inputs).await?;
    for input in inputs {
        measure_window_input(&s3, &window_read, input, &mut table).await?;
    }
    println!("Feeder window read: {n} rows, median of {reps}, each in a fresh process\n{table}");
    Ok(())
}

/// The window bench's table, one row a layout, size and window position.
fn window_table() -> Table {
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header([
        "layout",
        "rows",
        "file MB",
        "row groups",
        "window at",
        "median ms",
        "GETs",
        "bytes fetched",
        "peak RSS MiB",
        "page map bytes",
    ]);
    table
}

/// One inventory file to read windows of.
struct WindowInput {
    label: String,
    key: String,
    file_mb: f64,
    /// Whether the feeder keeps a page map for it.
    page_map: bool,
}

/// Inventories of each size in both layouts, written and uploaded (the granary layout twice:
/// with and without the page map kept).
async fn upload_inventories(s3: &S3Store, rows: &[u64]) -> Result<Vec<WindowInput>> {
    let mut inputs = Vec::new();
    for &size in rows {
        for (layout, props) in [
            ("pyarrow default", pyarrow_default_properties()),
            ("granary", InventoryLayout::granary().properties()),
        ] {
            let t = Instant::now();
            let bytes = write_inventory(size, props)?;
            let file_mb = bytes.len() as f64 / 1e6;
            let key = format!("inventories/{}-{size}.parquet", layout.replace(' ', "-"));
            s3.put(&key, bytes.into(), PutCondition::Overwrite).await?;
            eprintln!(
                "wrote {key}: {file_mb:.1} MB in {:.1} s",
                t.elapsed().as_secs_f64()
            );
            inputs.push(WindowInput {
                label: layout.to_owned(),
                key: key.clone(),
                file_mb,
                page_map: false,
            });
            if layout == "granary" {
                inputs.push(WindowInput {
                    label: "granary, page map kept".to_owned(),
                    key,
                    file_mb,
                    page_map: true,
                });
            }
        }
    }
    Ok(inputs)
}

/// The Parquet files given on the command line, uploaded as they are (each with and without
/// the page map kept).
async fn upload_given_files(
    s3: &S3Store,
    files: &[std::path::PathBuf],
    inputs: &mut Vec<WindowInput>,
) -> Result<()> {
    for path in files {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "file".to_owned());
        let key = format!("inventories/given-{name}");
        let file_mb = bytes.len() as f64 / 1e6;
        s3.put(&key, bytes.into(), PutCondition::Overwrite).await?;
        inputs.push(WindowInput {
            label: name.clone(),
            key: key.clone(),
            file_mb,
            page_map: false,
        });
        inputs.push(WindowInput {
            label: format!("{name}, page map kept"),
            key,
            file_mb,
            page_map: true,
        });
    }
    Ok(())
}

/// How each window is read: `n` rows, `reps` times, by this binary's `window-read` in a child
/// process.
struct WindowRead<'a> {
    me: std::path::PathBuf,
    bucket: &'a str,
    n: u64,
    reps: usize,
}

impl WindowRead<'_> {
    /// The window at `start` of `key`, read in a fresh child process.
    fn run(&self, key: &str, start: u64, page_map: bool) -> Result<WindowFigures> {
        let mut cmd = std::process::Command::new(&self.me);
        cmd.args(["window-read", "--bucket", self.bucket, "--key", key])
            .args([
                "--start",
                &start.to_string(),
                "--n",
                &self.n.to_string(),
                "--reps",
                &self.reps.to_string(),
            ]);
        if page_map {
            cmd.arg("--page-map");
        }
        let out = cmd.output()?;
        anyhow::ensure!(
            out.status.success(),
            "window-read failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(serde_json::from_slice(&out.stdout)?)
    }
}

/// The input's windows at its start, middle and end, each a row of the table.
async fn measure_window_input(
    s3: &S3Store,
    window_read: &WindowRead<'_>,
    input: WindowInput,
    table: &mut Table,
) -> Result<()> {
    let WindowInput {
        label: layout,
        key,
        file_mb,
        page_map,
    } = input;
    let inv = Inventory::open(Arc::new(s3.clone()), &key, DEFAULT_ID_COLUMN).await?;
    let (groups, size) = (inv.num_row_groups(), inv.num_rows());
    if page_map && inv.page_map(0, 1)?.is_none() {
        // No offset index: nothing to keep; the window costs what a first open does.
        return Ok(());
    }
    for (label, start) in [
        ("start", 0),
        ("middle", size / 2),
        ("end", size.saturating_sub(window_read.n)),
    ] {
        let f = window_read.run(&key, start, page_map)?;
        table.add_row([
            layout.clone(),
            size.to_string(),
            format!("{file_mb:.1}"),
            groups.to_string(),
            label.to_owned(),
            format!("{:.1}", f.median_ms),
            f.requests.to_string(),
            f.bytes.to_string(),
            format!("{:.1}", f.peak_rss_kib as f64 / 1024.0),
            f.page_map_bytes.to_string(),
        ]);
    }
    Ok(())
}
