//! Rooms kept to size and shape, so that the code stays small enough to hold:
//! - no source file of the code (tests are in their own files) is over 500 lines;
//! - handlers reach S3 only through repositories: nothing in `shared/src/handlers` outside
//!   `handlers/state.rs` (the context's repositories) touches the store port or the JSON
//!   record protocol itself;
//! - errors are typed: no `Result<_, String>` in the code;
//! - the context is `ctx` (or `<what>_ctx` where two are at hand), never a nickname;
//! - time has one source: granary's code and the local runtime's twins read the time only
//!   through `shared/src/clock.rs` and wait only on tokio's timers, so a simulation's virtual
//!   clock runs all of it.
//!
//! Clippy's `too_many_lines` (clippy.toml, at 80) keeps functions short; this keeps the rest.

use regex::Regex;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        if path.is_dir() {
            if !name.starts_with('.') && name != "target" {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// A file that is test code: `tests.rs`, anything under a `tests/` folder, a benchmark's.
fn is_test_file(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n == "tests.rs")
        || path.components().any(|c| c.as_os_str() == "tests")
}

/// The code files, relative to the repository root, with their text up to an inline test
/// module (`#[cfg(test)]` at the start of a line: what follows is test code).
fn code_files() -> Vec<(String, String)> {
    let mut files = Vec::new();
    rust_files(&root(), &mut files);
    let mut out: Vec<(String, String)> = files
        .into_iter()
        .filter(|p| !is_test_file(p))
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let code = match text.find("\n#[cfg(test)]") {
                Some(i) => text[..i].to_owned(),
                None => text,
            };
            let rel = p
                .strip_prefix(root())
                .unwrap()
                .to_string_lossy()
                .to_string();
            (rel, code)
        })
        .collect();
    out.sort();
    assert!(out.len() > 100, "found only {} code files", out.len());
    out
}

#[test]
fn no_code_file_is_over_500_lines() {
    let mut rs = Vec::new();
    rust_files(&root(), &mut rs);
    let over: Vec<String> = rs
        .iter()
        .filter(|p| !is_test_file(p))
        .filter_map(|p| {
            let lines = std::fs::read_to_string(p).unwrap().lines().count();
            (lines > 500).then(|| format!("{} ({lines} lines)", p.display()))
        })
        .collect();
    assert!(over.is_empty(), "split these rooms: {over:#?}");
}

/// The calls that touch S3's state directly: the store port (`.store`), or the JSON record
/// protocol and the object transfers, which belong in repositories.
fn direct_store_calls(code: &str) -> Vec<String> {
    let direct = Regex::new(
        r"\.store\b|\b(read_json|read_json_retrying|write_json|write_json_retrying|change_record)\b",
    )
    .unwrap();
    code.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .filter(|(_, l)| direct.is_match(l))
        .map(|(i, l)| format!("{}: {}", i + 1, l.trim()))
        .collect()
}

#[test]
fn handlers_reach_s3_only_through_repositories() {
    let found: Vec<String> = code_files()
        .into_iter()
        .filter(|(p, _)| {
            p.starts_with("shared/src/handlers/") && p != "shared/src/handlers/state.rs"
        })
        .flat_map(|(p, code)| {
            direct_store_calls(&code)
                .into_iter()
                .map(move |l| format!("{p}:{l}"))
        })
        .collect();
    assert!(
        found.is_empty(),
        "handlers call the store or the record protocol directly; add a repository method \
         (and a context accessor in handlers/state.rs) instead: {found:#?}"
    );
}

#[test]
fn the_check_for_direct_store_calls_finds_them() {
    let code = "let x = ctx.store.get(k).await?;\n// ctx.store in a comment\nread_json::<Claim>(s, k)\nctx.claims().claim(a)";
    assert_eq!(direct_store_calls(code).len(), 2);
}

/// The error type of each `Result<…>` in `code` that names one (its last generic argument).
fn result_error_types(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("Result<") {
        let after = &rest[i + "Result<".len()..];
        let (mut depth, mut last_comma, mut end) = (1usize, None, None);
        for (j, c) in after.char_indices() {
            match c {
                '<' | '(' | '[' => depth += 1,
                '>' | ')' | ']' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(j);
                        break;
                    }
                }
                ',' if depth == 1 => last_comma = Some(j),
                _ => {}
            }
        }
        if let (Some(comma), Some(end)) = (last_comma, end) {
            out.push(after[comma + 1..end].trim().to_owned());
        }
        rest = after;
    }
    out
}

#[test]
fn errors_are_typed_not_strings() {
    let found: Vec<String> = code_files()
        .into_iter()
        .flat_map(|(p, code)| {
            result_error_types(&code)
                .into_iter()
                .filter(|e| e == "String" || e == "std::string::String")
                .map(move |e| format!("{p}: Result<_, {e}>"))
        })
        .collect();
    assert!(
        found.is_empty(),
        "name these errors (a thiserror type): {found:#?}"
    );
}

#[test]
fn the_check_for_string_errors_finds_nested_ones() {
    let code = "fn a() -> Result<Option<Vec<u8>>, String> {}\nfn b() -> Result<(), E> {}\nF: Fn(&T) -> Result<Option<T>, std::string::String>";
    assert_eq!(
        result_error_types(code),
        ["String", "E", "std::string::String"]
    );
}

#[test]
fn the_context_has_one_name() {
    let nickname = Regex::new(r"\b(ictx|actx|imp)\b").unwrap();
    let mut rs = Vec::new();
    rust_files(&root(), &mut rs);
    rs.retain(|p| !p.ends_with("shared/tests/rooms.rs"));
    let found: Vec<String> = rs
        .iter()
        .flat_map(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            text.lines()
                .enumerate()
                .filter(|(_, l)| nickname.is_match(l))
                .map(|(i, l)| format!("{}:{}: {}", p.display(), i + 1, l.trim()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        found.is_empty(),
        "call it ctx, or <what>_ctx beside another: {found:#?}"
    );
}

/// Readings of the time that a simulation's virtual clock would not see.
fn wall_clock_readings(code: &str) -> Vec<String> {
    let wall =
        Regex::new(r"Utc::now\(\)|SystemTime::now|std::time::Instant|std::thread::sleep").unwrap();
    code.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .filter(|(_, l)| wall.is_match(l))
        .map(|(i, l)| format!("{}: {}", i + 1, l.trim()))
        .collect()
}

#[test]
fn time_has_one_source() {
    // The clock itself; the jitter's seed (a simulation reseeds it: `retry::reseed_jitter`).
    let exempt = ["shared/src/clock.rs", "shared/src/retry.rs"];
    let under = [
        "shared/src/",
        "local/src/runner/",
        "local/src/in_memory/",
        "local/src/simulator/",
        "local/src/events/",
    ];
    let found: Vec<String> = code_files()
        .into_iter()
        .filter(|(p, _)| under.iter().any(|u| p.starts_with(u)) && !exempt.contains(&p.as_str()))
        .flat_map(|(p, code)| {
            wall_clock_readings(&code)
                .into_iter()
                .map(move |l| format!("{p}:{l}"))
        })
        .collect();
    assert!(
        found.is_empty(),
        "read the time with granary::clock::now() and wait with tokio::time: {found:#?}"
    );
    assert_eq!(
        wall_clock_readings(
            "let t = chrono::Utc::now();\nlet s = std::time::Instant::now();\n// Utc::now()"
        )
        .len(),
        2
    );
}
