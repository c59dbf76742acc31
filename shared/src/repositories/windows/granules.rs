//! The window claims' granules as the job monitor names an array child's: read once per warm
//! instance, and matched to the child by the array the claim recorded.

use super::super::json::RepositoryError;
use crate::domain::window::{WindowClaim, WindowEntry};
use crate::ports::ObjectStore;

/// The granules of the window claims the job monitor read lately, so the thousands of child
/// events of one array window read its claim once per warm Lambda instead of once each. A
/// claim's granules never change once it is created; what names the claim a child belongs to
/// is the array id the claim recorded (the token its job carries must agree, and vouches for a
/// child of a claim that has not recorded its array yet), so a child of an earlier claim at the
/// same key (one an operator removed) is never given this claim's granule.
#[derive(Default)]
pub struct WindowGranules {
    recent: std::sync::Mutex<std::collections::VecDeque<ReadClaim>>,
}

/// A window claim read: its key, what names it (its token, else its array's id), its granules.
type ReadClaim = (String, String, std::sync::Arc<[WindowEntry]>);

/// Claims kept: a window's children end spread over hours, a few windows at a time.
const WINDOWS_KEPT: usize = 16;

/// Why a child's granule cannot be named: its event can never be handled.
#[derive(Debug, thiserror::Error)]
pub enum WindowGranuleError {
    #[error(transparent)]
    Read(#[from] RepositoryError),
    #[error("{0}")]
    Unknown(String),
    /// The claim has not recorded its array yet and the child carries no token to vouch for
    /// it: the feeder's run (or the reconciler's takeover) records the array; ask again then.
    #[error("{0}")]
    NotRecordedYet(String),
}

/// Which claim a child belongs to, as its job says.
pub struct ChildOf<'a> {
    pub claim_key: &'a str,
    /// The array's job id (the child's id without `:index`).
    pub parent: &'a str,
    /// The claim's token, when the job carries it.
    pub token: Option<&'a str>,
    pub index: u32,
}

impl WindowGranules {
    /// The entry of `child` in its window claim — its granule, attempt and the Spot ends before
    /// it (the claim must lie under `<claim_prefix>windows/` and be the claim the child's array
    /// was submitted for).
    pub async fn granule(
        &self,
        store: &dyn ObjectStore,
        claim_prefix: &str,
        child: ChildOf<'_>,
    ) -> Result<WindowEntry, WindowGranuleError> {
        let claim_key = child.claim_key;
        let unknown = |why: String| WindowGranuleError::Unknown(why);
        let shown = || crate::domain::poison::RawText::of(claim_key).shown();
        if !claim_key.starts_with(&format!("{claim_prefix}windows/")) {
            return Err(unknown(format!(
                "window claim {} is not under {claim_prefix}windows/",
                shown()
            )));
        }
        let index = child.index;
        let pick = |granules: &[WindowEntry]| {
            granules.get(index as usize).cloned().ok_or_else(|| {
                unknown(format!(
                    "window claim {} has {} granules, none at index {index}",
                    shown(),
                    granules.len()
                ))
            })
        };
        // The cache is kept by the array that the claim recorded (or whose token it holds).
        let named_by = child.parent;
        if let Some(granules) = self.cached(claim_key, named_by) {
            return pick(&granules);
        }
        let claim = super::super::json::read_json_retrying::<WindowClaim>(
            store,
            claim_key,
            "reading a window claim",
        )
        .await
        .map_err(|e| {
            if e.is_transient() {
                WindowGranuleError::Read(e)
            } else {
                unknown(format!("window claim {} is unreadable: {e}", shown()))
            }
        })?
        .ok_or_else(|| unknown(format!("window claim {} does not exist", shown())))?
        .value;
        match child_names(&claim, &child) {
            ChildNames::TheClaim => {}
            ChildNames::AnEarlierClaim => {
                return Err(unknown(format!(
                    "array {} belongs to an earlier claim at {} (the claim now there names {})",
                    child.parent,
                    shown(),
                    claim
                        .array_job_id
                        .as_deref()
                        .or(claim.token.as_deref())
                        .unwrap_or("no array")
                )))
            }
            ChildNames::NotYetKnown => {
                return Err(WindowGranuleError::NotRecordedYet(format!(
                    "window claim {} has not recorded its array yet, and the child of {} carries no token",
                    shown(),
                    child.parent
                )))
            }
        }
        let granules: std::sync::Arc<[WindowEntry]> = claim.entries().collect();
        {
            let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
            recent.retain(|(k, _, _)| k != claim_key);
            if recent.len() >= WINDOWS_KEPT {
                recent.pop_front();
            }
            recent.push_back((claim_key.to_owned(), named_by.to_owned(), granules.clone()));
        }
        pick(&granules)
    }

    fn cached(&self, claim_key: &str, named_by: &str) -> Option<std::sync::Arc<[WindowEntry]>> {
        let recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        recent
            .iter()
            .find(|(k, n, _)| k == claim_key && n == named_by)
            .map(|(_, _, g)| g.clone())
    }
}

/// What a child's job says of the claim at its key.
#[derive(Debug, PartialEq, Eq)]
enum ChildNames {
    TheClaim,
    /// An array submitted for an earlier claim at the same key (removed, then claimed again).
    AnEarlierClaim,
    /// The claim has not recorded its array, and the child has no token to match.
    NotYetKnown,
}

/// Whether `child` is of `claim`'s array. Every child's id names its parent, as AWS documents
/// ("Array jobs", AWS Batch user guide: the index is appended to the parent's id), so the array
/// the claim recorded decides; the token, where both have one, must agree. A claim that has
/// not recorded its array yet is matched by the token alone, and without one nothing is
/// guessed.
fn child_names(claim: &WindowClaim, child: &ChildOf<'_>) -> ChildNames {
    let tokens_differ = matches!(
        (child.token, claim.token.as_deref()),
        (Some(theirs), Some(ours)) if theirs != ours
    );
    match claim.array_job_id.as_deref() {
        _ if tokens_differ => ChildNames::AnEarlierClaim,
        Some(array) if array == child.parent => ChildNames::TheClaim,
        Some(_) => ChildNames::AnEarlierClaim,
        None if child.token.is_some() => ChildNames::TheClaim,
        None => ChildNames::NotYetKnown,
    }
}
