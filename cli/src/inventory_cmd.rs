//! `granary inventory`: make inventories in the layout the feeder reads best.

use anyhow::{bail, Context, Result};
use granary::adapters::parquet::InventoryLayout;
use granary::domain::granule::IdParser;
use granary_cli::convert::{self, Format, Options, Progress, Summary};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Convert lists of granule ids (text, CSV, JSON lines or Parquet) into one inventory in
    /// granary's layout: sorted newest first by the id's time (ties by id), duplicates and
    /// invalid ids left out and counted, row groups and pages sized for one-GET windows.
    ///
    /// Examples:
    ///   granary inventory convert granules.txt --out s3://my-bucket/inventories/2026-11.parquet
    ///   granary inventory convert dump-*.csv --id-column producer_granule_id --out inv.parquet
    ///   zcat ids.txt.gz | granary inventory convert - --format text --out inv.parquet
    #[command(verbatim_doc_comment)]
    Convert {
        /// Input files (`-` reads standard input).
        #[arg(required = true)]
        inputs: Vec<PathBuf>,
        /// Where the inventory goes: a file, or s3://bucket/key (AWS_ENDPOINT_URL and the usual
        /// credentials apply).
        #[arg(long)]
        out: String,
        /// The inputs' format; by default each input's name says it (.csv, .jsonl/.ndjson/.json,
        /// .parquet; anything else is one id a line).
        #[arg(long, value_enum)]
        format: Option<Format>,
        /// The id column of CSV, JSON-lines and Parquet inputs.
        #[arg(long, default_value = "granule_id")]
        id_column: String,
        /// The regular expression ids are read with (named groups `platform` and `date`); as
        /// GRANARY_ID_PATTERN, HLS by default.
        #[arg(long, env = "GRANARY_ID_PATTERN", default_value = IdParser::HLS_PATTERN)]
        id_pattern: String,
        /// The `date` group's format (chrono strftime); as GRANARY_ID_DATE_FORMAT.
        #[arg(long, env = "GRANARY_ID_DATE_FORMAT", default_value = IdParser::HLS_DATE_FORMAT)]
        id_date_format: String,
        /// Memory the sort may use before it spills sorted runs to temporary files (MiB).
        #[arg(long, default_value_t = 256)]
        memory_mib: usize,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Bars on standard error: input bytes read, then rows written.
struct Bars {
    read: ProgressBar,
    written: ProgressBar,
}

impl Progress for Bars {
    fn read(&self, bytes: u64) {
        self.read.inc(bytes);
    }
    fn written(&self, rows: u64) {
        if self.written.is_hidden() {
            return;
        }
        if self.written.position() == 0 {
            self.read.finish();
        }
        self.written.set_position(rows);
    }
}

pub async fn run(args: Args) -> Result<ExitCode> {
    let Command::Convert {
        inputs,
        out,
        format,
        id_column,
        id_pattern,
        id_date_format,
        memory_mib,
        json,
    } = args.command;
    let id_parser = IdParser::new(&id_pattern, &id_date_format)
        .context("the id pattern (--id-pattern / GRANARY_ID_PATTERN)")?;
    let total: u64 = inputs
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok().map(|m| m.len()))
        .sum();
    let style =
        |t: &str| ProgressStyle::with_template(t).unwrap_or_else(|_| ProgressStyle::default_bar());
    let bars = Bars {
        read: ProgressBar::new(total).with_style(style(
            "reading {bar:30} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )),
        written: ProgressBar::new_spinner()
            .with_style(style("writing {spinner} {pos} rows {per_sec}")),
    };
    let options = Options {
        inputs,
        format,
        id_column,
        id_parser,
        memory_budget_bytes: memory_mib.max(1) * 1024 * 1024,
        first: None,
        layout: InventoryLayout::granary(),
    };
    let started = std::time::Instant::now();
    let s3 = match out.strip_prefix("s3://") {
        Some(rest) => match rest.split_once('/') {
            Some((bucket, key)) if !bucket.is_empty() && !key.is_empty() && !key.ends_with('/') => {
                Some((bucket.to_owned(), key.to_owned()))
            }
            _ => bail!("{out}: an s3://bucket/key URL naming the inventory object"),
        },
        None => None,
    };
    // The file is written locally first (to a temporary file for S3), then uploaded.
    let file = match &s3 {
        Some(_) => tempfile::tempfile().context("a temporary file for the inventory")?,
        None => std::fs::File::create(&out).with_context(|| format!("cannot create {out}"))?,
    };
    let upload_from = file.try_clone().context("the inventory file")?;
    let summary = tokio::task::block_in_place(|| convert::convert(&options, file, &bars))?;
    bars.read.finish_and_clear();
    bars.written.finish_and_clear();
    if let Some((bucket, key)) = &s3 {
        upload(upload_from, bucket, key).await?;
    }
    print_summary(&summary, &out, started.elapsed(), json)?;
    Ok(ExitCode::SUCCESS)
}

/// Uploads the finished file in 16 MiB parts (one PutObject when it fits in one).
async fn upload(mut file: std::fs::File, bucket: &str, key: &str) -> Result<()> {
    use granary::ports::ObjectStore;
    use std::io::{Read, Seek};
    file.rewind()?;
    let clients = granary::adapters::aws::AwsClients::from_env().await;
    let store = granary::adapters::aws::S3Store::new(clients.s3, bucket);
    let mut upload = store
        .begin_upload(key)
        .await
        .with_context(|| format!("uploading s3://{bucket}/{key}"))?;
    loop {
        let mut part = vec![0u8; 16 * 1024 * 1024];
        let mut filled = 0;
        while filled < part.len() {
            let n = file.read(&mut part[filled..])?;
            if n == 0 {
                break;
            }
            filled += n;
        }
        if filled == 0 {
            break;
        }
        part.truncate(filled);
        if let Err(e) = upload.write_part(part.into()).await {
            upload.abort().await;
            return Err(e).with_context(|| format!("uploading s3://{bucket}/{key}"));
        }
    }
    upload
        .finish()
        .await
        .with_context(|| format!("uploading s3://{bucket}/{key}"))?;
    Ok(())
}

fn print_summary(
    summary: &Summary,
    out: &str,
    took: std::time::Duration,
    json: bool,
) -> Result<()> {
    if json {
        let mut v = serde_json::to_value(summary)?;
        v["out"] = out.into();
        v["seconds"] = took.as_secs_f64().into();
        println!("{}", serde_json::to_string(&v)?);
        return Ok(());
    }
    println!(
        "{out}: {} granules written ({} bytes) in {:.1} s, newest first ({} → {})",
        summary.written,
        summary.bytes_written,
        took.as_secs_f64(),
        summary.newest.as_deref().unwrap_or("-"),
        summary.oldest.as_deref().unwrap_or("-"),
    );
    println!(
        "read {} ids: {} duplicates dropped, {} invalid left out, {} without a time (written last); sort spilled {} runs",
        summary.read, summary.duplicates, summary.invalid, summary.undated, summary.sort_runs
    );
    for i in &summary.invalid_sample {
        println!("  invalid at {}: {}", i.at, i.why);
    }
    Ok(())
}
