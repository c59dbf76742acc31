//! `granary audit`: the campaign's three tables joined granule by granule, in bounded memory.
//! Every fact is a line starting with its granule id (`domain::audit::FactLine`); the lines are
//! sorted on disk (`sort`), and the merge hands one granule's facts at a time to the pure
//! judge (`domain::audit::judge`), whose findings are written to the lists as they come.
//! Memory is the sort's budget plus one granule's facts, however large the campaign.

pub mod lists;
pub mod sort;
pub mod sources;

use anyhow::{Context, Result};
use granary::domain::audit::{judge, AuditList, FactLine, ProductTemplate, Rules, Seen, Standing};
use granary::handlers::Ctx;
use lists::ListWriters;
use sort::{LineSorter, SortedLines};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Lines the sort keeps in memory before it spills a run (about this many bytes).
pub const SORT_MEMORY: usize = 256 << 20;

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Judgement {
    pub granules: u64,
    /// Granules by standing (`succeeded`, `missing`, …).
    pub standings: BTreeMap<String, u64>,
    /// Rows in each list.
    pub lists: BTreeMap<String, u64>,
    /// Dead letters by the reason the DLQ has.
    pub dead_letters: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct AuditSummary {
    pub read: sources::Read,
    pub judged: Judgement,
    /// Sort runs spilled to disk.
    pub runs: usize,
    pub out: PathBuf,
}

/// The rules the campaign's configuration gives.
pub fn rules_of(ctx: &Ctx) -> Result<Rules> {
    let products = ctx
        .config
        .importer
        .product_keys
        .iter()
        .map(|t| ProductTemplate::parse(t))
        .collect::<Result<Vec<_>, _>>()
        .context("GRANARY_PRODUCT_KEYS")?;
    // The Jobs section would ask for the job queue too: the audit reads the one setting.
    let raw = std::env::var("GRANARY_JOB_MEMORY_MIB")
        .unwrap_or_else(|_| granary::config::DEFAULT_JOB_MEMORY.to_owned());
    let memory = granary::domain::memory::MemoryLimits::parse(&raw)
        .with_context(|| format!("GRANARY_JOB_MEMORY_MIB={raw}"))?;
    Ok(Rules {
        budget: ctx.config.attempt_budget,
        memory,
        products,
    })
}

/// Reads the three tables and the held attempts, judges every granule, writes the lists and
/// `summary.json` under `out`.
pub async fn audit(
    ctx: &Ctx,
    out: &Path,
    sort_memory: usize,
    progress: &dyn Fn(&str),
) -> Result<AuditSummary> {
    let rules = rules_of(ctx)?;
    let mut sorter = LineSorter::new(sort_memory);
    let mut read = sources::Read::default();
    // The attempts held open first: one that ends while the logs are read is then both held
    // and logged (judged by its log), never neither (called missing).
    sources::held(ctx, &mut sorter, &mut read).await?;
    sources::inventories(ctx, &mut sorter, &mut read, progress).await?;
    sources::logs(ctx, &mut sorter, &mut read, progress).await?;
    sources::products(ctx, &rules.products, &mut sorter, &mut read, progress).await?;
    let runs = sorter.runs();
    progress("judging");
    let mut writers = ListWriters::create(out)?;
    let judged = judge_sorted(sorter.finish()?, &rules, &mut writers)?;
    writers.finish()?;
    let summary = AuditSummary {
        read,
        judged,
        runs,
        out: out.to_owned(),
    };
    let at = out.join("summary.json");
    std::fs::write(&at, serde_json::to_vec_pretty(&summary)?)
        .with_context(|| format!("writing {}", at.display()))?;
    Ok(summary)
}

/// The merge: each granule's lines together, judged, its findings written.
pub fn judge_sorted(
    mut sorted: SortedLines,
    rules: &Rules,
    writers: &mut ListWriters,
) -> Result<Judgement> {
    let mut j = Judgement::default();
    for list in AuditList::ALL {
        j.lists.insert(list.name().to_owned(), 0);
    }
    let mut granule: Option<String> = None;
    let mut facts: Vec<Seen> = Vec::new();
    loop {
        let line = sorted.next_line().context("reading the sorted facts")?;
        let fact = line.as_deref().map(FactLine::decode).transpose()?;
        let same = matches!((&fact, &granule), (Some(f), Some(g)) if &f.granule_id == g);
        if !same {
            if let Some(id) = granule.take() {
                one(&id, &facts, rules, writers, &mut j)?;
                facts.clear();
            }
        }
        let Some(fact) = fact else { break };
        granule.get_or_insert(fact.granule_id);
        facts.push(fact.seen);
    }
    Ok(j)
}

fn one(
    id: &str,
    facts: &[Seen],
    rules: &Rules,
    writers: &mut ListWriters,
    j: &mut Judgement,
) -> Result<()> {
    let judged = judge(id, facts, rules);
    j.granules += u64::from(judged.standing != Standing::NotInventoried);
    *j.standings
        .entry(judged.standing.name().to_owned())
        .or_default() += 1;
    if let Some(reason) = judged.dead_letter_reason {
        *j.dead_letters.entry(reason).or_default() += 1;
    }
    for finding in judged.findings {
        *j.lists.entry(finding.list.name().to_owned()).or_default() += 1;
        writers.write(finding)?;
    }
    Ok(())
}
