//! docs/configuration.md, written from the catalogue: `granary settings --markdown`.

use super::{Kind, Setting, PARAMETERS, SETTINGS, TEST_SWITCHES};
use std::fmt::Write;

const HEADER: &str = "# Configuration

Generated from `shared/src/config/catalogue.rs` by `make docs`; do not edit by hand.
`shared/tests/settings_catalogue.rs` fails when this page is stale.

Deployers set the choices through template parameters (`infra/template.yaml`).
The functions read the variables the stack sets. The CLI reads them from your shell.
";

/// A table cell on one line: pipes escaped.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

fn code_or_dash(text: &str) -> String {
    if text.is_empty() {
        "—".to_owned()
    } else {
        format!("`{}`", cell(text))
    }
}

fn readers(s: &Setting) -> String {
    if !s.used_by.is_empty() {
        let mut names: Vec<String> = s.used_by.iter().map(|n| (*n).to_owned()).collect();
        names.extend(s.commands.iter().map(|c| format!("`{c}`")));
        return names.join(", ");
    }
    let mut names: Vec<String> = s.functions().iter().map(|f| f.name().to_owned()).collect();
    if names.len() == super::super::Function::ALL.len() {
        names = vec!["every function".to_owned()];
    }
    names.extend(s.commands.iter().map(|c| format!("`{c}`")));
    if names.is_empty() {
        "—".to_owned()
    } else {
        names.join(", ")
    }
}

fn table(out: &mut String, kind: Kind, with_parameter: bool) {
    let _ = writeln!(
        out,
        "| Variable | Default | {}Read by | Who changes it, and why |",
        if with_parameter { "Parameter | " } else { "" }
    );
    let _ = writeln!(
        out,
        "|---|---|{}---|---|",
        if with_parameter { "---|" } else { "" }
    );
    for s in SETTINGS.iter().filter(|s| s.kind == kind) {
        let parameter = match (with_parameter, s.parameter) {
            (false, _) => String::new(),
            (true, Some(p)) => format!("`{p}` | "),
            (true, None) => "— | ".to_owned(),
        };
        let default = match s.stack {
            Some(v) => format!("{} (stack: `{}`)", code_or_dash(s.default), cell(v)),
            None => code_or_dash(s.default),
        };
        let _ = writeln!(
            out,
            "| `{}` | {default} | {parameter}{} | {} |",
            s.var,
            readers(s),
            cell(s.why)
        );
    }
}

/// The whole page.
pub fn markdown() -> String {
    let mut out = String::from(HEADER);
    let count = |k: Kind| SETTINGS.iter().filter(|s| s.kind == k).count();
    let _ = write!(
        out,
        "\n## Choices ({})\n\nWhat an operator decides. Each is a template parameter.\n\n",
        count(Kind::Choice)
    );
    table(&mut out, Kind::Choice, true);
    let _ = write!(
        out,
        "\n## Wiring ({})\n\nThe stack sets these from its own resources. \
         For the CLI, export them from the stack's outputs.\n\n",
        count(Kind::Wiring)
    );
    table(&mut out, Kind::Wiring, false);
    let _ = write!(
        out,
        "\n## Fixed by the stack ({})\n\nThe template sets a measured or derived value. \
         Tests and local runs change them.\n\n",
        count(Kind::Fixed)
    );
    table(&mut out, Kind::Fixed, false);
    let _ = write!(
        out,
        "\n## Template parameters that set no variable ({})\n\n\
         `sam deploy --guided` asks for those without a default.\n\n\
         | Parameter | Default | Why |\n|---|---|---|\n",
        PARAMETERS.len()
    );
    for p in PARAMETERS {
        let _ = writeln!(
            out,
            "| `{}` | {} | {} |",
            p.name,
            p.default.map_or_else(|| "(asked)".to_owned(), code_or_dash),
            cell(p.why)
        );
    }
    let _ = write!(
        out,
        "\n## Not settings\n\nRead only by tests, the demo and benchmarks, or set on jobs.\n\n\
         | Variable | What it is |\n|---|---|\n"
    );
    for t in TEST_SWITCHES {
        let _ = writeln!(out, "| `{}` | {} |", t.var, cell(t.why));
    }
    out
}
