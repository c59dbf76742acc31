//! `granary ingest`: submit batches of objects from a manifest and operate the ingest queue.

use anyhow::{bail, Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use granary::config::Function;
use granary::domain::ingest::batch::BatchState;
use granary::domain::ingest::deposit::MintFix;
use granary::domain::ingest::index::{BatchId, JobId};
use granary::domain::ingest::job::JobState;
use granary::domain::ingest::manifest::ManifestKind;
use granary::domain::ingest::record::{Deposit, Submission};
use granary::handlers::ingest;
use granary::handlers::ingest::operator::{self, Target};
use granary::handlers::Ctx;
use granary::ports::PutCondition;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Submit a manifest (a local file, or an http(s) / s3:// URL): creates a pending batch and
    /// returns its id at once; the dispatcher creates one job per object.
    ///
    /// Examples:
    ///   granary ingest submit objects.checkm --collection maps
    ///   granary ingest submit https://depositor.example/batch.checkm --collection maps --priority 2 --callback https://depositor.example/done
    ///   granary ingest submit https://depositor.example/scan.tif --type file --collection maps
    #[command(verbatim_doc_comment)]
    Submit(SubmitArgs),
    /// Batches and their jobs per state; --watch redraws until every batch has ended.
    Status {
        batch: Option<String>,
        #[arg(long)]
        watch: bool,
        #[arg(long)]
        json: bool,
    },
    /// Hold a collection, a batch or a job: nothing held is dispatched until released.
    Hold {
        #[command(flatten)]
        target: TargetArgs,
        #[arg(long, default_value = "held by an operator")]
        reason: String,
        #[arg(long, env = "USER", default_value = "operator")]
        by: String,
    },
    /// Release a hold: held batches and jobs it covered go back to pending.
    Release {
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Restart failed jobs at the step after their last success.
    Resume {
        jobs: Vec<String>,
        /// Every failed job of this batch.
        #[arg(long)]
        batch: Option<String>,
        /// A job failed "minting outcome unknown": EZID holds this identifier for it (its
        /// granary.job metadata names the job); store under it.
        #[arg(long, conflicts_with_all = ["batch", "mint_again"])]
        identifier: Option<String>,
        /// A job failed "minting outcome unknown": EZID holds no identifier for it; mint one.
        #[arg(long, conflicts_with = "batch")]
        mint_again: bool,
        #[arg(long)]
        json: bool,
    },
    /// A failed batch whose resumed jobs have ended: write a report of what changed.
    UpdateReport { batch: String },
    /// A batch's reports, first to latest.
    Report {
        batch: String,
        #[arg(long)]
        json: bool,
    },
    /// Delete a failed or held job, or a failed or held batch with its jobs.
    Delete {
        #[arg(long, conflicts_with = "batch")]
        job: Option<String>,
        #[arg(long)]
        batch: Option<String>,
        /// Go on although the depositor will not be told (a job of an unreported batch, a held batch).
        #[arg(long)]
        yes: bool,
    },
    /// Run the dispatcher once, as its schedule does (on an emulator, or to push a batch along).
    Tick {
        /// Repeat until a pass changes nothing.
        #[arg(long)]
        until_quiet: bool,
        #[arg(long)]
        json: bool,
    },
}

/// `submit`'s arguments.
#[derive(clap::Args)]
struct SubmitArgs {
    manifest: String,
    #[arg(long)]
    collection: String,
    /// 00 runs first; 05 is the default.
    #[arg(long, default_value_t = 5)]
    priority: u8,
    /// Called (POST, JSON) when each job completes and when the batch reports.
    #[arg(long)]
    callback: Option<String>,
    #[arg(long)]
    profile: Option<String>,
    /// files (one line per file), manifests (one object manifest per line), file (the URL
    /// is the one file) or container (the URL is one zip, expanded into the object's
    /// files); default: from the manifest's #%profile line.
    #[arg(long = "type", value_parser = ["files", "manifests", "file", "container"])]
    kind: Option<String>,
    #[arg(long, env = "USER", default_value = "operator")]
    submitter: String,
    /// The object's ERC metadata (who made it, what it is, when, where), passed to the
    /// processing container.
    #[arg(long)]
    erc_who: Option<String>,
    #[arg(long)]
    erc_what: Option<String>,
    #[arg(long)]
    erc_when: Option<String>,
    #[arg(long)]
    erc_where: Option<String>,
    /// How the deposit changes a stored object: add, update or reset.
    #[arg(long, default_value = "add", value_parser = ["add", "update", "reset"])]
    mode: String,
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
#[group(required = true, multiple = false)]
struct TargetArgs {
    #[arg(long)]
    collection: Option<String>,
    #[arg(long)]
    batch: Option<String>,
    #[arg(long)]
    job: Option<String>,
}

impl TargetArgs {
    fn target(&self) -> Result<Target> {
        Ok(match (&self.collection, &self.batch, &self.job) {
            (Some(c), _, _) => Target::Collection(c.clone()),
            (_, Some(b), _) => Target::Batch(BatchId::parse(b)?),
            (_, _, Some(j)) => Target::Job(JobId::parse(j)?),
            _ => bail!("name a --collection, --batch or --job"),
        })
    }
}

/// What a command reads: `tick` does the dispatcher's work (Batch, the failure DLQ); the others
/// read and change records in the bucket only.
async fn ctx(command: &Command) -> Result<Ctx> {
    if matches!(command, Command::Tick { .. }) {
        Ctx::from_env(Function::IngestDispatcher).await.context(
            "the ingest dispatcher's configuration (GRANARY_BUCKET, GRANARY_JOB_QUEUE, GRANARY_JOB_DEFINITION, GRANARY_RETRY_QUEUE_URL, GRANARY_FAILURE_DLQ_URL; see docs/ingest.md)",
        )
    } else {
        Ctx::from_env(Function::IngestSubmit)
            .await
            .context("the ingest queue's configuration (GRANARY_BUCKET; see docs/ingest.md)")
    }
}

pub async fn run(args: Args) -> Result<ExitCode> {
    let ctx = ctx(&args.command).await?;
    let now = chrono::Utc::now;
    match args.command {
        Command::Submit(submit_args) => submit(&ctx, submit_args).await?,
        Command::Status { batch, watch, json } => {
            let only = batch.as_deref().map(BatchId::parse).transpose()?;
            if watch && !json {
                return watch_status(&ctx, only.as_ref()).await;
            }
            let all = operator::status(&ctx, only.as_ref()).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&all)?);
            } else {
                print_status(&all);
            }
        }
        Command::Hold { target, reason, by } => {
            let target = target.target()?;
            let hold = operator::hold(&ctx, &target, &reason, &by, now()).await?;
            println!("{target} held by {}: {}", hold.by, hold.reason);
        }
        Command::Release { target } => {
            let target = target.target()?;
            let r = operator::release(&ctx, &target, now()).await?;
            println!(
                "{target} released: {} batches and {} jobs back to pending",
                r.batches.len(),
                r.jobs.len()
            );
        }
        Command::Resume {
            jobs,
            batch,
            identifier,
            mint_again,
            json,
        } => {
            let fix = match (identifier, mint_again) {
                (Some(id), _) => Some(MintFix::Identifier(id)),
                (None, true) => Some(MintFix::MintAgain),
                (None, false) => None,
            };
            return resume(&ctx, &jobs, batch.as_deref(), fix, json).await;
        }
        Command::UpdateReport { batch } => {
            let b = operator::update_report(&ctx, &BatchId::parse(&batch)?, now()).await?;
            println!(
                "batch {} is {}: the next tick writes the report",
                b.id, b.state
            );
        }
        Command::Report { batch, json } => {
            let reports = operator::reports(&ctx, &BatchId::parse(&batch)?).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&reports)?);
            } else {
                print_reports(&batch, &reports);
            }
        }
        Command::Delete { job, batch, yes } => match (job, batch) {
            (Some(j), _) => {
                let j = operator::delete_job(&ctx, &JobId::parse(&j)?, yes, now()).await?;
                println!("job {} deleted", j.id);
            }
            (_, Some(b)) => {
                let b = operator::delete_batch(&ctx, &BatchId::parse(&b)?, yes, now()).await?;
                println!("batch {} deleted with its jobs", b.id);
            }
            _ => bail!("name a --job or a --batch to delete"),
        },
        Command::Tick { until_quiet, json } => tick(&ctx, until_quiet, json).await?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `submit`: the manifest (a local one kept in the bucket first) submitted as a pending batch.
