//! `granary-local demo --inventory FILE [--granules N]`: an operator's own inventory through the
//! whole stack before launch. The file is read as `granary inventory convert` reads it (text,
//! CSV, JSON lines or Parquet; sorted newest first, duplicates and invalid ids left out, each
//! invalid one named by file and line), run with the fault plan, and what `granary plan`
//! forecast is printed beside what happened.

use anyhow::{bail, Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use granary::adapters::parquet::InventoryLayout;
use granary_cli::convert::{self, Options, Progress};
use granary_cli::ops::plan::Plan;
use granary_local::campaign::{Campaign, CampaignSpec, GivenInventory, Summary};
use std::io::{Read, Seek};
use std::path::{Path, PathBuf};

/// The operator's inventory, read and converted.
pub struct Loaded {
    pub given: GivenInventory,
    pub read: convert::Summary,
}

struct Quiet;

impl Progress for Quiet {
    fn read(&self, _: u64) {}
    fn written(&self, _: u64) {}
}

/// Reads `file` (its first `first` ids) into an inventory in granary's layout, or says what in
/// it granary cannot read: the file, and the line or column.
pub fn load(file: &Path, first: Option<u64>, id_column: &str) -> Result<Loaded> {
    if !file.is_file() {
        bail!("{}: no such file", file.display());
    }
    let options = Options {
        inputs: vec![PathBuf::from(file)],
        format: None,
        id_column: id_column.to_owned(),
        id_parser: granary::config::Layout::id_parser_from_env()
            .context("the id pattern (GRANARY_ID_PATTERN, GRANARY_ID_DATE_FORMAT)")?,
        memory_budget_bytes: 256 << 20,
        layout: InventoryLayout::granary(),
        first,
    };
    let mut out = tempfile::tempfile().context("a temporary file for the inventory")?;
    let read = convert::convert(&options, out.try_clone()?, &Quiet)
        .with_context(|| format!("{}: not an inventory granary can read", file.display()))?;
    if read.written == 0 {
        let why = read
            .invalid_sample
            .first()
            .map_or_else(String::new, |i| format!("; the first: {}: {}", i.at, i.why));
        bail!(
            "{}: no granule id granary can use ({} read, {} invalid{why})",
            file.display(),
            read.read,
            read.invalid
        );
    }
    let mut bytes = Vec::new();
    out.rewind()?;
    out.read_to_end(&mut bytes)?;
    let ids = ids_of(&bytes)?;
    Ok(Loaded {
        given: GivenInventory {
            parquet: bytes::Bytes::from(bytes),
            ids: ids.into(),
        },
        read,
    })
}

/// The ids of an inventory granary wrote, in its order.
fn ids_of(parquet: &[u8]) -> Result<Vec<String>> {
    use arrow::array::AsArray;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::copy_from_slice(parquet))
        .context("reading the converted inventory back")?
        .build()?;
    let mut ids = Vec::new();
    for batch in reader {
        let batch = batch?;
        let column = batch
            .column_by_name("granule_id")
            .context("the converted inventory has no granule_id")?;
        ids.extend(
            column
                .as_string::<i32>()
                .iter()
                .flatten()
                .map(str::to_owned),
        );
    }
    Ok(ids)
}

/// The campaign runs the operator's inventory instead of the sample.
pub fn give(spec: &mut CampaignSpec, loaded: &Loaded) {
    spec.granules = loaded.given.ids.len();
    spec.given = Some(loaded.given.clone());
}

/// What the in-memory dry run reads of the command line.
pub struct RunArgs {
    pub file: PathBuf,
    pub json: bool,
    pub array_windows: bool,
}

