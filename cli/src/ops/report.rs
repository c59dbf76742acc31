//! `granary report`: the report queries' numbers, from Athena or from a scan of the logs.

use anyhow::{bail, Context, Result};
use granary::domain::report::{compute, LogFact, OutcomeChange, Reports};
use serde_json::Value;
use std::time::Duration;

/// One report as rows of strings, for tables and CSV.
pub struct Section {
    pub name: &'static str,
    pub title: &'static str,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

pub fn sections(r: &Reports) -> Vec<Section> {
    vec![
        Section {
            name: "granules_by_platform_outcome",
            title: "Granules by platform and latest outcome",
            header: ["platform", "outcome", "granules"]
                .map(String::from)
                .to_vec(),
            rows: r
                .granules_by_platform_outcome
                .iter()
                .map(|x| {
                    vec![
                        x.platform.clone(),
                        x.outcome.clone(),
                        x.granules.to_string(),
                    ]
                })
                .collect(),
        },
        Section {
            name: "granules_by_acquisition_year",
            title: "Granules by acquisition year",
            header: ["acquisition_year", "outcome", "granules"]
                .map(String::from)
                .to_vec(),
            rows: r
                .granules_by_acquisition_year
                .iter()
                .map(|x| {
                    vec![
                        x.acquisition_year.clone(),
                        x.outcome.clone(),
                        x.granules.to_string(),
                    ]
                })
                .collect(),
        },
        Section {
            name: "failures_by_reason",
            title: "Still failing, by reason",
            header: ["reason", "granules"].map(String::from).to_vec(),
            rows: r
                .failures_by_reason
                .iter()
                .map(|x| vec![x.reason.clone(), x.granules.to_string()])
                .collect(),
        },
        Section {
            name: "successes_per_day",
            title: "Successes per day (UTC, when logged)",
            header: ["day", "granules"].map(String::from).to_vec(),
            rows: r
                .successes_per_day
                .iter()
                .map(|x| vec![x.day.clone(), x.granules.to_string()])
                .collect(),
        },
        Section {
            name: "successes_per_acquisition_month",
            title: "Successes per acquisition month and platform",
            header: ["acquisition_month", "platform", "granules"]
                .map(String::from)
                .to_vec(),
            rows: r
                .successes_per_acquisition_month
                .iter()
                .map(|x| {
                    vec![
                        x.acquisition_month.clone(),
                        x.platform.clone(),
                        x.granules.to_string(),
                    ]
                })
                .collect(),
        },
    ]
}

/// The reports from a scan of the log objects (LIST + one GET per log).
pub async fn scan(
    store: &dyn granary::ports::ObjectStore,
    log_prefix: &str,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<Reports> {
    Ok(compute(&scan_facts(store, log_prefix, progress).await?))
}

/// What the log objects under `log_prefix` say, one fact a log.
pub async fn scan_facts(
    store: &dyn granary::ports::ObjectStore,
    log_prefix: &str,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<Vec<LogFact>> {
    granary::repositories::logs::scan_log_facts(store, log_prefix, progress)
        .await
        .with_context(|| format!("reading the logs under {log_prefix}"))
}

/// Two campaigns' reports side by side (`granary report --compare`): each section's rows keyed
/// by all but their count, with the count in each campaign and the change from the first to
/// the second; a row one campaign lacks counts 0 there.
pub fn compare_sections(first: &Reports, second: &Reports, names: [&str; 2]) -> Vec<Section> {
    sections(first)
        .into_iter()
        .zip(sections(second))
        .map(|(a, b)| {
            let counts = |s: &Section| -> std::collections::BTreeMap<Vec<String>, i64> {
                s.rows
                    .iter()
                    .filter_map(|row| {
                        let (count, key) = row.split_last()?;
                        Some((key.to_vec(), count.parse().ok()?))
                    })
                    .collect()
            };
            let (in_a, in_b) = (counts(&a), counts(&b));
            let keys: std::collections::BTreeSet<&Vec<String>> =
                in_a.keys().chain(in_b.keys()).collect();
            let rows = keys
                .into_iter()
                .map(|key| {
                    let x = in_a.get(key).copied().unwrap_or(0);
                    let y = in_b.get(key).copied().unwrap_or(0);
                    let mut row = key.clone();
                    row.extend([x.to_string(), y.to_string(), format!("{:+}", y - x)]);
                    row
                })
                .collect();
            let mut header = a.header[..a.header.len().saturating_sub(1)].to_vec();
            header.extend([
                names[0].to_owned(),
                names[1].to_owned(),
                "change".to_owned(),
            ]);
            Section {
                name: a.name,
                title: a.title,
                header,
                rows,
            }
        })
        .collect()
}

/// The outcome changes as a section (granules that moved from one outcome to another).
pub fn changes_section(changes: &[OutcomeChange], names: [&str; 2]) -> Section {
    Section {
        name: "outcome_changes",
        title: "Each granule's latest outcome, first campaign to second",
        header: vec![
            names[0].to_owned(),
            names[1].to_owned(),
            "granules".to_owned(),
            "for example".to_owned(),
        ],
        rows: changes
            .iter()
            .map(|c| {
                vec![
                    c.from.clone(),
                    c.to.clone(),
                    c.granules.to_string(),
                    c.examples.join(", "),
                ]
            })
            .collect(),
    }
}

/// Where Athena runs the queries.
pub struct AthenaTarget {
    pub workgroup: String,
    pub database: String,
    /// `s3://…/` for results; `None` uses the workgroup's setting.
    pub output: Option<String>,
}

/// The reports from Athena: the views are (re)created, then each report query runs.
pub async fn athena(
    client: &aws_sdk_athena::Client,
    target: &AthenaTarget,
    sql_dir: &std::path::Path,
) -> Result<Reports> {
    for view in ["granary_latest_outcome", "granary_current_failures"] {
        let sql = read_sql(sql_dir, "views", view)?;
        run_query(client, target, &sql).await.with_context(|| {
            format!(
                "creating the view {view} (a granary_logs table made before the `revoked` \
                 column needs it added once: athena/README.md, \"Upgrading\")"
            )
        })?;
    }
    let mut out = serde_json::Map::new();
    for name in [
        "granules_by_platform_outcome",
        "granules_by_acquisition_year",
        "failures_by_reason",
        "successes_per_day",
        "successes_per_acquisition_month",
    ] {
        let sql = read_sql(sql_dir, "reports", name)?;
        let rows = run_query(client, target, &sql).await?;
        out.insert(name.to_owned(), Value::Array(rows));
    }
    serde_json::from_value(Value::Object(out))
        .context("Athena returned rows of an unexpected shape")
}

fn read_sql(dir: &std::path::Path, kind: &str, name: &str) -> Result<String> {
    let path = dir.join(kind).join(format!("{name}.sql"));
    let sql = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "reading {} (pass --sql-dir pointing at granary's athena/)",
            path.display()
        )
    })?;
    Ok(sql.trim().trim_end_matches(';').to_owned())
}

