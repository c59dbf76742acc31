//! `granary report --html FILE`: one self-contained page (no script, no font, no request: the
//! charts are inline SVG drawn by plotters) an operator opens or mails. Five charts: ended
//! granules over time, outcomes per platform, failure reasons, the attempt each granule ended
//! at, and cost. Each chart sits in a fixed box ([`CHART_BOXES`]) so a test can look at each in a
//! browser's screenshot.

use anyhow::{anyhow, Result};
use chrono::{DateTime, Utc};
use granary::domain::cost::CampaignCost;
use granary::domain::report::{latest_outcomes, LogFact, Reports};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::collections::BTreeMap;
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

/// Where each chart is drawn.
pub const CHART_BOXES: [ChartBox; 5] = [
    ChartBox {
        id: "progress",
        x: 20,
        y: 180,
        width: W,
        height: H,
    },
    ChartBox {
        id: "outcomes",
        x: 660,
        y: 180,
        width: W,
        height: H,
    },
    ChartBox {
        id: "failures",
        x: 20,
        y: 540,
        width: W,
        height: H,
    },
    ChartBox {
        id: "attempts",
        x: 660,
        y: 540,
        width: W,
        height: H,
    },
    ChartBox {
        id: "cost",
        x: 20,
        y: 900,
        width: W,
        height: H,
    },
];

/// The page's size in CSS pixels: a browser window this large shows every chart.
pub const PAGE: (u32, u32) = (1300, 1260);

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

/// The whole page.
pub fn page(input: &PageInput<'_>) -> Result<String> {
    let latest = latest_outcomes(input.facts);
    let succeeded = latest.iter().filter(|f| f.outcome == "success").count();
    let failed = latest.len() - succeeded;
    let charts = [
        progress(&latest)?,
        outcomes(input.reports)?,
        failures(input.reports)?,
        attempts(&latest)?,
        cost(input.cost)?,
    ];
    let mut html = String::new();
    let cost_line = input.cost.map_or_else(
        || "cost: not computed (add --cost)".to_owned(),
        |c| {
            format!(
                "cost ${:.2} in all, ${:.0} a million granules ({} jobs, {:.1} vCPU-hours at ${} \
                 and {:.1} GiB-hours at ${}: each attempt's run time at the prices given, see \
                 granary report --cost)",
                c.total_dollars,
                c.dollars_per_granule * 1e6,
                c.jobs,
                c.vcpu_hours,
                c.prices.vcpu_hour,
                c.gib_hours,
                c.prices.gib_hour
            )
        },
    );
    write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>{title}</title><style>\
         body{{margin:0;font-family:sans-serif;background:#fff;color:#222;\
         width:{pw}px;height:{ph}px;position:relative}}\
         header{{position:absolute;left:20px;top:10px;width:1260px}}\
         h1{{font-size:22px;margin:8px 0}} p{{margin:4px 0;font-size:15px}}\
         figure{{position:absolute;margin:0;overflow:hidden}}\
         </style></head><body><header><h1>{title}</h1>\
         <p>{ended} granules ended: <b>{succeeded}</b> succeeded, <b>{failed}</b> failed \
         ({jobs} jobs, one a log)</p><p>{cost_line}</p>\
         <p>generated {at} by granary report --html</p></header>",
        title = escape(&input.title),
        pw = PAGE.0,
        ph = PAGE.1,
        ended = latest.len(),
        jobs = input.facts.len(),
        cost_line = escape(&cost_line),
        at = input.generated_at.format("%Y-%m-%d %H:%M:%S UTC"),
    )?;
    for (b, svg) in CHART_BOXES.iter().zip(charts) {
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
    html.push_str("</body></html>\n");
    Ok(html)
}

