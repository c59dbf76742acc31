//! Docs that cannot drift: README.md, BENCHMARKS.md and docs/*.md name paths, settings,
//! template parameters, commands, tests and mutants, and each must exist.
//!
//! What counts as a name, in a code span (or a line of a fenced block) or a link:
//! - a path from the repository root (`shared/src/...`, `docs/x.md`, `Makefile`): it exists;
//! - `GRANARY_*` anywhere: a catalogued variable (`config::catalogue`) or one the scripts set;
//! - `make X`: a Makefile target; `granary X`, `granary-local X`, `granary-bench X`: a
//!   subcommand of that binary;
//! - a CamelCase word: a template parameter, resource, condition or output, or a word of the
//!   code (outside comments), the scripts or the template: a type, a metric, an API;
//! - a snake_case word of three parts or more (a test's name, a function's): a word of the
//!   code outside comments, or of the scripts and Athena queries (a table);
//! - a kebab-case word of three parts or more: a mutant, or a word of the code or scripts.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use granary::config::catalogue::{SETTINGS, TEST_SWITCHES};
use granary_template::Template;
use regex::Regex;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn files_under(dir: &Path, ext: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        if path.is_dir() {
            if !name.starts_with('.') && name != "target" && name != "node_modules" {
                files_under(&path, ext, out);
            }
        } else if ext.iter().any(|e| name.ends_with(e)) {
            out.push(path);
        }
    }
}

/// Every word of the code, comments left out (a name only a comment still says is gone), and
/// every word of the scripts, the Makefile and the template.
struct Words {
    code: BTreeSet<String>,
    scripts: BTreeSet<String>,
}

fn words() -> Words {
    let word = Regex::new(r"[A-Za-z_][A-Za-z0-9_\-]*").unwrap();
    let mut rs = Vec::new();
    files_under(&root(), &[".rs"], &mut rs);
    let mut code = BTreeSet::new();
    // This file names what does not exist, to show the checker refuses it.
    rs.retain(|p| !p.ends_with("shared/tests/docs_drift.rs"));
    for path in rs {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for line in text.lines() {
            let line = line.trim_start();
            if line.starts_with("//") {
                continue;
            }
            for w in word.find_iter(line) {
                for part in w.as_str().split('-') {
                    code.insert(part.to_owned());
                }
                code.insert(w.as_str().to_owned());
            }
        }
    }
    let mut other = Vec::new();
    files_under(&root().join("scripts"), &[".sh", ".py"], &mut other);
    files_under(
        &root().join("infra"),
        &[".yaml", ".py", ".toml"],
        &mut other,
    );
    files_under(
        &root().join("container"),
        &[".sh", ".py", "Dockerfile"],
        &mut other,
    );
    files_under(&root().join("athena"), &[".sql"], &mut other);
    other.push(root().join("Makefile"));
    other.push(root().join("Cargo.toml"));
    other.push(root().join("Cargo.lock"));
    let mut scripts = BTreeSet::new();
    for path in other {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        scripts.extend(word.find_iter(&text).map(|w| w.as_str().to_owned()));
    }
    Words { code, scripts }
}

fn docs() -> Vec<PathBuf> {
    let mut out = vec![root().join("README.md"), root().join("BENCHMARKS.md")];
    let mut docs = Vec::new();
    files_under(&root().join("docs"), &[".md"], &mut docs);
    docs.sort();
    out.extend(docs);
    out
}

/// The code spans of a page, each line of a fenced block as one, and link targets (made
/// relative to the repository's root: `page` is where the page lives).
fn names_in(text: &str, page: &str) -> Vec<String> {
    let dir = page.rsplit_once('/').map_or("", |(d, _)| d);
    let span = Regex::new(r"`([^`\n]+)`").unwrap();
    let link = Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            out.push(line.trim().to_owned());
            continue;
        }
        out.extend(span.captures_iter(line).map(|c| c[1].to_owned()));
        for c in link.captures_iter(line) {
            let target = &c[1];
            if target.starts_with("http")
                || target.starts_with('#')
                || target.starts_with("mailto:")
            {
                continue;
            }
            let mut path = if dir.is_empty() {
                target.to_owned()
            } else {
                format!("{dir}/{target}")
            };
            while let Some(i) = path.find("/../") {
                let start = path[..i].rfind('/').map_or(0, |j| j + 1);
                path.replace_range(start..i + 4, "");
            }
            out.push(path);
        }
    }
    out
}

fn subcommands(file: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join(file)).unwrap();
    let start = text
        .find("enum Command {")
        .unwrap_or_else(|| panic!("{file}: enum Command"));
    let end = start + text[start..].find("\n}").unwrap_or(text.len() - start);
    let variant = Regex::new(r"(?m)^    ([A-Z][A-Za-z]+)\b").unwrap();
    variant
        .captures_iter(&text[start..end])
        .map(|c| kebab(&c[1]))
        .collect()
}

fn kebab(camel: &str) -> String {
    let mut out = String::new();
    for (i, ch) in camel.chars().enumerate() {
        if ch.is_uppercase() && i > 0 {
            out.push('-');
        }
        out.push(ch.to_ascii_lowercase());
    }
    out
}

const ROOTS: [&str; 12] = [
    "shared/",
    "cli/",
    "local/",
    "functions/",
    "infra/",
    "scripts/",
    "docs/",
    "tests/",
    "bench/",
    "athena/",
    "container/",
    ".ci/",
];
const ROOT_FILES: [&str; 5] = [
    "Makefile",
    "README.md",
    "BENCHMARKS.md",
    "Cargo.toml",
    "Cargo.lock",
];

