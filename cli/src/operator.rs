//! What every operator command starts from: its context from the environment, and a progress bar.

use anyhow::{Context, Result};
use granary::config::Section;
use granary::handlers::Ctx;
use indicatif::{ProgressBar, ProgressStyle};

/// What the context of a command needs to explain when it cannot be built.
pub(crate) const CONFIG_HINT: &str =
    "granary's configuration (export the GRANARY_* variables of your stack; see docs/configuration.md)";

/// The context a command works in: the bucket's layout plus the `sections` it uses, and nothing
/// else — `report --scan` needs GRANARY_BUCKET alone.
pub(crate) async fn ctx(sections: &[Section]) -> Result<Ctx> {
    Ctx::for_sections_from_env(sections)
        .await
        .context(CONFIG_HINT)
}

/// A bar of `len` steps named `what`.
pub(crate) fn bar(len: u64, what: &str) -> ProgressBar {
    let b = ProgressBar::new(len);
    b.set_style(
        ProgressStyle::with_template(&format!(
            "{{elapsed_precise}} [{{bar:30}}] {{pos}}/{{len}} {what}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    b
}