/// Ended granules (latest outcomes) over time, succeeded and failed, cumulative.
fn progress(latest: &[&LogFact]) -> Result<String> {
    let mut ends: Vec<(DateTime<Utc>, bool)> = latest
        .iter()
        .filter_map(|f| {
            DateTime::parse_from_rfc3339(&f.logged_at)
                .ok()
                .map(|t| (t.with_timezone(&Utc), f.outcome == "success"))
        })
        .collect();
    ends.sort();
    let start = ends.first().map(|e| e.0);
    let span_ms = match (start, ends.last()) {
        (Some(s), Some(e)) => (e.0 - s).num_milliseconds() as f64,
        _ => 0.0,
    };
    // Minutes for a short campaign, hours for a day or so, days beyond.
    let (unit_ms, unit) = if span_ms < 2.0 * 3_600_000.0 {
        (60_000.0, "minutes")
    } else if span_ms < 72.0 * 3_600_000.0 {
        (3_600_000.0, "hours")
    } else {
        (86_400_000.0, "days")
    };
    let hours =
        |t: DateTime<Utc>| start.map_or(0.0, |s| (t - s).num_milliseconds() as f64 / unit_ms);
    let (mut ok, mut bad) = (0u64, 0u64);
    let mut succeeded = vec![(0.0, 0.0)];
    let mut failed = vec![(0.0, 0.0)];
    for (t, success) in &ends {
        let h = hours(*t);
        if *success {
            ok += 1;
            succeeded.push((h, ok as f64));
        } else {
            bad += 1;
            failed.push((h, bad as f64));
        }
    }
    let span = ends.last().map_or(0.0, |e| hours(e.0));
    // A last point at the end for both, so each line reaches across the chart.
    succeeded.push((span, ok as f64));
    failed.push((span, bad as f64));
    lines(
        "Granules ended over time",
        &[("succeeded", succeeded), ("failed", failed)],
        &format!("{unit} since the first end"),
        "granules",
    )
}

fn outcomes(r: &Reports) -> Result<String> {
    let mut by: BTreeMap<&str, [f64; 2]> = BTreeMap::new();
    for p in &r.granules_by_platform_outcome {
        by.entry(p.platform.as_str()).or_default()[usize::from(p.outcome != "success")] +=
            p.granules as f64;
    }
    succeeded_and_failed(
        "Latest outcome per platform",
        by.into_iter().map(|(k, v)| (k.to_owned(), v)),
    )
}

/// Two bars a group, succeeded and failed granules: `groups` are (name, [succeeded, failed]).
fn succeeded_and_failed(
    title: &str,
    groups: impl Iterator<Item = (String, [f64; 2])>,
) -> Result<String> {
    let (categories, counts): (Vec<String>, Vec<[f64; 2]>) = groups.unzip();
    let series = [
        ("succeeded", counts.iter().map(|v| v[0]).collect()),
        ("failed", counts.iter().map(|v| v[1]).collect()),
    ];
    bars(title, &categories, &series, "granules")
}

fn failures(r: &Reports) -> Result<String> {
    let top: Vec<_> = r.failures_by_reason.iter().take(6).collect();
    let categories: Vec<String> = top.iter().map(|f| shorten(&f.reason, 22)).collect();
    let series = [(
        "failed granules",
        top.iter().map(|f| f.granules as f64).collect(),
    )];
    bars(
        "Failure reasons (latest attempt)",
        &categories,
        &series,
        "granules",
    )
}

fn attempts(latest: &[&LogFact]) -> Result<String> {
    let mut by: BTreeMap<u32, [f64; 2]> = BTreeMap::new();
    for f in latest {
        by.entry(f.attempt).or_default()[usize::from(f.outcome != "success")] += 1.0;
    }
    succeeded_and_failed(
        "The attempt each granule ended at",
        by.into_iter().map(|(a, v)| (format!("attempt {a}"), v)),
    )
}

fn cost(c: Option<&CampaignCost>) -> Result<String> {
    let Some(c) = c else {
        return bars("Cost (run with --cost)", &[], &[], "dollars");
    };
    let categories: Vec<String> = ["compute", "S3", "SQS", "Lambda"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    let series = [
        (
            "latest attempts",
            vec![
                c.compute_dollars - c.retried_compute_dollars,
                c.s3_dollars,
                c.sqs_dollars,
                c.lambda_dollars,
            ],
        ),
        (
            "retried attempts",
            vec![c.retried_compute_dollars, 0.0, 0.0, 0.0],
        ),
    ];
    bars("Cost of the campaign", &categories, &series, "dollars")
}

/// A chart's drawing context: both kinds of chart plot on f64 axes.
type Plot<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// One chart as SVG: a white `W` x `H` frame with `title` and axes over `x` × `y`, whatever
/// `draw` puts on it, and its series' legend at `legend` (none when nothing was drawn: a chart
/// without data shows its axes and title only).
fn svg_chart(
    title: &str,
    x: std::ops::Range<f64>,
    y: std::ops::Range<f64>,
    legend: Option<SeriesLabelPosition>,
    draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, Shift>, &mut Plot<'_, '_>) -> Result<()>,
) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(x, y)
            .map_err(|e| anyhow!("{e}"))?;
        draw(&root, &mut chart)?;
        if let Some(at) = legend {
            chart
                .configure_series_labels()
                .position(at)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(|e| anyhow!("{e}"))?;
        }
        root.present().map_err(|e| anyhow!("{e}"))?;
    }
    Ok(svg)
}

