//! `granary report --scan --cost` and `--html` as an operator runs them after a campaign on the
//! emulator (#32 items 2 and 6): the cost agrees with the campaign's own accounting, and the page
//! is looked at in a real browser (Debian's chromium, headless; `scripts/browser.sh install`,
//! which `make test` runs): its screenshot must show every chart with data drawn in it — and a
//! page drawn from no logs must not, so the look can fail.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

mod common;
// `granary audit` on a campaign with planted gaps.
#[path = "report_html/audit.rs"]
mod audit;

use common::{granary, json};
use granary_cli::ops::html::{ChartBox, CHART_BOXES, PAGE};
use granary_local::campaign::{Campaign, CampaignSpec};
use granary_local::fault_plan::FaultPlan;
use granary_tests::{clients, unique_name};
use std::path::{Path, PathBuf};
use std::process::Command;

fn browser() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/browser.sh");
    let out = Command::new(&script)
        .arg("path")
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "no headless browser: run `scripts/browser.sh install` (make test does): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The page as chromium draws it, `PAGE` wide and high, one CSS pixel a pixel.
fn screenshot(page: &Path) -> png::Reader<std::fs::File> {
    let shot = page.with_extension("png");
    let out = Command::new(browser())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
        ])
        .arg(format!("--window-size={},{}", PAGE.0, PAGE.1))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap_or_else(|e| panic!("running chromium: {e}"));
    assert!(
        shot.exists(),
        "chromium wrote no screenshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    png::Decoder::new(std::fs::File::open(&shot).unwrap())
        .read_info()
        .unwrap()
}