struct Checker {
    words: Words,
    template_names: BTreeSet<String>,
    variables: BTreeSet<String>,
    targets: BTreeSet<String>,
    commands: Vec<(&'static str, BTreeSet<String>)>,
    mutants: BTreeSet<String>,
}

impl Checker {
    fn new() -> Self {
        let template = Template::granary().expect("infra/template.yaml reads");
        let mut template_names = BTreeSet::new();
        for section in ["Parameters", "Resources", "Conditions", "Outputs"] {
            if let Some(o) = template.doc[section].as_object() {
                template_names.extend(o.keys().cloned());
            }
        }
        let words = words();
        let variables = SETTINGS
            .iter()
            .map(|s| s.var.to_owned())
            .chain(TEST_SWITCHES.iter().map(|t| t.var.to_owned()))
            .chain(
                words
                    .scripts
                    .iter()
                    .filter(|w| w.starts_with("GRANARY_"))
                    .cloned(),
            )
            .collect();
        let makefile = std::fs::read_to_string(root().join("Makefile")).unwrap();
        let target = Regex::new(r"(?m)^([a-z][a-z0-9\-]*):").unwrap();
        let targets = target
            .captures_iter(&makefile)
            .map(|c| c[1].to_owned())
            .collect();
        Self {
            words,
            template_names,
            variables,
            targets,
            commands: vec![
                ("granary", subcommands("cli/src/main.rs")),
                (
                    "granary-local",
                    subcommands("local/src/bin/granary-local/main.rs"),
                ),
                ("granary-bench", subcommands("bench/src/main.rs")),
            ],
            mutants: granary::mutants::ALL
                .iter()
                .map(|m| m.name.to_owned())
                .collect(),
        }
    }

    fn check(&self, name: &str) -> Option<String> {
        let name = name.trim().trim_start_matches("./");
        if let Some(rest) = name.strip_prefix("make ") {
            let target = rest.split_whitespace().next().unwrap_or_default();
            return (!self.targets.contains(target))
                .then(|| format!("no Makefile target {target:?}"));
        }
        for (binary, subs) in &self.commands {
            let bin = name
                .strip_prefix("target/debug/")
                .or_else(|| name.strip_prefix("target/release/"))
                .unwrap_or(name);
            if let Some(rest) = bin.strip_prefix(&format!("{binary} ")) {
                let sub = rest.split_whitespace().next().unwrap_or_default();
                if sub.starts_with('-') || sub.is_empty() || sub.contains('<') || sub.contains('.')
                {
                    return None;
                }
                return (!subs.contains(sub))
                    .then(|| format!("{binary} has no subcommand {sub:?}"));
            }
        }
        if ROOTS.iter().any(|r| name.starts_with(r)) || ROOT_FILES.contains(&name) {
            return self.check_path(name);
        }
        let camel = Regex::new(r"^[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+$").unwrap();
        let snake = Regex::new(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+){2,}$").unwrap();
        let kebab = Regex::new(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+){2,}$").unwrap();
        let last = name
            .rsplit("::")
            .next()
            .unwrap_or(name)
            .trim_end_matches("()");
        if camel.is_match(last) {
            let known = self.template_names.contains(last)
                || self.words.code.contains(last)
                || self.words.scripts.contains(last);
            return (!known)
                .then(|| format!("{last:?} is no template name nor a word of the code"));
        }
        if snake.is_match(last) {
            let known = self.words.code.contains(last) || self.words.scripts.contains(last);
            return (!known).then(|| format!("{last:?} is no test, function, field or table"));
        }
        if kebab.is_match(name) {
            let known = self.mutants.contains(name)
                || self.words.code.contains(name)
                || self.words.scripts.contains(name)
                || self.targets.contains(name);
            return (!known).then(|| format!("{name:?} is no mutant, binary or word of the code"));
        }
        None
    }

    fn check_path(&self, name: &str) -> Option<String> {
        if name.contains(['*', '<', '{', '$', ' ']) || name.starts_with("target/") {
            return None;
        }
        let path = name.split(['#', ':']).next().unwrap_or(name);
        (!root().join(path).exists()).then(|| format!("no such path {path:?}"))
    }
}

#[test]
fn every_name_the_docs_give_exists() {
    let checker = Checker::new();
    let variable = Regex::new(r"GRANARY_[A-Z0-9_]*[A-Z0-9]\b(\*)?").unwrap();
    let mut problems = Vec::new();
    for doc in docs() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let shown = doc
            .strip_prefix(root())
            .unwrap_or(&doc)
            .display()
            .to_string();
        for c in variable.captures_iter(&text) {
            let v = &c[0];
            if c.get(1).is_none() && !checker.variables.contains(v) {
                problems.push(format!("{shown}: {v} is not a setting"));
            }
        }
        for name in names_in(&text, &shown) {
            if let Some(p) = checker.check(&name) {
                problems.push(format!("{shown}: `{name}`: {p}"));
            }
        }
    }
    problems.sort();
    problems.dedup();
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// The checker finds what it is for: a path, a test, a setting, a target, a subcommand, a
/// parameter and a mutant that do not exist.
#[test]
fn the_checker_refuses_names_that_do_not_exist() {
    let checker = Checker::new();
    for missing in [
        "shared/src/no_such_file.rs",
        "entries_a_dead_writer_owed_are_paid_before_the_record_moves_on",
        "make no-such-target",
        "granary no-such-command --json",
        "granary-local no-such-command",
        "ClaimLeaseSeconds",
        "no-such-mutant-here",
    ] {
        assert!(checker.check(missing).is_some(), "{missing} passed");
    }
    for present in [
        "shared/src/config/catalogue.rs",
        "the_catalogued_defaults_are_the_codes",
        "make test",
        "granary status --json",
        "granary-local demo",
        "ArrayWindows",
        "feeder-ignores-open-windows",
    ] {
        assert_eq!(checker.check(present), None, "{present}");
    }
}