/// Runs one statement and returns its rows as JSON objects (numbers as numbers).
async fn run_query(
    client: &aws_sdk_athena::Client,
    target: &AthenaTarget,
    sql: &str,
) -> Result<Vec<Value>> {
    use aws_sdk_athena::types::{QueryExecutionContext, QueryExecutionState, ResultConfiguration};
    let mut req = client
        .start_query_execution()
        .query_string(sql)
        .work_group(&target.workgroup)
        .query_execution_context(
            QueryExecutionContext::builder()
                .database(&target.database)
                .build(),
        );
    if let Some(o) = &target.output {
        req = req.result_configuration(ResultConfiguration::builder().output_location(o).build());
    }
    let id = req
        .send()
        .await
        .context("StartQueryExecution")?
        .query_execution_id
        .context("Athena returned no query id")?;
    loop {
        let q = client
            .get_query_execution()
            .query_execution_id(&id)
            .send()
            .await
            .context("GetQueryExecution")?;
        let status = q.query_execution.and_then(|e| e.status);
        match status.as_ref().and_then(|s| s.state.clone()) {
            Some(QueryExecutionState::Succeeded) => break,
            Some(QueryExecutionState::Failed) | Some(QueryExecutionState::Cancelled) => bail!(
                "Athena query {id} failed: {}",
                status
                    .and_then(|s| s.state_change_reason)
                    .unwrap_or_default()
            ),
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
    let mut rows = Vec::new();
    let mut header: Option<Vec<String>> = None;
    let mut pages = client
        .get_query_results()
        .query_execution_id(&id)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.context("GetQueryResults")?;
        for row in page.result_set.and_then(|r| r.rows).unwrap_or_default() {
            let cells: Vec<String> = row
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|d| d.var_char_value.unwrap_or_default())
                .collect();
            match &header {
                None => header = Some(cells),
                Some(h) => {
                    // Athena returns every cell as text; counts are the only numbers here.
                    let obj: serde_json::Map<String, Value> = h
                        .iter()
                        .zip(cells)
                        .map(|(name, c)| {
                            let v = match c.parse::<u64>() {
                                Ok(n) if name == "granules" => Value::from(n),
                                _ => Value::from(c),
                            };
                            (name.clone(), v)
                        })
                        .collect();
                    rows.push(Value::Object(obj));
                }
            }
        }
    }
    Ok(rows)
}