/// In each chart's box, the pixels of a drawn series: saturated colour, which axes, grid lines
/// and text (black and greys) never are.
fn series_pixels(page: &Path) -> Vec<(&'static str, u64)> {
    let mut reader = screenshot(page);
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(
        (info.width, info.height),
        PAGE,
        "the screenshot is the page's size"
    );
    let channels = info.color_type.samples();
    assert!(channels >= 3, "{:?}", info.color_type);
    let pixel = |x: u32, y: u32| {
        let i = (y as usize * info.width as usize + x as usize) * channels;
        (buf[i], buf[i + 1], buf[i + 2])
    };
    CHART_BOXES
        .iter()
        .map(|b: &ChartBox| {
            let mut coloured = 0;
            for y in b.y..(b.y + b.height).min(info.height) {
                for x in b.x..(b.x + b.width).min(info.width) {
                    let (r, g, bl) = pixel(x, y);
                    let (hi, lo) = (r.max(g).max(bl), r.min(g).min(bl));
                    if hi - lo > 80 {
                        coloured += 1;
                    }
                }
            }
            (b.id, coloured)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cost_and_the_html_report_of_a_campaign_on_the_emulator() {
    let (clients, iam) = clients().await;
    let spec = CampaignSpec {
        granules: 100,
        plan: FaultPlan {
            seed: 32,
            spot_rate: 0.15,
            app_failure_rate: 0.06,
            ..FaultPlan::default()
        },
        ..CampaignSpec::default()
    };
    let mut c = Campaign::setup(&clients, &iam, &unique_name("html"), &spec)
        .await
        .unwrap();
    c.runtime.run_to_quiescence(|_| {}).await.unwrap();
    let started = std::time::Instant::now();
    let summary = c.summarize(started.elapsed()).await.unwrap();
    assert_eq!(summary.unaccounted, 0);
    assert!(
        summary.dead_lettered > 0,
        "the plan fails some: {summary:?}"
    );
    let bucket = c.runtime.ctx.config.layout.bucket.clone();
    let vars = [("GRANARY_BUCKET", bucket.as_str())];

    // The cost: every log's job priced (the simulator's details carry their resources), the
    // granules those the campaign ended, retried attempts priced apart.
    let spot = json(&vars, &["report", "--scan", "--cost", "--capacity", "spot"]);
    let cost = &spot["cost"];
    assert_eq!(
        cost["granules"],
        summary.succeeded + summary.dead_lettered,
        "{cost}"
    );
    assert_eq!(cost["jobs"], summary.log_objects, "{cost}");
    assert_eq!(cost["jobs_without_usage"], 0, "{cost}");
    let compute = cost["compute_dollars"].as_f64().unwrap();
    let retried = cost["retried_compute_dollars"].as_f64().unwrap();
    assert!(
        compute > 0.0 && retried > 0.0 && retried < compute,
        "{cost}"
    );
    let total = cost["total_dollars"].as_f64().unwrap();
    let per = cost["dollars_per_granule"].as_f64().unwrap();
    let granules = cost["granules"].as_f64().unwrap();
    assert!((per * granules - total).abs() < 1e-9, "{cost}");
    // On demand costs what Spot costs before its discount.
    let on_demand = json(&vars, &["report", "--scan", "--cost"]);
    let od = on_demand["cost"]["compute_dollars"].as_f64().unwrap();
    assert!(
        (od * (1.0 - 0.70) - compute).abs() < 1e-9,
        "{od} vs {compute}"
    );
    let (code, out, err) = granary(&vars, &["report", "--scan", "--cost"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("compute $") && out.contains("a million"),
        "{out}"
    );

    // `status --watch`: redrawn in place, with the reasons of the granules failing now.
    let owned = common::stack_vars(&c);
    let watch_vars = common::vars(&owned);
    let (code, out, err) = granary(
        &watch_vars,
        &["status", "--watch", "--interval", "1", "--count", "2"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.matches("\x1b[2J\x1b[H").count(),
        2,
        "two redraws: {out}"
    );
    assert!(out.contains("failing now"), "{out}");
    for reason in summary.dlq_by_reason.keys() {
        let masked = granary::domain::report::mask_instance(reason);
        assert!(
            out.contains(&masked),
            "{masked} not among the reasons: {out}"
        );
    }

    // `status` as the operator runs it says when the feeder waits on its downstream queue.
    let downstream = clients
        .sqs
        .create_queue()
        .queue_name(unique_name("intake"))
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    for i in 0..3 {
        clients
            .sqs
            .send_message()
            .queue_url(&downstream)
            .message_body(format!("product {i}"))
            .send()
            .await
            .unwrap();
    }
    let mut paced = watch_vars.to_vec();
    paced.push(("GRANARY_DOWNSTREAM_QUEUE_URL", downstream.as_str()));
    paced.push(("GRANARY_DOWNSTREAM_MAX_MESSAGES", "2"));
    let (code, out, err) = granary(&paced, &["status"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("feeder: WAITS — downstream queue"), "{out}");
    assert!(out.contains("downstream queue: 3 waiting"), "{out}");

    // The page, in a real browser: every chart has a drawn series.
    let dir = std::env::temp_dir().join(unique_name("html"));
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("report.html");
    let (code, _, err) = granary(
        &vars,
        &[
            "report",
            "--scan",
            "--cost",
            "--html",
            page.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let html = std::fs::read_to_string(&page).unwrap();
    // The numbers first, the campaign's own.
    for (id, n) in [
        ("succeeded", summary.succeeded),
        ("failed", summary.dead_lettered),
    ] {
        assert!(
            html.contains(&format!("id=\"n-{id}\">{n}<")),
            "the page's {id} is not the campaign's {n}"
        );
    }
    assert!(
        html.contains("id=\"n-cost\">$"),
        "the cost is among the numbers"
    );
    // Each failure reason in full (masked as the report masks it), never cut short.
    for reason in summary.dlq_by_reason.keys() {
        let masked = granary::domain::report::mask_instance(reason);
        let shown = masked
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;");
        assert!(
            html.contains(&format!(": {shown}</li>")),
            "{masked} is not listed in full"
        );
    }
    assert!(!html.contains('…'), "nothing on the page is cut short");
    assert!(html.contains("<aside id=\"cost-table\""), "the cost table");
    for (chart, coloured) in series_pixels(&page) {
        // More than legend swatches alone (at most two of 12 x 10 pixels): a drawn series.
        assert!(
            coloured > 600,
            "chart {chart} shows no data in the browser ({coloured} coloured pixels; screenshot {})",
            page.with_extension("png").display()
        );
    }

    // A page drawn from no logs has axes and titles only: the look above can fail.
    let empty = granary::domain::report::compute(&[]);
    let blank = granary_cli::ops::html::page(&granary_cli::ops::html::PageInput {
        title: "no logs".into(),
        generated_at: chrono::Utc::now(),
        facts: &[],
        reports: &empty,
        cost: None,
    })
    .unwrap();
    let blank_page = dir.join("blank.html");
    std::fs::write(&blank_page, blank).unwrap();
    for (chart, coloured) in series_pixels(&blank_page) {
        assert!(
            coloured < 50,
            "chart {chart} of a page without logs shows {coloured} coloured pixels"
        );
    }
}
