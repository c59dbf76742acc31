//! The successes-per-acquisition-month chart, one line per platform, as SVG (plotters).

use anyhow::{anyhow, Result};
use granary::domain::report::Reports;
use plotters::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

const COLOURS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// Writes the chart to `path` (SVG). Months without successes are drawn as zero.
pub fn successes_per_month(r: &Reports, path: &std::path::Path) -> Result<()> {
    let months: Vec<String> = r
        .successes_per_acquisition_month
        .iter()
        .map(|m| m.acquisition_month.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut series: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for m in &r.successes_per_acquisition_month {
        let i = months
            .iter()
            .position(|x| *x == m.acquisition_month)
            .unwrap_or(0);
        series
            .entry(m.platform.as_str())
            .or_insert_with(|| vec![0; months.len()])[i] += m.granules;
    }
    let top = series.values().flatten().copied().max().unwrap_or(0).max(1);
    let root = SVGBackend::new(path, (960, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let n = months.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption("Successes per acquisition month", ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(0..n, 0..(top + top / 10 + 1))
        .map_err(|e| anyhow!("{e}"))?;
    let label_every = (n / 12).max(1);
    chart
        .configure_mesh()
        .x_labels(n.min(24))
        .x_label_formatter(&|i| {
            if i % label_every == 0 {
                months.get(*i).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("granules")
        .x_desc("acquisition month")
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    for (k, (platform, counts)) in series.iter().enumerate() {
        let colour = COLOURS[k % COLOURS.len()];
        chart
            .draw_series(LineSeries::new(
                counts.iter().enumerate().map(|(i, c)| (i, *c)),
                colour.stroke_width(2),
            ))
            .map_err(|e| anyhow!("{e}"))?
            .label(*platform)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], colour));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use granary::domain::report::MonthPlatform;

    #[test]
    fn draws_one_line_per_platform_as_svg() {
        let mut r = Reports::default();
        for (m, p, n) in [
            ("2022-01", "L30", 5),
            ("2022-02", "L30", 7),
            ("2022-02", "S30", 3),
        ] {
            r.successes_per_acquisition_month.push(MonthPlatform {
                acquisition_month: m.into(),
                platform: p.into(),
                granules: n,
            });
        }
        let path = std::env::temp_dir().join(format!("granary-chart-{}.svg", std::process::id()));
        successes_per_month(&r, &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).ok();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80.min(svg.len())]);
        assert!(svg.contains("L30") && svg.contains("S30") && svg.contains("2022-02"));
        // one colour per platform: the first two of the palette, each on a line and its legend
        assert!(svg.contains("#1F77B4") && svg.contains("#FF7F0E"), "{svg}");
        assert!(!svg.contains("#2CA02C"), "only two series");
    }
}
