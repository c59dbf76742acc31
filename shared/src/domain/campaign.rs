//! Campaigns: a run over the inventories under a name (`GRANARY_CAMPAIGN`), so that a second run
//! over granules that already succeeded once (the next algorithm version, a fixed container) is
//! its own campaign rather than a collision with the first.
//!
//! A named campaign keeps every piece of its state under `campaigns/<name>/` (tracker, claims,
//! open claims, item records, history, logs, rejects) and puts its name into every Batch
//! job it submits (the job name, a `campaign` parameter and `GRANARY_CAMPAIGN` in the
//! container's environment) and into every message about its work. The inventories are shared:
//! they say what exists, not what a campaign did with it; the feeder's hold is the stack's. The
//! unnamed campaign keeps granary's original layout at the bucket's root, so a stack that never
//! names one sees nothing change.
//!
//! Why the job name must carry the campaign: a takeover finds a half-finished submission by its
//! job name (ListJobs, `domain::job_name`); if two campaigns named granule G's first attempt
//! alike, the second campaign's takeover would adopt the first campaign's job as its own and
//! never run G.

use serde::{Deserialize, Serialize};

/// The most characters a campaign name has: it goes into every job name (128 characters in all,
/// of which the granule id needs most).
pub const MAX_CAMPAIGN_NAME: usize = 32;

/// Where the state of every named campaign lives.
pub const CAMPAIGNS_FOLDER: &str = "campaigns/";

/// A campaign's name: 1 to 32 lowercase letters, digits and hyphens, starting with a letter or
/// digit (a valid S3 key segment, Athena table suffix and Batch job-name part alike).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Campaign(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a campaign name: use 1 to {MAX_CAMPAIGN_NAME} lowercase letters, digits and \
     hyphens, starting with a letter or digit"
)]
pub struct CampaignNameError(pub String);

