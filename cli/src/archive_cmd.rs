//! `granary archive`: package finished work for long-term storage, follow it, retry it, and
//! verify a stored copy on its own.

use anyhow::{bail, Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use granary::config::Function;
use granary::contracts::archive::TaskMessage;
use granary::domain::archive::manifest;
use granary::domain::archive::record::{ArchiveSource, Destination};
use granary::handlers::archive::{self, steps, tasks, verify};
use granary::handlers::Ctx;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Create an archive job of an S3 prefix, or of an ingest batch's stored objects.
    ///
    /// Examples:
    ///   granary archive create --prefix s3://products/l2/2026/ --dest s3://vault/archives/:DEEP_ARCHIVE
    ///   granary archive create --batch b20261124030405-abcdef01 --dest s3://vault/a/ --dest s3://mirror/a/
    #[command(verbatim_doc_comment)]
    Create {
        #[arg(long, conflicts_with = "batch", required_unless_present = "batch")]
        prefix: Option<String>,
        /// The ingest batch whose downloaded objects are archived (before its cleanup).
        #[arg(long)]
        batch: Option<String>,
        /// s3://bucket/prefix/[:STORAGE_CLASS], once per destination.
        #[arg(long = "dest", required = true)]
        destinations: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// Every archive job (or one): state, objects, retries, why.
    Status {
        archive: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Retry a failed job from the phase that failed (only its failed tasks).
    Retry { archive: String },
    /// Re-check a stored copy: the signature over SHA256SUMS, the manifest, every member read
    /// back. Exits 1 on any mismatch.
    ///
    /// Examples:
    ///   granary archive verify s3://vault/archives/a20261124070000-1a2b3c4d/
    ///   granary archive verify s3://mirror/a/a20261124070000-1a2b3c4d/ --public-key 3f1c…
    #[command(verbatim_doc_comment)]
    Verify {
        url: String,
        /// The public key (hex) you trust; without it, the key stored beside the archive.
        #[arg(long)]
        public_key: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// A new Ed25519 signing key: its seed stored in SSM (or written to a new file only you can
    /// read), its public key printed for `verify`. The seed never appears on a command line.
    ///
    /// Examples:
    ///   granary archive keygen --put-parameter /granary/archive-signing-key --kms-key-id alias/STACK-archive-signing
    ///   granary archive keygen --seed-file ./seed.hex
    #[command(verbatim_doc_comment)]
    #[command(group(clap::ArgGroup::new("seed_destination").required(true).args(["put_parameter", "seed_file"])))]
    Keygen {
        /// The SSM parameter to store the seed in, as a SecureString.
        #[arg(long, requires = "kms_key_id")]
        put_parameter: Option<String>,
        /// The KMS key to encrypt it under: the stack's ArchiveSigningKeyAlias output, whose
        /// policy lets only the archive tasks decrypt.
        #[arg(long)]
        kms_key_id: Option<String>,
        /// Replace the parameter if it exists (the old key's signatures then verify only with
        /// the old public key).
        #[arg(long, requires = "put_parameter")]
        overwrite: bool,
        /// Write the seed to this new file (mode 0600) instead; put it with
        /// `aws ssm put-parameter … --value file://PATH`, then delete the file.
        #[arg(long, conflicts_with = "put_parameter")]
        seed_file: Option<std::path::PathBuf>,
    },
    /// The public key of a seed read from a file, or from stdin with `-` (never an argument).
    PublicKey {
        #[arg(long)]
        seed_file: std::path::PathBuf,
    },
    /// One pass of the archive dispatcher (what its schedule does); with --run-tasks the task
    /// queue's messages are run here too, until nothing moves.
    Tick {
        #[arg(long)]
        run_tasks: bool,
        #[arg(long)]
        json: bool,
    },
}

fn s3_url(url: &str) -> Result<(String, String)> {
    let rest = url
        .strip_prefix("s3://")
        .with_context(|| format!("{url}: an s3://bucket/prefix URL"))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        bail!("{url}: no bucket");
    }
    Ok((bucket.to_owned(), prefix.to_owned()))
}

async fn ctx(command: &Command) -> Result<Ctx> {
    let function = match command {
        Command::Tick { .. } => Function::ArchiveTask,
        _ => Function::ArchiveDispatcher,
    };
    Ctx::from_env(function).await.context(
        "archive jobs' configuration (GRANARY_BUCKET; GRANARY_ARCHIVE_TASK_QUEUE_URL to run them; see docs/archive.md)",
    )
}

pub async fn run(args: Args) -> Result<ExitCode> {
    let now = chrono::Utc::now;
    match args.command {
        Command::Verify {
            url,
            public_key,
            json,
        } => return verify_stored_copy(&url, public_key.as_deref(), json).await,
        Command::Keygen {
            put_parameter,
            kms_key_id,
            overwrite,
            seed_file,
        } => {
            keygen(put_parameter, kms_key_id, overwrite, seed_file).await?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::PublicKey { seed_file } => {
            let seed = read_secret(&seed_file)?;
            println!("{}", public_key_of(seed.trim())?);
            return Ok(ExitCode::SUCCESS);
        }
        _ => {}
    }
    let ctx = ctx(&args.command).await?;
    match args.command {
        Command::Create {
            prefix,
            batch,
            destinations,
            json,
        } => create(&ctx, prefix, batch, &destinations, json).await?,
        Command::Status { archive: one, json } => print_status(&ctx, one.as_deref(), json).await?,
        Command::Retry { archive: id } => {
            let phase = steps::retry(&ctx, &id, now()).await?;
            println!("archive job {id} retries {phase} (its failed tasks)");
        }
        Command::Tick { run_tasks, json } => tick(&ctx, run_tasks, json).await?,
        Command::Verify { .. } | Command::Keygen { .. } | Command::PublicKey { .. } => {}
    }
    Ok(ExitCode::SUCCESS)
}

/// `verify`: the stored copy at `url` re-checked and the result printed; exit 1 unless intact.
async fn verify_stored_copy(url: &str, public_key: Option<&str>, json: bool) -> Result<ExitCode> {
    let (bucket, mut prefix) = s3_url(url)?;
    if !prefix.is_empty() && !prefix.ends_with('/') {
        prefix.push('/');
    }
    let clients = granary::adapters::aws::AwsClients::from_env().await;
    let store = granary::wiring::s3_store(&clients, &bucket);
    let r = verify::verify(store, url, &prefix, public_key).await;
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!(
            "{url}: {} members checked, signature {} (key {})",
            r.members_checked,
            if r.signature_ok { "good" } else { "BAD" },
            r.public_key
        );
        for p in &r.problems {
            println!("  problem: {p}");
        }
        println!("{}", if r.intact() { "intact" } else { "NOT INTACT" });
    }
    Ok(if r.intact() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `keygen`: a new seed stored in SSM or written to a new file, and its public key printed.
async fn keygen(
    put_parameter: Option<String>,
    kms_key_id: Option<String>,
    overwrite: bool,
    seed_file: Option<std::path::PathBuf>,
) -> Result<()> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    let seed_hex = granary::domain::archive::manifest::hex_of(&seed);
    let public = public_key_of(&seed_hex)?;
    match (put_parameter, seed_file) {
        (Some(name), _) => {
            let clients = granary::adapters::aws::AwsClients::from_env().await;
            let key_id = kms_key_id.context("--kms-key-id names the key")?;
            granary::adapters::aws::store_signing_seed(
                &clients.ssm,
                &name,
                &seed_hex,
                &key_id,
                overwrite,
            )
            .await
            .map_err(anyhow::Error::msg)?;
            println!("seed stored in SSM parameter {name} (SecureString)");
        }
        (None, Some(path)) => {
            write_secret_file(&path, &seed_hex)?;
            println!(
                "seed written to {} (mode 0600); store it and delete the file:\n  aws ssm put-parameter --type SecureString --key-id <ArchiveSigningKeyAlias> --name /granary/archive-signing-key --value file://{}",
                path.display(),
                path.display()
            );
        }
        (None, None) => bail!(
            "say where the seed goes: --put-parameter NAME --kms-key-id KEY, or --seed-file PATH"
        ),
    }
    println!("public key (give it to `granary archive verify --public-key`):\n  {public}");
    Ok(())
}

/// What `create` archives: an S3 prefix, or an ingest batch's downloaded objects.
fn archive_source(prefix: Option<String>, batch: Option<String>) -> Result<ArchiveSource> {
    Ok(match (prefix, batch) {
        (Some(p), _) => {
            let (bucket, prefix) = s3_url(&p)?;
            ArchiveSource { bucket, prefix }
        }
        (_, Some(b)) => {
            let ingest =
                granary::config::ingest::IngestSettings::from_lookup(|k| std::env::var(k).ok())?;
            let bucket = std::env::var("GRANARY_BUCKET")
                .context("GRANARY_BUCKET names the bucket the batch is in")?;
            ArchiveSource {
                bucket,
                prefix: granary::domain::layout::ingest::IngestKeys::new(&ingest.prefix)
                    .batch_objects(&granary::domain::ingest::index::BatchId::parse(&b)?),
            }
        }
        _ => bail!("name a --prefix or a --batch"),
    })
}

/// `create`: the archive job made and its id printed.
async fn create(
    ctx: &Ctx,
    prefix: Option<String>,
    batch: Option<String>,
    destinations: &[String],
    json: bool,
) -> Result<()> {
    let source = archive_source(prefix, batch)?;
    let destinations = destinations
        .iter()
        .map(|d| Destination::parse(d))
        .collect::<Result<Vec<_>, _>>()
        .map_err(anyhow::Error::msg)?;
    let job = archive::create(ctx, source, destinations, chrono::Utc::now()).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&job)?);
    } else {
        println!("{}", job.id);
        eprintln!(
            "archive job {} of {} is created: `granary archive status {}` follows it",
            job.id, job.source, job.id
        );
    }
    Ok(())
}