async fn submit(ctx: &Ctx, args: SubmitArgs) -> Result<()> {
    let now = chrono::Utc::now;
    let SubmitArgs {
        manifest,
        collection,
        priority,
        callback,
        profile,
        kind,
        submitter,
        erc_who,
        erc_what,
        erc_when,
        erc_where,
        mode,
        json,
    } = args;
    let (url, text) = manifest_url(ctx, &manifest).await?;
    let kind = match kind.as_deref().and_then(ManifestKind::parse) {
        Some(k) => k,
        None => text
            .as_deref()
            .map_or(ManifestKind::Files, ManifestKind::detect),
    };
    let batch = ingest::submit(
        ctx,
        Submission {
            collection,
            manifest_url: url,
            kind,
            priority,
            callback,
            profile,
            submitter,
            deposit: Deposit {
                erc_who,
                erc_what,
                erc_when,
                erc_where,
                submission_mode: mode.parse().map_err(anyhow::Error::msg)?,
            },
        },
        now(),
    )
    .await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&batch)?);
    } else {
        println!("{}", batch.id);
        eprintln!(
            "batch {} is pending: `granary ingest status {}` follows it",
            batch.id, batch.id
        );
    }
    Ok(())
}

/// The manifest's URL: a URL as given, or a local file's copy kept in the bucket (with its
/// text, to detect its kind from).
async fn manifest_url(ctx: &Ctx, manifest: &str) -> Result<(String, Option<String>)> {
    let is_url = ["http://", "https://", "s3://"]
        .iter()
        .any(|p| manifest.starts_with(p));
    if is_url {
        return Ok((manifest.to_owned(), None));
    }
    let text = std::fs::read_to_string(manifest)
        .with_context(|| format!("reading the manifest {manifest}"))?;
    let name = format!(
        "{}-{}",
        chrono::Utc::now().format("%Y%m%dT%H%M%S"),
        std::path::Path::new(manifest)
            .file_name()
            .map_or("manifest".into(), |n| n.to_string_lossy().into_owned())
    );
    let key = ctx.ingest().keys.manifest(&name);
    ctx.store
        .put(&key, text.clone().into(), PutCondition::IfAbsent)
        .await
        .context("keeping the manifest in the bucket")?;
    Ok((
        format!("s3://{}/{key}", ctx.config.layout.bucket),
        Some(text),
    ))
}

