//! `granary report`: the campaign's outcomes from its logs (`--scan`) or Athena, and what it cost.

use anyhow::{bail, Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use granary::domain::campaign::Campaign;
use granary::domain::cost::{CampaignCost, ComputePrices};
use granary::domain::report::Reports;
use granary_cli::ops::{chart, report};
use std::path::PathBuf;
use std::process::ExitCode;

use crate::operator::{bar, ctx};

#[derive(clap::Args)]
pub struct ReportArgs {
    /// Compute from the log objects in S3 (LIST + one GET per log; works on an emulator).
    #[arg(long, conflicts_with = "athena")]
    scan: bool,
    /// Run the athena/ queries on Athena (workgroup, database and output from the options below).
    #[arg(long)]
    athena: bool,
    #[arg(long, env = "GRANARY_ATHENA_WORKGROUP", default_value = "primary")]
    workgroup: String,
    #[arg(long, env = "GRANARY_ATHENA_DATABASE", default_value = "granary")]
    database: String,
    /// Query results location (s3://…/); default: the workgroup's.
    #[arg(long, env = "GRANARY_ATHENA_OUTPUT")]
    output: Option<String>,
    /// Where granary's athena/ SQL lives.
    #[arg(long, default_value = "athena")]
    sql_dir: PathBuf,
    /// Print JSON instead of tables (every command's --json).
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// Print CSV instead of tables (one header row per section).
    #[arg(long)]
    csv: bool,
    /// Also draw successes per acquisition month by platform into this SVG file.
    #[arg(long)]
    chart: Option<PathBuf>,
    /// Compare with another campaign over the same inventories (its name, or `-` for the
    /// unnamed campaign): each section side by side with the change, and how each granule's
    /// latest outcome moved. This campaign is GRANARY_CAMPAIGN's. Needs --scan.
    #[arg(
        long,
        value_name = "CAMPAIGN",
        requires = "scan",
        conflicts_with = "chart"
    )]
    compare: Option<String>,
    /// Also what the campaign cost: compute from each job's reserved vCPU and memory and its
    /// attempts' run time (the logs hold them), plus granary's own S3, SQS and Lambda requests
    /// (measured per granule). Needs --scan.
    #[arg(long, requires = "scan")]
    cost: bool,
    /// Also write one self-contained page with the charts (ended over time, outcomes per
    /// platform, failure reasons, attempts, cost) to this file. Needs --scan.
    #[arg(long, value_name = "FILE", requires = "scan")]
    html: Option<PathBuf>,
    #[command(flatten)]
    prices: Prices,
}

