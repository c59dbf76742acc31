//! The page's own rules: self-contained, escaped, the numbers first, reasons in full, integer
//! count axes.

use super::*;
use granary::domain::report::LogFact;

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
        out_of_memory: false,
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
    for (id, n) in [
        ("granules", 2),
        ("succeeded", 1),
        ("failed", 1),
        ("retried", 0),
    ] {
        assert!(html.contains(&format!("id=\"n-{id}\">{n}<")), "{id}");
    }
    // The reason in full, escaped, in the list beside the chart.
    assert!(html.contains("<li><b>1</b>: exit &lt;3&gt; &amp; more</li>"));
}

#[test]
fn count_axes_label_whole_granules_and_dollars_keep_their_cents() {
    let facts: Vec<LogFact> = (0..300)
        .map(|i| fact(&format!("g{i}"), 1, "success", "ok", "2026-11-27T01:00:00Z"))
        .collect();
    let reports = granary::domain::report::compute(&facts);
    let html = page(&PageInput {
        title: "t".into(),
        generated_at: Utc::now(),
        facts: &facts,
        reports: &reports,
        cost: None,
    })
    .unwrap();
    // plotters writes each tick label as an SVG text: none of a count axis has a fraction.
    assert!(
        !html.contains(">300.0<") && !html.contains(">0.5<"),
        "a float on a count axis"
    );
    assert!(
        html.contains(">300<") || html.contains(">250<"),
        "integer ticks"
    );
    assert_eq!(dollars(0.0123), "$0.012");
    assert_eq!(dollars(0.000_012_3), "$0.000012");
    assert_eq!(dollars(0.5), "$0.50");
    assert_eq!(dollars(1234.567), "$1234.57");
}