/// Grouped vertical bars: one group a category, one bar a series.
fn bars(
    title: &str,
    categories: &[String],
    series: &[(&str, Vec<f64>)],
    y_desc: &str,
) -> Result<String> {
    let top = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(0.0_f64, f64::max);
    let legend = (top > 0.0).then_some(SeriesLabelPosition::UpperRight);
    let top = if top > 0.0 { top * 1.12 } else { 1.0 };
    let n = categories.len().max(1);
    svg_chart(title, 0.0..n as f64, 0.0..top, legend, |root, chart| {
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_desc(y_desc)
            .draw()
            .map_err(|e| anyhow!("{e}"))?;
        // Each category's name under its group (plotters places numeric labels where it likes).
        let label = TextStyle::from(("sans-serif", 13)).pos(Pos::new(HPos::Center, VPos::Top));
        for (i, name) in categories.iter().enumerate() {
            let (x, y) = chart.backend_coord(&(i as f64 + 0.5, 0.0));
            root.draw(&Text::new(name.clone(), (x, y + 8), label.clone()))
                .map_err(|e| anyhow!("{e}"))?;
        }
        let width = 0.8 / series.len().max(1) as f64;
        for (k, (name, values)) in series.iter().enumerate() {
            let colour = SERIES[k % SERIES.len()];
            chart
                .draw_series(values.iter().enumerate().map(|(i, v)| {
                    let x0 = i as f64 + 0.1 + k as f64 * width;
                    Rectangle::new([(x0, 0.0), (x0 + width, *v)], colour.filled())
                }))
                .map_err(|e| anyhow!("{e}"))?
                .label(*name)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled())
                });
        }
        Ok(())
    })
}

/// Lines through (x, y) points, one a series.
fn lines(
    title: &str,
    series: &[(&str, Vec<(f64, f64)>)],
    x_desc: &str,
    y_desc: &str,
) -> Result<String> {
    let points = || series.iter().flat_map(|(_, v)| v.iter().copied());
    let right = points().map(|p| p.0).fold(0.0_f64, f64::max);
    let top = points().map(|p| p.1).fold(0.0_f64, f64::max);
    let right = if right > 0.0 { right } else { 1.0 };
    let legend = (top > 0.0).then_some(SeriesLabelPosition::UpperLeft);
    let top = if top > 0.0 { top * 1.1 } else { 1.0 };
    svg_chart(title, 0.0..right, 0.0..top, legend, |_, chart| {
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .draw()
            .map_err(|e| anyhow!("{e}"))?;
        for (k, (name, values)) in series.iter().enumerate() {
            let colour = SERIES[k % SERIES.len()];
            chart
                .draw_series(LineSeries::new(
                    values.iter().copied(),
                    colour.stroke_width(3),
                ))
                .map_err(|e| anyhow!("{e}"))?
                .label(*name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], colour.stroke_width(3))
                });
        }
        Ok(())
    })
}

/// At most `n` characters, an ellipsis for the rest.
fn shorten(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        let mut out: String = s.chars().take(n - 1).collect();
        out.push('…');
        out
    }
}

/// Text made safe inside HTML.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fact(g: &str, attempt: u32, outcome: &str, reason: &str, at: &str) -> LogFact {
        LogFact {
            granule_id: g.into(),
            attempt,
            outcome: outcome.into(),
            platform: "S30".into(),
            acquisition_date: "2022-08-14".into(),
            reason: reason.into(),
            logged_at: at.into(),
            superseded: false,
            revoked: false,
            usage: None,
        }
    }

    #[test]
    fn the_page_is_self_contained_and_escapes_what_it_quotes() {
        let facts = vec![
            fact("a", 1, "success", "ok", "2026-11-27T01:00:00Z"),
            fact("b", 1, "failure", "exit <3> & more", "2026-11-27T01:30:00Z"),
        ];
        let reports = granary::domain::report::compute(&facts);
        let html = page(&PageInput {
            title: "campaign <v2>".into(),
            generated_at: Utc::now(),
            facts: &facts,
            reports: &reports,
            cost: None,
        })
        .unwrap();
        assert!(html.contains("campaign &lt;v2&gt;"));
        assert!(!html.contains("<v2>"));
        assert_eq!(html.matches("<svg").count(), CHART_BOXES.len());
        for b in CHART_BOXES {
            assert!(html.contains(&format!("id=\"{}\"", b.id)));
        }
        // Nothing fetched from elsewhere: no script, stylesheet, image or font by URL (the SVG
        // namespace is a name, not a fetch).
        let fetched = html.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
        for outside in ["<script", "<link", "src=", "url(", "http://", "https://"] {
            assert!(!fetched.contains(outside), "{outside}");
        }
        assert!(html.contains("<b>1</b> succeeded, <b>1</b> failed"));
    }
}