/// CSV of every section, each preceded by a `# name` line.
pub fn to_csv(r: &Reports) -> Result<String> {
    sections_csv(&sections(r))
}

/// Sections as CSV: each its name as a comment line, its header, its rows.
pub fn sections_csv(sections: &[Section]) -> Result<String> {
    let mut out = Vec::new();
    for s in sections {
        out.extend_from_slice(format!("# {}\n", s.name).as_bytes());
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record(&s.header)?;
        for row in &s.rows {
            w.write_record(row)?;
        }
        out.extend(w.into_inner().context("writing CSV")?);
        out.push(b'\n');
    }
    Ok(String::from_utf8(out)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use granary::domain::report::ReasonCount;

    #[test]
    fn csv_has_a_section_per_report_and_quotes_commas() {
        let mut r = Reports::default();
        r.failures_by_reason.push(ReasonCount {
            reason: "exit 2, then retried".into(),
            granules: 4,
        });
        let csv = to_csv(&r).unwrap();
        assert_eq!(csv.matches("# ").count(), 5);
        assert!(
            csv.contains("# failures_by_reason\nreason,granules\n\"exit 2, then retried\",4\n"),
            "{csv}"
        );
    }

    #[test]
    fn two_campaigns_side_by_side_count_a_missing_row_as_zero() {
        let mut v1 = Reports::default();
        v1.failures_by_reason.push(ReasonCount {
            reason: "exit 2".into(),
            granules: 4,
        });
        let mut v2 = Reports::default();
        v2.failures_by_reason.push(ReasonCount {
            reason: "exit 2".into(),
            granules: 1,
        });
        v2.failures_by_reason.push(ReasonCount {
            reason: "exit 137".into(),
            granules: 2,
        });
        let sections = compare_sections(&v1, &v2, ["v1", "v2"]);
        let failures = sections
            .iter()
            .find(|s| s.name == "failures_by_reason")
            .unwrap();
        assert_eq!(failures.header, ["reason", "v1", "v2", "change"]);
        assert_eq!(
            failures.rows,
            vec![
                vec!["exit 137", "0", "2", "+2"],
                vec!["exit 2", "4", "1", "-3"],
            ]
        );
        assert_eq!(sections.len(), sections_of_one().len());
    }

    fn sections_of_one() -> Vec<Section> {
        sections(&Reports::default())
    }
}
