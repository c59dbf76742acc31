//! Deterministic AWS Batch job names. The name is how a half-finished submission is found again
//! (ListJobs by name), so the same (granule, attempt) must always give the same name, and two
//! different granules must never share one.
//!
//! Batch allows up to 128 characters from [A-Za-z0-9_-], starting with a letter or digit. Ids are
//! mapped into that alphabet (which can merge distinct ids, e.g. `a.b` and `a_b`), so a short hash
//! of the exact id is always appended.

use super::campaign::Campaign;
use super::granule::GranuleId;
use sha2::{Digest, Sha256};

pub const MAX_JOB_NAME: usize = 128;
const HASH_CHARS: usize = 10;

/// An ingest job's processing job: the name carries the retry count and the attempt, so a
/// resumed or retried job is a new Batch job, a lost SubmitJob answer is found by name rather
/// than submitted twice, and an end is matched to the attempt its record waits for by name alone.
pub fn processing_job_name(job: &super::ingest::index::JobId, retry: u32, attempt: u32) -> String {
    format!("ingest-{job}-r{retry}-a{attempt}")
}

/// The job of (granule, attempt) in `campaign`: a named campaign's name starts with it and its
/// hash covers it, so two campaigns never share a job name (a takeover finds jobs by name,
/// `domain::campaign`). The unnamed campaign's names are granary's original ones.
pub fn job_name(campaign: Option<&Campaign>, granule_id: &GranuleId, attempt: u32) -> String {
    let (stem, hashed) = in_campaign(campaign, granule_id.as_str());
    let suffix = format!("-a{attempt}-{}", short_hash(&hashed));
    named(&stem, &suffix)
}

/// The array job of the feeder's window starting at row `start` of `inventory` in `campaign`:
/// one name per window, so a takeover finds the array a run died submitting. The inventory's
/// file name is kept readable; the hash of the whole key and the row tell windows apart.
pub fn window_job_name(campaign: Option<&Campaign>, inventory: &str, start: u64) -> String {
    let file = inventory.rsplit('/').next().unwrap_or(inventory);
    let file = file.strip_suffix(".parquet").unwrap_or(file);
    let (readable, _) = in_campaign(campaign, &format!("w-{file}"));
    let (_, hashed) = in_campaign(campaign, &format!("{inventory}\n{start}"));
    let suffix = format!("-w{start}-{}", short_hash(&hashed));
    named(&readable, &suffix)
}

/// The readable stem and the hashed text of `text` in `campaign`.
fn in_campaign(campaign: Option<&Campaign>, text: &str) -> (String, String) {
    match campaign {
        Some(c) => (format!("{c}_{text}"), format!("{c}\n{text}")),
        None => (text.to_owned(), text.to_owned()),
    }
}

fn short_hash(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    digest
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()[..HASH_CHARS]
        .to_owned()
}

/// `stem` mapped into Batch's alphabet and cut so that `stem + suffix` fits in 128 characters.
fn named(stem: &str, suffix: &str) -> String {
    let mut stem: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if !stem.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        stem.insert(0, 'g');
    }
    stem.truncate(MAX_JOB_NAME - suffix.len());
    stem + suffix
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// True when a job name is one AWS Batch accepts (SubmitJob's jobName: up to 128 letters,
    /// numbers, hyphens and underscores, starting with a letter or number).
    fn is_valid_batch_job_name(name: &str) -> bool {
        !name.is_empty()
            && name.len() <= MAX_JOB_NAME
            && name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }

    fn id(s: &str) -> GranuleId {
        GranuleId::parse(s).unwrap()
    }

    #[test]
    fn window_names_are_valid_distinct_and_stable() {
        let a = window_job_name(None, "inventories/2024/a.parquet", 0);
        assert!(a.starts_with("w-a-w0-"), "{a}");
        assert!(is_valid_batch_job_name(&a));
        assert_eq!(a, window_job_name(None, "inventories/2024/a.parquet", 0));
        assert_ne!(
            a,
            window_job_name(None, "inventories/2024/a.parquet", 10_000)
        );
        assert_ne!(a, window_job_name(None, "inventories/2025/a.parquet", 0));
        let long = format!("inv/{}.parquet", "é.x".repeat(100));
        assert!(is_valid_batch_job_name(&window_job_name(
            None,
            &long,
            u64::MAX
        )));
    }

    #[test]
    fn hls_name() {
        let n = job_name(None, &id("HLS.S30.T01GBH.2022226T214921.v2.0"), 1);
        assert!(
            n.starts_with("HLS_S30_T01GBH_2022226T214921_v2_0-a1-"),
            "{n}"
        );
        assert!(is_valid_batch_job_name(&n));
        assert_eq!(
            n,
            job_name(None, &id("HLS.S30.T01GBH.2022226T214921.v2.0"), 1)
        );
        assert_ne!(
            n,
            job_name(None, &id("HLS.S30.T01GBH.2022226T214921.v2.0"), 2)
        );
    }

    #[test]
    fn merged_stems_still_differ() {
        assert_ne!(job_name(None, &id("a.b"), 1), job_name(None, &id("a_b"), 1));
    }

    #[test]
    fn odd_starts_and_long_ids() {
        assert!(is_valid_batch_job_name(&job_name(None, &id(".hidden"), 1)));
        assert!(is_valid_batch_job_name(&job_name(None, &id("-x"), 1)));
        let long = job_name(None, &id(&"y".repeat(200)), 4_000_000_000);
        assert!(is_valid_batch_job_name(&long));
        assert_eq!(long.len(), MAX_JOB_NAME);
    }

    #[test]
    fn campaigns_never_share_a_job_name_and_say_whose_it_is() {
        let g = id("HLS.S30.T01GBH.2022226T214921.v2.0");
        let v2 = Campaign::parse("v2").unwrap();
        let v3 = Campaign::parse("v3").unwrap();
        let named = job_name(Some(&v2), &g, 1);
        assert!(named.starts_with("v2_HLS_S30_T01GBH"), "{named}");
        assert!(is_valid_batch_job_name(&named));
        assert_ne!(named, job_name(None, &g, 1));
        assert_ne!(named, job_name(Some(&v3), &g, 1));
        // A granule whose id starts like the campaign's stem still gets a name of its own.
        assert_ne!(
            named,
            job_name(None, &id("v2.HLS.S30.T01GBH.2022226T214921.v2.0"), 1)
        );
        let window = window_job_name(Some(&v2), "inventories/a.parquet", 0);
        assert!(window.starts_with("v2_w-a-w0-"), "{window}");
        assert_ne!(window, window_job_name(None, "inventories/a.parquet", 0));
        let longest = Campaign::parse(&"c".repeat(32)).unwrap();
        let long = job_name(Some(&longest), &id(&"y".repeat(200)), 4_000_000_000);
        assert!(is_valid_batch_job_name(&long) && long.starts_with(&"c".repeat(32)));
    }

    proptest! {
        #[test]
        fn every_valid_id_gives_a_valid_deterministic_name(raw in "[!-~]{1,200}", attempt in 1u32..1000) {
            if let Ok(g) = GranuleId::parse(&raw) {
                let n = job_name(None, &g, attempt);
                prop_assert!(is_valid_batch_job_name(&n), "{}", n);
                prop_assert_eq!(n, job_name(None, &g, attempt));
            }
        }
    }
}