/// `resume`: the named failed jobs (and a batch's) restarted; exit 1 when any was not.
async fn resume(
    ctx: &Ctx,
    jobs: &[String],
    batch: Option<&str>,
    fix: Option<MintFix>,
    json: bool,
) -> Result<ExitCode> {
    let now = chrono::Utc::now;
    let mut ids: Vec<JobId> = jobs
        .iter()
        .map(|j| JobId::parse(j))
        .collect::<Result<_, _>>()?;
    if let Some(b) = batch {
        ids.extend(operator::failed_jobs(ctx, &BatchId::parse(b)?).await?);
    }
    if ids.is_empty() {
        bail!("name failed jobs to resume, or --batch B");
    }
    let resumed = match (fix, ids.as_slice()) {
        (None, _) => operator::resume(ctx, &ids, now()).await?,
        (Some(fix), [one]) => {
            vec![operator::resume_with_mint(ctx, one, &fix, now()).await?]
        }
        (Some(_), _) => bail!("--identifier and --mint-again resume one job at a time"),
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&resumed)?);
    } else {
        for r in &resumed {
            match &r.outcome {
                Ok(to) => println!("{}: resumed at {to}", r.job),
                Err(why) => println!("{}: not resumed: {why}", r.job),
            }
        }
    }
    if resumed.iter().any(|r| r.outcome.is_err()) {
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// A batch's reports for a person: each one's counts, and its failed jobs as a table.
fn print_reports(batch: &str, reports: &[ingest::batches::BatchReport]) {
    if reports.is_empty() {
        println!("batch {batch} has not reported yet");
        return;
    }
    for r in reports {
        println!(
            "report {} ({}): {} completed, {} failed; since the previous: {} newly completed, {} still failed",
            r.number,
            r.written_at.format("%Y-%m-%d %H:%M UTC"),
            r.completed.len(),
            r.failed.len(),
            r.newly_completed.len(),
            r.still_failed.len()
        );
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED)
            .set_header(["failed job", "last success", "why"]);
        for f in &r.failed {
            t.add_row([
                f.job.to_string(),
                f.last_successful_status
                    .map_or("-".into(), |s| s.to_string()),
                f.reason.clone(),
            ]);
        }
        if !r.failed.is_empty() {
            println!("{t}");
        }
    }
}

/// `tick`: the dispatcher's passes (until one changes nothing, with `until_quiet`), printed.
async fn tick(ctx: &Ctx, until_quiet: bool, json: bool) -> Result<()> {
    let now = chrono::Utc::now;
    let mut passes = Vec::new();
    loop {
        let s = ingest::tick(ctx, now()).await?;
        let quiet = s == ingest::TickSummary::default();
        passes.push(s);
        if !until_quiet || quiet || passes.len() >= 1000 {
            break;
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&passes)?);
    } else {
        print!("{}", crate::ingest_tick::describe(&passes, until_quiet));
    }
    Ok(())
}

fn print_status(all: &[operator::BatchStatus]) {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header([
        "batch",
        "collection",
        "state",
        "jobs",
        "by state",
    ]);
    for b in all {
        t.add_row([
            b.batch.id.to_string(),
            b.batch.submission.collection.clone(),
            b.batch.state.to_string(),
            b.batch.jobs.to_string(),
            b.jobs
                .iter()
                .map(|(s, n)| format!("{s} {n}"))
                .collect::<Vec<_>>()
                .join(", "),
        ]);
    }
    println!("{t}");
}

/// Redraws a progress bar of ended jobs until every batch shown has ended.
async fn watch_status(ctx: &Ctx, only: Option<&BatchId>) -> Result<ExitCode> {
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} jobs ended  {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    loop {
        let all = operator::status(ctx, only).await?;
        let total: u64 = all.iter().map(|b| b.batch.jobs as u64).sum();
        let ended: u64 = all
            .iter()
            .flat_map(|b| b.jobs.iter())
            .filter(|(s, _)| s.has_ended() || **s == JobState::Deleted)
            .map(|(_, n)| n)
            .sum();
        bar.set_length(total);
        bar.set_position(ended);
        let open = all
            .iter()
            .filter(|b| {
                !matches!(
                    b.batch.state,
                    BatchState::Completed | BatchState::Failed | BatchState::Deleted
                )
            })
            .count();
        bar.set_message(format!("{open} batches open"));
        if open == 0 {
            bar.finish();
            print_status(&all);
            return Ok(ExitCode::SUCCESS);
        }
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    }
}
