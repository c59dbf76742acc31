//! The window claims' granules as the job monitor names an array child's: read once per warm
//! instance, and matched to the child by the array the claim recorded.

use super::super::json::RepositoryError;
use crate::domain::window::{WindowClaim, WindowEntry};
use crate::ports::ObjectStore;

/// The granules of the window claims the job monitor read lately, so the thousands of child
/// events of one array window read its claim once per warm Lambda instead of once each. A
/// claim's granules never change once its array may exist (its look, which may drop some, is
/// written before its SubmitJob: `WindowClaim::screen_pending`); what names the claim a child
/// belongs to
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

/// Whether `child` is of `claim`'s array. The token is made once for each claim (its key and
/// the moment it was made), so a child carrying the claim's own token was submitted for it,
/// whichever of its arrays it is (a takeover past the lease may have submitted a second); one
/// carrying another token is an earlier claim's. A child without a token (its detail carries
/// neither the parameters nor the environment, or an array from before the environment held
/// it) is matched by its id's parent, as AWS documents every child's id ("Array jobs", AWS
/// Batch user guide: the index is appended to the parent's id), against the array the claim
/// recorded; while the claim has recorded none, nothing is guessed. A claim that is not an
/// array has no children: a child naming it is an earlier claim's.
fn child_names(claim: &WindowClaim, child: &ChildOf<'_>) -> ChildNames {
    if !claim.array {
        return ChildNames::AnEarlierClaim;
    }
    match (
        child.token,
        claim.token.as_deref(),
        claim.array_job_id.as_deref(),
    ) {
        (Some(theirs), Some(ours), _) if theirs == ours => ChildNames::TheClaim,
        (Some(_), Some(_), _) => ChildNames::AnEarlierClaim,
        (_, _, Some(array)) if array == child.parent => ChildNames::TheClaim,
        (_, _, Some(_)) => ChildNames::AnEarlierClaim,
        (_, _, None) => ChildNames::NotYetKnown,
    }
}

#[cfg(test)]
mod child_tests {
    use super::*;

    fn claim(token: Option<&str>, array: Option<&str>, is_array: bool) -> WindowClaim {
        let mut c = WindowClaim::new(
            None,
            "inventories/a.parquet",
            0,
            2,
            Vec::new(),
            "queue-feeder",
            chrono::Utc::now(),
        )
        .in_array(false);
        c.array = is_array;
        c.token = token.map(str::to_owned);
        c.array_job_id = array.map(str::to_owned);
        c
    }

    fn child<'a>(parent: &'a str, token: Option<&'a str>) -> ChildOf<'a> {
        ChildOf {
            claim_key: "claims/windows/k.json",
            parent,
            token,
            index: 0,
        }
    }

    #[test]
    fn a_child_is_the_claims_by_its_token_else_by_the_array_the_claim_recorded() {
        use ChildNames::*;
        let cases = [
            // The claim's token: its own, whichever array (a takeover's second one too).
            (
                claim(Some("t"), Some("a1"), true),
                child("a2", Some("t")),
                TheClaim,
            ),
            (
                claim(Some("t"), None, true),
                child("a1", Some("t")),
                TheClaim,
            ),
            // Another token: an earlier claim's, even with the same array id.
            (
                claim(Some("t"), Some("a1"), true),
                child("a1", Some("u")),
                AnEarlierClaim,
            ),
            // No token on the child: the recorded array decides, or nothing is guessed.
            (
                claim(Some("t"), Some("a1"), true),
                child("a1", None),
                TheClaim,
            ),
            (
                claim(Some("t"), Some("a1"), true),
                child("a0", None),
                AnEarlierClaim,
            ),
            (claim(Some("t"), None, true), child("a1", None), NotYetKnown),
            // A claim from before tokens: its recorded array.
            (
                claim(None, Some("a1"), true),
                child("a1", Some("t")),
                TheClaim,
            ),
            (claim(None, None, true), child("a1", Some("t")), NotYetKnown),
            // A claim of single jobs has no children.
            (
                claim(None, None, false),
                child("a1", Some("t")),
                AnEarlierClaim,
            ),
        ];
        for (c, ch, want) in cases {
            assert_eq!(
                child_names(&c, &ch),
                want,
                "{:?} {:?} {}",
                c.token,
                c.array_job_id,
                ch.parent
            );
        }
    }
}