impl Campaign {
    pub fn parse(name: &str) -> Result<Self, CampaignNameError> {
        let valid = !name.is_empty()
            && name.len() <= MAX_CAMPAIGN_NAME
            && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if valid {
            Ok(Self(name.to_owned()))
        } else {
            Err(CampaignNameError(name.to_owned()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Campaign {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for Campaign {
    type Error = CampaignNameError;
    fn try_from(name: String) -> Result<Self, Self::Error> {
        Campaign::parse(&name)
    }
}

impl From<Campaign> for String {
    fn from(c: Campaign) -> String {
        c.0
    }
}

/// The key prefix a campaign's state lives under: `campaigns/<name>/`, or nothing for the
/// unnamed campaign.
pub fn root(campaign: Option<&Campaign>) -> String {
    match campaign {
        Some(c) => format!("{CAMPAIGNS_FOLDER}{c}/"),
        None => String::new(),
    }
}

/// `key` (under `from`'s root) moved under `to`'s root. A key that is not under `from`'s root is
/// not a campaign's state (it came from somewhere else) and is only given `to`'s root.
pub fn rerooted(key: &str, from: Option<&Campaign>, to: Option<&Campaign>) -> String {
    let from_root = root(from);
    let bare = key.strip_prefix(from_root.as_str()).unwrap_or(key);
    format!("{}{bare}", root(to))
}

/// The campaign a folder name returned by a listing of [`CAMPAIGNS_FOLDER`] names
/// (`campaigns/v2/`), if it is one.
pub fn of_folder(folder: &str) -> Option<Campaign> {
    let name = folder.strip_prefix(CAMPAIGNS_FOLDER)?.trim_end_matches('/');
    Campaign::parse(name).ok()
}

/// The campaign whose state `key` is (`campaigns/<name>/…`), if it is a named one's.
pub fn of_key(key: &str) -> Option<Campaign> {
    let (name, _) = key.strip_prefix(CAMPAIGNS_FOLDER)?.split_once('/')?;
    Campaign::parse(name).ok()
}

/// Every campaign whose state a scheduled pass (the reconciler, the sweeper) must look at: the
/// unnamed one, every named one found under [`CAMPAIGNS_FOLDER`], and its own, each once, its own
/// first. A campaign that was switched away from while its jobs ran is still finished this way:
/// nothing it left open waits for a pass that never looks.
pub fn to_visit(own: Option<&Campaign>, found: &[Campaign]) -> Vec<Option<Campaign>> {
    let mut all: Vec<Option<Campaign>> = vec![own.cloned()];
    for c in std::iter::once(None).chain(found.iter().cloned().map(Some)) {
        if !all.contains(&c) {
            all.push(c);
        }
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn c(name: &str) -> Campaign {
        Campaign::parse(name).unwrap()
    }

    #[test]
    fn names_are_short_lowercase_key_segments() {
        assert!(Campaign::parse("v2").is_ok());
        assert!(Campaign::parse("2026-reprocess").is_ok());
        for bad in ["", "-v2", "V2", "v 2", "v/2", "v_2", "v.2", &"x".repeat(33)] {
            assert!(Campaign::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert!(Campaign::parse(&"x".repeat(32)).is_ok());
        let e = Campaign::parse("V2").unwrap_err().to_string();
        assert!(e.contains("\"V2\"") && e.contains("lowercase"), "{e}");
    }

    #[test]
    fn a_campaign_reads_and_writes_as_its_name_and_refuses_a_bad_one() {
        assert_eq!(serde_json::to_string(&c("v2")).unwrap(), "\"v2\"");
        assert_eq!(serde_json::from_str::<Campaign>("\"v2\"").unwrap(), c("v2"));
        assert!(serde_json::from_str::<Campaign>("\"../v2\"").is_err());
    }

    #[test]
    fn the_unnamed_campaign_lives_at_the_root_and_a_named_one_in_its_folder() {
        assert_eq!(root(None), "");
        assert_eq!(root(Some(&c("v2"))), "campaigns/v2/");
    }

    #[test]
    fn keys_move_between_campaigns_and_back() {
        let v2 = c("v2");
        let v3 = c("v3");
        assert_eq!(rerooted("claims/", None, Some(&v2)), "campaigns/v2/claims/");
        assert_eq!(
            rerooted("campaigns/v2/claims/", Some(&v2), Some(&v3)),
            "campaigns/v3/claims/"
        );
        assert_eq!(rerooted("campaigns/v2/claims/", Some(&v2), None), "claims/");
        assert_eq!(rerooted("claims/", None, None), "claims/");
    }

    #[test]
    fn folders_of_a_listing_name_their_campaigns() {
        assert_eq!(of_folder("campaigns/v2/"), Some(c("v2")));
        assert_eq!(of_folder("campaigns/Not-One/"), None);
        assert_eq!(of_folder("claims/"), None);
        assert_eq!(of_key("campaigns/v2/claims/windows/a.json"), Some(c("v2")));
        assert_eq!(of_key("claims/windows/a.json"), None);
        assert_eq!(of_key("campaigns/v2"), None);
    }

    #[test]
    fn a_pass_visits_its_own_campaign_first_then_every_other_once() {
        let v1 = c("v1");
        let v2 = c("v2");
        assert_eq!(
            to_visit(Some(&v2), &[v1.clone(), v2.clone()]),
            vec![Some(v2.clone()), None, Some(v1.clone())]
        );
        assert_eq!(to_visit(None, &[]), vec![None]);
        assert_eq!(
            to_visit(None, std::slice::from_ref(&v1)),
            vec![None, Some(v1)]
        );
    }

    proptest! {
        #[test]
        fn rerooting_there_and_back_is_the_identity(
            a in proptest::option::of("[a-z0-9][a-z0-9-]{0,8}"),
            b in proptest::option::of("[a-z0-9][a-z0-9-]{0,8}"),
            key in "[a-z]{1,8}/[a-z=/]{0,12}",
        ) {
            let a = a.map(|n| c(&n));
            let b = b.map(|n| c(&n));
            let at_a = rerooted(&key, None, a.as_ref());
            let at_b = rerooted(&at_a, a.as_ref(), b.as_ref());
            prop_assert_eq!(rerooted(&at_b, b.as_ref(), a.as_ref()), at_a);
        }
    }
}
