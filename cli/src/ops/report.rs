//! `granary report`: the report queries' numbers, from Athena or from a scan of the logs.

use anyhow::{bail, Context, Result};
use granary::domain::report::{compute, Reports};
use serde_json::Value;
use std::time::Duration;

/// One report as rows of strings, for tables and CSV.
pub struct Section {
    pub name: &'static str,
    pub title: &'static str,
    pub header: Vec<&'static str>,
    pub rows: Vec<Vec<String>>,
}

pub fn sections(r: &Reports) -> Vec<Section> {
    vec![
        Section {
            name: "granules_by_platform_outcome",
            title: "Granules by platform and latest outcome",
            header: vec!["platform", "outcome", "granules"],
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
            header: vec!["acquisition_year", "outcome", "granules"],
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
            header: vec!["reason", "granules"],
            rows: r
                .failures_by_reason
                .iter()
                .map(|x| vec![x.reason.clone(), x.granules.to_string()])
                .collect(),
        },
        Section {
            name: "successes_per_day",
            title: "Successes per day (UTC, when logged)",
            header: vec!["day", "granules"],
            rows: r
                .successes_per_day
                .iter()
                .map(|x| vec![x.day.clone(), x.granules.to_string()])
                .collect(),
        },
        Section {
            name: "successes_per_acquisition_month",
            title: "Successes per acquisition month and platform",
            header: vec!["acquisition_month", "platform", "granules"],
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
    let facts = granary::repositories::logs::scan_log_facts(store, log_prefix, progress)
        .await
        .context("reading the logs")?;
    Ok(compute(&facts))
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
        run_query(client, target, &sql).await?;
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
    let mut out = Vec::new();
    for s in sections(r) {
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
}
