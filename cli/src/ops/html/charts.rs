//! The report page's charts: inline SVG drawn by plotters, each `W` x `H`. Counts sit on
//! integer axes; dollars keep their cents.

use super::{CostLine, H, SERIES, W};
use anyhow::{anyhow, Result};
use chrono::{DateTime, Utc};
use granary::domain::report::{LogFact, Reports};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::collections::BTreeMap;

/// What a chart's y axis counts: whole granules, or dollars.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Axis {
    Count,
    Dollars,
}

impl Axis {
    fn desc(self) -> &'static str {
        match self {
            Axis::Count => "granules",
            Axis::Dollars => "dollars",
        }
    }
}

/// The y axis's top and how many labels it gets: for counts, a whole number with one label a
/// step of a whole number (plotters then never labels 0.5, and 300 prints as "300").
fn y_axis(top: f64, axis: Axis, headroom: f64) -> (f64, usize) {
    if top <= 0.0 {
        return (1.0, 2);
    }
    let top = top * headroom;
    match axis {
        Axis::Count => {
            let whole = top.ceil().max(1.0);
            (whole, (whole as usize + 1).min(11))
        }
        Axis::Dollars => (top, 11),
    }
}

fn y_label(axis: Axis, v: f64) -> String {
    match axis {
        Axis::Count => format!("{v:.0}"),
        Axis::Dollars if v.abs() >= 10.0 => format!("{v:.0}"),
        Axis::Dollars => format!("{v:.2}"),
    }
}

/// How many reasons the failures chart shows.
pub(super) const FAILURE_BARS: usize = 6;

/// Ended granules (latest outcomes) over time, succeeded and failed, cumulative.
pub(super) fn progress(latest: &[&LogFact]) -> Result<String> {
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
    )
}

pub(super) fn outcomes(r: &Reports) -> Result<String> {
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
    bars(title, &categories, &series, Axis::Count)
}

/// The six commonest reasons, numbered as the list beside the chart numbers them (the reasons
/// themselves, in full, are in that list: a bar's label would cut them short).
pub(super) fn failures(r: &Reports) -> Result<String> {
    let top: Vec<_> = r.failures_by_reason.iter().take(FAILURE_BARS).collect();
    let categories: Vec<String> = (1..=top.len()).map(|i| format!("#{i}")).collect();
    let series = [(
        "failed granules",
        top.iter().map(|f| f.granules as f64).collect(),
    )];
    bars(
        "Failure reasons (latest attempt)",
        &categories,
        &series,
        Axis::Count,
    )
}

pub(super) fn attempts(latest: &[&LogFact]) -> Result<String> {
    let mut by: BTreeMap<u32, [f64; 2]> = BTreeMap::new();
    for f in latest {
        by.entry(f.attempt).or_default()[usize::from(f.outcome != "success")] += 1.0;
    }
    succeeded_and_failed(
        "The attempt each granule ended at",
        by.into_iter().map(|(a, v)| (format!("attempt {a}"), v)),
    )
}

pub(super) fn cost(lines: &[CostLine]) -> Result<String> {
    if lines.is_empty() {
        return bars("Cost (run with --cost)", &[], &[], Axis::Dollars);
    }
    let categories: Vec<String> = lines.iter().map(|l| l.short.to_owned()).collect();
    let series = [("dollars", lines.iter().map(|l| l.dollars).collect())];
    bars("Cost of the campaign", &categories, &series, Axis::Dollars)
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
    axis: Axis,
) -> Result<String> {
    let top = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(0.0_f64, f64::max);
    let legend = (top > 0.0).then_some(SeriesLabelPosition::UpperRight);
    let (top, labels) = y_axis(top, axis, 1.12);
    let n = categories.len().max(1);
    svg_chart(title, 0.0..n as f64, 0.0..top, legend, |root, chart| {
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_labels(labels)
            .y_label_formatter(&|v| y_label(axis, *v))
            .y_desc(axis.desc())
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
            // Dollars over each bar: S3's cents stay readable beside compute's hundreds.
            if axis == Axis::Dollars {
                let above =
                    TextStyle::from(("sans-serif", 12)).pos(Pos::new(HPos::Center, VPos::Bottom));
                for (i, v) in values.iter().enumerate() {
                    let centre = i as f64 + 0.1 + (k as f64 + 0.5) * width;
                    let (x, y) = chart.backend_coord(&(centre, *v));
                    root.draw(&Text::new(super::dollars(*v), (x, y - 3), above.clone()))
                        .map_err(|e| anyhow!("{e}"))?;
                }
            }
        }
        Ok(())
    })
}

/// Lines through (x, y) points, one a series; y counts granules.
fn lines(title: &str, series: &[(&str, Vec<(f64, f64)>)], x_desc: &str) -> Result<String> {
    let points = || series.iter().flat_map(|(_, v)| v.iter().copied());
    let right = points().map(|p| p.0).fold(0.0_f64, f64::max);
    let top = points().map(|p| p.1).fold(0.0_f64, f64::max);
    let right = if right > 0.0 { right } else { 1.0 };
    let legend = (top > 0.0).then_some(SeriesLabelPosition::UpperLeft);
    let (top, labels) = y_axis(top, Axis::Count, 1.1);
    svg_chart(title, 0.0..right, 0.0..top, legend, |_, chart| {
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_labels(labels)
            .y_label_formatter(&|v| y_label(Axis::Count, *v))
            .y_desc(Axis::Count.desc())
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
