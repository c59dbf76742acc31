//! `granary-local demo --inventory FILE`: an operator's own inventory through the whole stack,
//! as they run it before launch. Every granule of the file is accounted for, `granary plan`'s
//! forecast counts the same rows, `--granules N` takes the first N, and a file granary cannot
//! read is an error that names the file and the line or column.

use std::path::Path;
use std::process::Command;

fn demo(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_granary-local"))
        .arg("demo")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `n` HLS ids as a CSV with an `id` column, one of them twice and one not an id.
fn inventory(dir: &Path, n: usize) -> std::path::PathBuf {
    let mut text = String::from("id,size\n");
    for i in 0..n {
        text.push_str(&format!(
            "HLS.S30.T{:02}SKA.2024{:03}T101010.v2.0,{i}\n",
            10 + i % 40,
            1 + i % 300
        ));
    }
    text.push_str("HLS.S30.T10SKA.2024001T101010.v2.0,0\n");
    text.push_str("not an id!,0\n");
    let path = dir.join("mine.csv");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn an_operators_inventory_runs_whole_on_the_twins_beside_its_forecast() {
    let dir = tempfile::tempdir().unwrap();
    let file = inventory(dir.path(), 120);
    let f = file.to_str().unwrap();
    let (ok, out, err) = demo(&[
        "--inventory",
        f,
        "--id-column",
        "id",
        "--in-memory",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["read"]["written"], 120, "{v}");
    assert_eq!(v["read"]["duplicates"], 1);
    assert_eq!(v["read"]["invalid"], 1);
    assert!(
        v["read"]["invalid_sample"][0]["at"]
            .as_str()
            .is_some_and(|at| at.ends_with("mine.csv:123")),
        "the invalid id is named by file and line: {v}"
    );
    let s = &v["summary"];
    assert_eq!(s["granules"], 120, "{s}");
    assert_eq!(s["unaccounted"], 0, "{s}");
    assert_eq!(
        s["succeeded"].as_u64().unwrap() + s["dead_lettered"].as_u64().unwrap(),
        120
    );
    assert_eq!(v["forecast"]["left"], 120, "the plan counts the same rows");

    // Its first 50 rows only.
    let (ok, out, err) = demo(&[
        "--inventory",
        f,
        "--id-column",
        "id",
        "--granules",
        "50",
        "--in-memory",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["summary"]["granules"], 50, "{v}");
    assert_eq!(v["forecast"]["left"], 50);
}

#[test]
fn an_inventory_granary_cannot_read_is_named_with_its_column_or_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = inventory(dir.path(), 3);
    let f = file.to_str().unwrap();
    // The default id column is not there: the error names the file and the columns it has.
    let (ok, _, err) = demo(&["--inventory", f, "--in-memory"]);
    assert!(!ok);
    assert!(
        err.contains("mine.csv")
            && err.contains("no column \"granule_id\"")
            && err.contains("id, size"),
        "{err}"
    );
    // Nothing usable: the error names the first bad line.
    let bad = dir.path().join("bad.txt");
    std::fs::write(&bad, "not an id!\n").unwrap();
    let (ok, _, err) = demo(&["--inventory", bad.to_str().unwrap(), "--in-memory"]);
    assert!(!ok);
    assert!(err.contains("bad.txt:1"), "{err}");
    let (ok, _, err) = demo(&["--inventory", "/nonexistent/inventory.csv", "--in-memory"]);
    assert!(
        !ok && err.contains("/nonexistent/inventory.csv: no such file"),
        "{err}"
    );
}

/// On the emulator, as `make demo` runs: the operator's rows, the stack's own forecast.
#[test]
fn an_operators_inventory_runs_on_the_emulator() {
    let dir = tempfile::tempdir().unwrap();
    let file = inventory(dir.path(), 40);
    let (ok, out, err) = demo(&[
        "--inventory",
        file.to_str().unwrap(),
        "--id-column",
        "id",
        "--granules",
        "20",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["granules"], 20, "{v}");
    assert_eq!(v["unaccounted"], 0, "{v}");
    assert_eq!(v["forecast"]["left"], 20, "{v}");
}