/// Compute prices for `report --cost` (defaults: AWS Fargate, Linux/x86, us-east-1, November
/// 2026; see `granary::domain::cost`).
#[derive(clap::Args)]
pub struct Prices {
    /// The capacity the job queue runs on: `spot` (the template's compute environment is EC2
    /// Spot) takes --spot-discount off the on-demand prices; the default prices on demand, the
    /// list price, so an assumed discount never flatters the figure.
    #[arg(long, value_enum, default_value_t = Capacity::OnDemand)]
    capacity: Capacity,
    /// On-demand price of a vCPU-hour reserved.
    #[arg(long, default_value_t = granary::domain::cost::FARGATE_ON_DEMAND.vcpu_hour)]
    vcpu_hour_price: f64,
    /// On-demand price of a GiB-hour of memory reserved.
    #[arg(long, default_value_t = granary::domain::cost::FARGATE_ON_DEMAND.gib_hour)]
    gib_hour_price: f64,
    /// Spot's share off on demand (AWS advertises up to 70%; the market moves it).
    #[arg(long, default_value_t = granary::domain::cost::SPOT_DISCOUNT)]
    spot_discount: f64,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Capacity {
    Spot,
    OnDemand,
}

impl Prices {
    pub(crate) fn compute(&self) -> Result<granary::domain::cost::ComputePrices> {
        let fine = |v: f64| v.is_finite() && v >= 0.0;
        if !fine(self.vcpu_hour_price) || !fine(self.gib_hour_price) {
            bail!("prices must be numbers of dollars, 0 or more");
        }
        if !(0.0..1.0).contains(&self.spot_discount) {
            bail!("--spot-discount is a share of the on-demand price, from 0 up to (not) 1");
        }
        let on_demand = granary::domain::cost::ComputePrices {
            vcpu_hour: self.vcpu_hour_price,
            gib_hour: self.gib_hour_price,
        };
        Ok(match self.capacity {
            Capacity::OnDemand => on_demand,
            Capacity::Spot => on_demand.spot(self.spot_discount),
        })
    }
}

/// `-`: the unnamed campaign; else a campaign's name.
fn campaign_arg(name: &str) -> Result<Option<Campaign>> {
    if name == "-" {
        return Ok(None);
    }
    Ok(Some(Campaign::parse(name)?))
}

/// How a campaign is called in a table's header.
fn campaign_label(c: Option<&Campaign>) -> String {
    c.map_or_else(|| "(unnamed)".to_owned(), |c| c.to_string())
}

/// `granary report --scan --compare OTHER`: this campaign's logs and the other's, read from S3.
async fn compare_campaigns(args: &ReportArgs, other: &str) -> Result<ExitCode> {
    let here = ctx(&[]).await?;
    let other = campaign_arg(other)?;
    let there = here.in_campaign(other.as_ref());
    let names = [
        campaign_label(here.campaign()),
        campaign_label(there.campaign()),
    ];
    if names[0] == names[1] {
        bail!("--compare names this campaign ({}): name another", names[0]);
    }
    let mut facts = Vec::new();
    for (c, name) in [(&here, &names[0]), (&there, &names[1])] {
        let b = bar(0, &format!("logs of {name} read"));
        let read = report::scan_facts(
            c.store.as_ref(),
            &c.config.layout.log_prefix,
            &|done, total| {
                b.set_length(total);
                b.set_position(done);
            },
        )
        .await?;
        b.finish_and_clear();
        facts.push(read);
    }
    let reports = [
        granary::domain::report::compute(&facts[0]),
        granary::domain::report::compute(&facts[1]),
    ];
    let labels = [names[0].as_str(), names[1].as_str()];
    let changes = granary::domain::report::outcome_changes(&facts[0], &facts[1]);
    if args.json {
        let out = serde_json::json!({
            "campaigns": labels,
            "reports": reports,
            "outcome_changes": changes,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    let mut sections = vec![report::changes_section(&changes, labels)];
    sections.extend(report::compare_sections(&reports[0], &reports[1], labels));
    print_sections(&sections, args.csv)?;
    Ok(ExitCode::SUCCESS)
}

/// Sections as tables, or as CSV (one header row per section).
fn print_sections(sections: &[report::Section], csv: bool) -> Result<()> {
    if csv {
        print!("{}", report::sections_csv(sections)?);
        return Ok(());
    }
    for s in sections {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED)
            .set_header(s.header.clone());
        for row in &s.rows {
            t.add_row(row.clone());
        }
        println!("{}\n{t}\n", s.title);
    }
    Ok(())
}

pub async fn report(args: ReportArgs) -> Result<ExitCode> {
    if !args.scan && !args.athena {
        bail!("say where the numbers come from: --scan (read the logs in S3) or --athena");
    }
    if let Some(other) = &args.compare {
        if !args.scan {
            bail!("--compare reads both campaigns' logs from S3: use it with --scan");
        }
        return compare_campaigns(&args, other).await;
    }
    let prices = args.prices.compute()?;
    let Scanned {
        reports,
        cost,
        memory,
        page,
    } = if args.scan {
        scan(&args, prices).await?
    } else {
        Scanned {
            reports: athena_reports(&args).await?,
            cost: None,
            memory: None,
            page: None,
        }
    };
    if args.json {
        let mut out = serde_json::to_value(&reports)?;
        if let (Some(cost), Some(map)) = (&cost, out.as_object_mut()) {
            map.insert("cost".into(), serde_json::to_value(cost)?);
        }
        if let (Some(memory), Some(map)) = (&memory, out.as_object_mut()) {
            map.insert("memory".into(), serde_json::to_value(memory)?);
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print_sections(&report::sections(&reports), args.csv)?;
        if let Some(c) = &cost {
            print_cost(c);
        }
        if let Some(m) = &memory {
            print_memory(m);
        }
    }
    if let Some(path) = &args.chart {
        chart::successes_per_month(&reports, path)?;
        eprintln!("chart written to {}", path.display());
    }
    if let (Some(path), Some(page)) = (&args.html, page) {
        std::fs::write(path, page).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("report page written to {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// What `--scan` reads from the logs in S3: the reports, and the cost (`--cost`) and the page
/// (`--html`) when asked for.
struct Scanned {
    reports: Reports,
    cost: Option<CampaignCost>,
    /// With `--cost`: the memory the granules needed.
    memory: Option<Vec<granary::domain::report::MemoryNeed>>,
    page: Option<String>,
}

/// `granary report --scan`: this campaign's logs, read from S3.
async fn scan(args: &ReportArgs, prices: ComputePrices) -> Result<Scanned> {
    let mut cost = None;
    let mut memory = None;
    let mut page = None;
    let ctx = ctx(&[]).await?;
    let b = bar(0, "logs read");
    let facts = report::scan_facts(
        ctx.store.as_ref(),
        &ctx.config.layout.log_prefix,
        &|done, total| {
            b.set_length(total);
            b.set_position(done);
        },
    )
    .await?;
    b.finish_and_clear();
    if args.cost {
        let own = if ctx.config.layout.track_items {
            granary::domain::cost::OWN_COST_RECORDS_ON
        } else {
            granary::domain::cost::OWN_COST_RECORDS_OFF
        };
        cost = Some(granary::domain::report::cost_of_logs(&facts, prices, own));
        memory = Some(granary::domain::report::memory_needed(&facts));
    }
    let reports = granary::domain::report::compute(&facts);
    if args.html.is_some() {
        let title = format!(
            "granary campaign {} — s3://{}",
            campaign_label(ctx.campaign()),
            ctx.config.layout.bucket
        );
        page = Some(granary_cli::ops::html::page(
            &granary_cli::ops::html::PageInput {
                title,
                generated_at: chrono::Utc::now(),
                facts: &facts,
                reports: &reports,
                cost: cost.as_ref(),
            },
        )?);
    }
    Ok(Scanned {
        reports,
        cost,
        memory,
        page,
    })
}

/// `granary report --athena`: the athena/ queries, run on Athena.
async fn athena_reports(args: &ReportArgs) -> Result<Reports> {
    let config = granary::adapters::aws::load_sdk_config().await;
    let client = aws_sdk_athena::Client::new(&config);
    let target = report::AthenaTarget {
        workgroup: args.workgroup.clone(),
        database: args.database.clone(),
        output: args.output.clone(),
    };
    report::athena(&client, &target, &args.sql_dir).await
}

fn print_cost(c: &CampaignCost) {
    println!(
        "cost of {} granules ({} jobs; {} without usage in their detail, not priced):",
        c.granules, c.jobs, c.jobs_without_usage
    );
    println!(
        "  prices: ${} a vCPU-hour and ${} a GiB-hour reserved, for each attempt's run time (an \
         instance's idle time, image pulls and minimum charges are not in it); the defaults are \
         AWS Fargate's us-east-1 list prices (--capacity spot assumes --spot-discount): give \
         the prices on your bill",
        c.prices.vcpu_hour, c.prices.gib_hour
    );
    println!(
        "  compute ${:.2}: {:.1} vCPU-hours at ${}, {:.1} GiB-hours at ${} (of it ${:.2} on attempts that were retried)",
        c.compute_dollars,
        c.vcpu_hours,
        c.prices.vcpu_hour,
        c.gib_hours,
        c.prices.gib_hour,
        c.retried_compute_dollars
    );
    println!(
        "  granary: S3 ${:.4}, SQS ${:.4}, Lambda ${:.4} (its requests as measured per granule, BENCHMARKS.md)",
        c.s3_dollars, c.sqs_dollars, c.lambda_dollars
    );
    println!(
        "  in all ${:.2}: ${:.6} a granule, ${:.0} a million",
        c.total_dollars,
        c.dollars_per_granule,
        c.dollars_per_granule * 1e6
    );
}

/// The memory the granules needed (`domain::report::memory_needed`).
fn print_memory(rows: &[granary::domain::report::MemoryNeed]) {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header([
        "platform",
        "memory reserved (MiB)",
        "granules succeeded",
        "after running out",
        "out-of-memory ends",
    ]);
    for r in rows {
        let mib = r.memory_mib.map_or("unknown".to_owned(), |m| m.to_string());
        t.add_row([
            r.platform.clone(),
            mib,
            r.granules.to_string(),
            r.after_out_of_memory.to_string(),
            r.out_of_memory_ends.to_string(),
        ]);
    }
    println!("memory the granules needed (GRANARY_JOB_MEMORY_MIB doubles a retry after running out):\n{t}");
}
