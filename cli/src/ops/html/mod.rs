//! `granary report --html FILE`: one self-contained page (no script, no font, no request: the
//! charts are inline SVG drawn by plotters) an operator opens or mails. It opens with the numbers
//! (granules, succeeded, failed, retried, cost), then five charts: ended granules over time,
//! outcomes per platform, failure reasons (listed in full beside it), the cost (a table beside
//! it) and the attempt each granule ended at. Each chart sits in a fixed box ([`CHART_BOXES`]) so
//! a test can look at each in a browser's screenshot.

mod charts;

use anyhow::Result;
use chrono::{DateTime, Utc};
use granary::domain::cost::CampaignCost;
use granary::domain::report::{latest_outcomes, LogFact, Reports};
use plotters::style::RGBColor;
use std::fmt::Write as _;

/// The series colours (the first four of the category10 palette): saturated, so a screenshot
/// tells a drawn series from axes and text.
pub const SERIES: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
];

/// A chart's box on the page, in CSS pixels from the page's top left.
#[derive(Debug, Clone, Copy)]
pub struct ChartBox {
    pub id: &'static str,
    pub x: u32,
    pub y: u32,
    pub width: u32,
    pub height: u32,
}

const W: u32 = 620;
const H: u32 = 340;
/// Where the charts start, below the header and the numbers.
const TOP: u32 = 230;
/// One row of charts and the gap under it.
const ROW: u32 = H + 20;
const LEFT: u32 = 20;
const RIGHT: u32 = 660;

const fn chart(id: &'static str, x: u32, row: u32) -> ChartBox {
    ChartBox {
        id,
        x,
        y: TOP + row * ROW,
        width: W,
        height: H,
    }
}

/// Where each chart is drawn: the failure reasons' list and the cost table take the right of
/// their charts' rows.
pub const CHART_BOXES: [ChartBox; 5] = [
    chart("progress", LEFT, 0),
    chart("outcomes", RIGHT, 0),
    chart("failures", LEFT, 1),
    chart("cost", LEFT, 2),
    chart("attempts", LEFT, 3),
];

/// The page's size in CSS pixels: a browser window this large shows every chart.
pub const PAGE: (u32, u32) = (1300, TOP + 4 * ROW + 20);

/// What the page is drawn from.
pub struct PageInput<'a> {
    /// Which campaign, of which bucket.
    pub title: String,
    pub generated_at: DateTime<Utc>,
    /// One a log (a job's end).
    pub facts: &'a [LogFact],
    pub reports: &'a Reports,
    pub cost: Option<&'a CampaignCost>,
}

/// One line of the cost table and one bar of its chart.
pub(crate) struct CostLine {
    short: &'static str,
    what: &'static str,
    dollars: f64,
}

fn cost_lines(c: Option<&CampaignCost>) -> Vec<CostLine> {
    let Some(c) = c else { return Vec::new() };
    let line = |short, what, dollars| CostLine {
        short,
        what,
        dollars,
    };
    vec![
        line(
            "compute",
            "compute, latest attempts",
            c.compute_dollars - c.retried_compute_dollars,
        ),
        line(
            "retried",
            "compute, attempts retried",
            c.retried_compute_dollars,
        ),
        line("S3", "S3 requests", c.s3_dollars),
        line("SQS", "SQS requests", c.sqs_dollars),
        line("Lambda", "Lambda", c.lambda_dollars),
    ]
}

/// Dollars to the cent, or under a dollar to two significant digits (a small campaign's SQS
/// bill is a few millionths, not nothing).
fn dollars(v: f64) -> String {
    if v.abs() >= 1.0 || v == 0.0 {
        format!("${v:.2}")
    } else {
        let places = (-v.abs().log10()).floor() as usize + 2;
        format!("${v:.places$}")
    }
}