/// `status`: every archive job (or one), as JSON or a table.
async fn print_status(ctx: &Ctx, one: Option<&str>, json: bool) -> Result<()> {
    let jobs = archive::status(ctx, one).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&jobs)?);
        return Ok(());
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_header(["archive", "state", "source", "objects", "retries", "why"]);
    for j in &jobs {
        let retries: u32 = j.retries.values().sum();
        t.add_row([
            j.id.clone(),
            j.state.to_string(),
            j.source.to_string(),
            j.objects.to_string(),
            retries.to_string(),
            j.failure.clone().unwrap_or_else(|| j.reason.clone()),
        ]);
    }
    println!("{t}");
    Ok(())
}

/// `tick`: passes of the dispatcher (with `run_tasks`, the task queue's messages run after
/// each) until nothing moves; the passes printed.
async fn tick(ctx: &Ctx, run_tasks: bool, json: bool) -> Result<()> {
    let now = chrono::Utc::now;
    let mut passes = Vec::new();
    loop {
        let t = archive::tick(ctx, now()).await?;
        let mut ran = 0u64;
        if run_tasks {
            for m in ctx.task_queue.receive(10, 300, 0).await? {
                let message: TaskMessage = serde_json::from_str(&m.body)
                    .with_context(|| format!("not an archive task message: {}", m.body))?;
                tasks::handle(ctx, &message, now()).await?;
                ctx.task_queue.delete(&m.receipt_handle).await?;
                ran += 1;
            }
        }
        let quiet = t.moved == 0 && t.tasks_sent == 0 && ran == 0;
        passes.push(serde_json::json!({"tick": t, "tasks_run": ran}));
        if !run_tasks || quiet || passes.len() >= 1000 {
            break;
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&passes)?);
    } else {
        println!("{} passes", passes.len());
    }
    Ok(())
}

/// The public key (hex) of a hex seed.
fn public_key_of(seed_hex: &str) -> Result<String> {
    let key = manifest::signing_key(seed_hex).map_err(anyhow::Error::msg)?;
    Ok(manifest::sign(&key, b"").1)
}

/// Writes a secret to a file that must not exist yet, readable by its owner only.
fn write_secret_file(path: &std::path::Path, secret: &str) -> Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(path)
        .with_context(|| format!("creating {} (it must not exist)", path.display()))?;
    file.write_all(secret.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

/// A secret from a file, or from stdin for `-`.
fn read_secret(path: &std::path::Path) -> Result<String> {
    if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .context("reading the seed from stdin")?;
        return Ok(text);
    }
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}
