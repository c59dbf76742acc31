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
    let me = std::env::current_exe()?;
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
    // (label, key, file MB, whether the feeder keeps a page map for it)
    let mut inputs: Vec<(String, String, f64, bool)> = Vec::new();
    for &size in &rows {
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
            inputs.push((layout.to_owned(), key.clone(), file_mb, false));
            if layout == "granary" {
                inputs.push(("granary, page map kept".to_owned(), key, file_mb, true));
            }
        }
    }
    for path in &files {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "file".to_owned());
        let key = format!("inventories/given-{name}");
        let file_mb = bytes.len() as f64 / 1e6;
        s3.put(&key, bytes.into(), PutCondition::Overwrite).await?;
        inputs.push((name.clone(), key.clone(), file_mb, false));
        inputs.push((format!("{name}, page map kept"), key, file_mb, true));
    }
    for (layout, key, file_mb, page_map) in inputs {
        let inv = Inventory::open(Arc::new(s3.clone()), &key, DEFAULT_ID_COLUMN).await?;
        let (groups, size) = (inv.num_row_groups(), inv.num_rows());
        if page_map && inv.page_map(0, 1)?.is_none() {
            // No offset index: nothing to keep; the window costs what a first open does.
            continue;
        }
        for (label, start) in [
            ("start", 0),
            ("middle", size / 2),
            ("end", size.saturating_sub(n)),
        ] {
            let mut cmd = std::process::Command::new(&me);
            cmd.args(["window-read", "--bucket", &bucket, "--key", &key])
                .args([
                    "--start",
                    &start.to_string(),
                    "--n",
                    &n.to_string(),
                    "--reps",
                    &reps.to_string(),
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
            let f: WindowFigures = serde_json::from_slice(&out.stdout)?;
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
    }
    println!("Feeder window read: {n} rows, median of {reps}, each in a fresh process\n{table}");
    Ok(())
}