/// The dry run on granary's in-memory twins: the forecast, the run, what happened beside it.
pub async fn in_memory(
    args: &RunArgs,
    mut spec: CampaignSpec,
    loaded: Loaded,
) -> Result<std::process::ExitCode> {
    give(&mut spec, &loaded);
    if !args.json {
        eprintln!(
            "{}
on granary's in-memory twins; fault plan seed {}",
            describe_read(&args.file, &loaded.read),
            spec.plan.seed
        );
    }
    let mut campaign = Campaign::in_memory(&spec)
        .await
        .context("setting up the in-memory campaign")?;
    let plan = forecast(&campaign, args.array_windows).await?;
    let started = std::time::Instant::now();
    super::demo::run_with_progress(&mut campaign, spec.granules, args.json).await?;
    let summary = campaign.summarize(started.elapsed()).await?;
    let attempts = campaign.runtime.simulator.planned.len() as u64;
    if args.json {
        let out = serde_json::json!({
            "inventory": args.file,
            "read": loaded.read,
            "forecast": plan,
            "attempts": attempts,
            "summary": summary,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        super::demo::print_summary(&summary);
        print_comparison(&plan, &summary, &campaign);
    }
    Ok(if summary.unaccounted == 0 {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(1)
    })
}

/// What reading the file found, in a line.
pub fn describe_read(file: &Path, r: &convert::Summary) -> String {
    let mut line = format!(
        "{}: {} ids read, {} granules to run",
        file.display(),
        r.read,
        r.written
    );
    if r.beyond_first > 0 {
        line.push_str(&format!(
            " (the first {}; {} more left out)",
            r.read, r.beyond_first
        ));
    }
    if r.duplicates > 0 {
        line.push_str(&format!(", {} duplicates dropped", r.duplicates));
    }
    if r.invalid > 0 {
        line.push_str(&format!(", {} invalid left out", r.invalid));
        for i in &r.invalid_sample {
            line.push_str(&format!("\n  invalid: {}: {}", i.at, i.why));
        }
    }
    line
}

/// `granary plan`'s forecast for the campaign as it stands before its first run, with the
/// template's defaults (the code `granary plan` runs).
pub async fn forecast(campaign: &Campaign, array_windows: bool) -> Result<Plan> {
    let ctx = &campaign.runtime.ctx;
    let settings = granary_cli::ops::plan::template_settings(ctx, array_windows);
    granary_cli::ops::plan::gather(ctx, &[], settings, chrono::Utc::now()).await
}

/// The forecast beside what happened.
pub fn print_comparison(plan: &Plan, s: &Summary, campaign: &Campaign) {
    let attempts = campaign.runtime.simulator.planned.len() as u64;
    let wall_secs = s.wall_secs;
    let f = &plan.forecast;
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_header(["", "granary plan forecast", "the dry run"]);
    t.add_row([
        "granules".to_owned(),
        format!("{} rows left", plan.left),
        format!(
            "{} settled: {} succeeded, {} dead-lettered, {} unaccounted",
            s.succeeded + s.dead_lettered,
            s.succeeded,
            s.dead_lettered,
            s.unaccounted
        ),
    ]);
    let share = |a: f64, g: u64| 100.0 * (a / g.max(1) as f64 - 1.0);
    t.add_row([
        "attempts".to_owned(),
        format!(
            "{:.0} ({:.1}% retried)",
            f.attempts,
            share(f.attempts, plan.left)
        ),
        format!(
            "{} ({:.1}% retried: {attempts} jobs, {} retries inside them by Batch)",
            attempts + s.batch_internal_retries,
            share((attempts + s.batch_internal_retries) as f64, s.granules),
            s.batch_internal_retries
        ),
    ]);
    t.add_row([
        "time".to_owned(),
        format!(
            "{:.1} hours on AWS at {:.0} granules an hour (bound by {:?})",
            f.hours, f.per_hour, f.bound_by
        ),
        format!("{wall_secs:.1} s here, jobs' run times compressed"),
    ]);
    t.add_row([
        "granary's requests".to_owned(),
        format!("${:.2} (S3, SQS, Lambda)", f.granary_dollars),
        format!(
            "S3 {:.2} and SQS {:.2} a granule",
            s.s3_per_granule, s.sqs_per_granule
        ),
    ]);
    println!("\nForecast and dry run\n{t}");
}