/// The whole page.
pub fn page(input: &PageInput<'_>) -> Result<String> {
    let latest = latest_outcomes(input.facts);
    let succeeded = latest.iter().filter(|f| f.outcome == "success").count();
    let retried = latest.iter().filter(|f| f.attempt > 1).count();
    let costs = cost_lines(input.cost);
    let svgs = [
        charts::progress(&latest)?,
        charts::outcomes(input.reports)?,
        charts::failures(input.reports)?,
        charts::cost(&costs)?,
        charts::attempts(&latest)?,
    ];
    let mut html = String::new();
    write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>{title}</title><style>\
         body{{margin:0;font-family:sans-serif;background:#fff;color:#222;\
         width:{pw}px;height:{ph}px;position:relative}}\
         header{{position:absolute;left:20px;top:10px;width:1260px}}\
         h1{{font-size:22px;margin:8px 0}} p{{margin:4px 0;font-size:14px}}\
         table{{border-collapse:collapse;font-size:15px}}\
         td,th{{border:1px solid #999;padding:4px 10px;text-align:right}}\
         th{{background:#eee}} td.what,th.what{{text-align:left}}\
         #numbers td{{font-size:22px;font-weight:bold}}\
         figure{{position:absolute;margin:0;overflow:hidden}}\
         aside{{position:absolute;width:{W}px;height:{H}px;overflow:auto;font-size:14px}}\
         ol{{margin:6px 0;padding-left:28px}} li{{margin:0 0 8px;overflow-wrap:anywhere}}\
         </style></head><body><header><h1>{title}</h1>",
        title = escape(&input.title),
        pw = PAGE.0,
        ph = PAGE.1,
    )?;
    numbers(&mut html, latest.len(), succeeded, retried, input.cost)?;
    write!(
        html,
        "<p>granules ended, each at its latest attempt ({jobs} jobs, one a log); \
         generated {at} by granary report --html</p></header>",
        jobs = input.facts.len(),
        at = input.generated_at.format("%Y-%m-%d %H:%M:%S UTC"),
    )?;
    for (b, svg) in CHART_BOXES.iter().zip(svgs) {
        write!(
            html,
            "<figure id=\"{id}\" style=\"left:{x}px;top:{y}px;width:{w}px;height:{h}px\">{svg}</figure>",
            id = b.id,
            x = b.x,
            y = b.y,
            w = b.width,
            h = b.height,
        )?;
    }
    reasons(&mut html, input.reports)?;
    cost_table(&mut html, &costs, input.cost)?;
    html.push_str("</body></html>\n");
    Ok(html)
}

/// The numbers an operator reads first.
fn numbers(
    html: &mut String,
    ended: usize,
    succeeded: usize,
    retried: usize,
    cost: Option<&CampaignCost>,
) -> Result<()> {
    let total = cost.map_or_else(
        || "add --cost".to_owned(),
        |c| {
            format!(
                "{} ({} a million)",
                dollars(c.total_dollars),
                dollars(c.dollars_per_granule * 1e6)
            )
        },
    );
    write!(
        html,
        "<table id=\"numbers\"><tr><th>granules</th><th>succeeded</th>\
         <th>failed (dead-lettered or retrying)</th><th>retried</th><th>cost</th></tr>\
         <tr><td id=\"n-granules\">{ended}</td><td id=\"n-succeeded\">{succeeded}</td>\
         <td id=\"n-failed\">{failed}</td><td id=\"n-retried\">{retried}</td>\
         <td id=\"n-cost\">{total}</td></tr></table>",
        failed = ended - succeeded,
        total = escape(&total),
    )?;
    Ok(())
}

/// Beside the failures chart: its reasons, numbered as its bars, in full and wrapped.
fn reasons(html: &mut String, r: &Reports) -> Result<()> {
    let b = CHART_BOXES[2];
    write!(
        html,
        "<aside id=\"reasons\" style=\"left:{RIGHT}px;top:{y}px\"><b>Failure reasons</b> \
         (granules failed at their latest attempt)<ol>",
        y = b.y
    )?;
    for f in r.failures_by_reason.iter().take(charts::FAILURE_BARS) {
        write!(
            html,
            "<li><b>{n}</b>: {reason}</li>",
            n = f.granules,
            reason = escape(&f.reason)
        )?;
    }
    let more = r
        .failures_by_reason
        .len()
        .saturating_sub(charts::FAILURE_BARS);
    if more > 0 {
        write!(
            html,
            "</ol><p>{more} more reasons: granary report --scan</p></aside>"
        )?;
    } else {
        html.push_str("</ol></aside>");
    }
    Ok(())
}

/// Beside the cost chart: the same dollars as a table, with what they were computed from.
fn cost_table(html: &mut String, lines: &[CostLine], c: Option<&CampaignCost>) -> Result<()> {
    let b = CHART_BOXES[3];
    write!(
        html,
        "<aside id=\"cost-table\" style=\"left:{RIGHT}px;top:{y}px\">",
        y = b.y
    )?;
    let Some(c) = c else {
        html.push_str("<p>cost: not computed (granary report --cost)</p></aside>");
        return Ok(());
    };
    html.push_str("<table><tr><th class=\"what\">what</th><th>dollars</th></tr>");
    for l in lines {
        write!(
            html,
            "<tr><td class=\"what\">{}</td><td>{}</td></tr>",
            l.what,
            dollars(l.dollars)
        )?;
    }
    write!(
        html,
        "<tr><th class=\"what\">in all</th><th>{}</th></tr></table>\
         <p>{jobs} jobs, {vcpu:.1} vCPU-hours at ${vp} and {gib:.1} GiB-hours at ${gp}: each \
         attempt's run time at the prices given (granary report --cost).</p></aside>",
        dollars(c.total_dollars),
        jobs = c.jobs,
        vcpu = c.vcpu_hours,
        vp = c.prices.vcpu_hour,
        gib = c.gib_hours,
        gp = c.prices.gib_hour,
    )?;
    Ok(())
}

/// Text made safe inside HTML.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests;
