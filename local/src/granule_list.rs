//! The local campaign's granules: the sample inventory rows of one seed ([`SampleGranules`]),
//! and the list of their ids for the accounting at the campaign's end ([`GranuleList`]), which
//! keeps only the seed and the count and makes the ids again when read — ten million ids held
//! as text cost ~400 MB for the whole campaign, though they are read only once it is over.

use granary::adapters::parquet::InventoryRow;
use rand::{Rng, SeedableRng};

/// HLS-like granule ids, newest first, L30 and S30 mixed, reproducible from `seed`.
pub fn sample_granules(n: usize, seed: u64) -> Vec<InventoryRow> {
    SampleGranules::new(seed).take(n).collect()
}

/// [`sample_granules`] one row at a time: a campaign of ten million granules writes its
/// inventories a chunk at a time instead of holding every row (~130 bytes each) at once.
pub struct SampleGranules {
    rng: rand::rngs::StdRng,
    /// The last granule's acquisition time; each next one is earlier (newest first).
    t: chrono::NaiveDateTime,
}

impl SampleGranules {
    pub fn new(seed: u64) -> Self {
        Self {
            rng: rand::rngs::StdRng::seed_from_u64(seed),
            t: chrono::NaiveDate::from_ymd_opt(2025, 2, 8)
                .and_then(|d| d.and_hms_opt(23, 59, 59))
                .unwrap_or_default(),
        }
    }
}

impl Iterator for SampleGranules {
    type Item = InventoryRow;

    fn next(&mut self) -> Option<InventoryRow> {
        let rng = &mut self.rng;
        self.t -= chrono::Duration::seconds(rng.random_range(30..900));
        let t = self.t;
        let platform = if rng.random_bool(0.55) { "S30" } else { "L30" };
        let letters: String = (0..3)
            .map(|_| char::from(b'A' + rng.random_range(0..26u8)))
            .collect();
        let tile = format!("{:02}{letters}", rng.random_range(1..=60));
        Some(InventoryRow {
            granule_id: format!("HLS.{platform}.T{tile}.{}.v2.0", t.format("%Y%jT%H%M%S")),
            start_datetime: t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        })
    }
}

/// The first `len` sample granules of `seed`, in inventory order, then ids kept as they are:
/// an operator's own inventory (`given`), the files an importer found (`with_imported`).
#[derive(Debug, Default, Clone)]
pub struct GranuleList {
    seed: u64,
    len: usize,
    /// Ids kept as they are, after the sample's: an operator's inventory, an importer's files.
    kept: std::sync::Arc<[String]>,
}

impl GranuleList {
    pub fn sample(seed: u64, len: usize) -> Self {
        Self {
            seed,
            len,
            kept: std::sync::Arc::from([]),
        }
    }

    /// Ids given as they are, in their order: an operator's own inventory.
    pub fn given(ids: std::sync::Arc<[String]>) -> Self {
        Self {
            seed: 0,
            len: 0,
            kept: ids,
        }
    }

    /// The list with the ids of the files an importer discovers after the sample's.
    pub fn with_imported(self, ids: Vec<String>) -> Self {
        Self {
            kept: self.kept.iter().cloned().chain(ids).collect(),
            ..self
        }
    }

    pub fn len(&self) -> usize {
        self.len + self.kept.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The ids, made again from the seed, then the kept ones.
    pub fn iter(&self) -> impl Iterator<Item = String> + '_ {
        SampleGranules::new(self.seed)
            .take(self.len)
            .map(|row| row.granule_id)
            .chain(self.kept.iter().cloned())
    }

    /// Each id's place in the list, found by its acquisition time: the sample ids are newest
    /// first, each at least 30 s before the one ahead of it, so the time an id carries names its
    /// place. Kept as 8 bytes a granule while the accounting runs (a time and a 32-bit hash
    /// that tells an id not in the list from one that is), in list order, searched by halving;
    /// the ids' text would be ~40 bytes, and places by a 64-bit hash with their index were 16
    /// (the ten-million campaign's peak RSS is set by this accounting).
    pub fn places(&self) -> anyhow::Result<Places> {
        let mut newest = None;
        let mut by_time: Vec<(u32, u32)> = Vec::with_capacity(self.len);
        for id in self.iter().take(self.len) {
            let t = acquired(&id)
                .ok_or_else(|| anyhow::anyhow!("sample id {id} carries no acquisition time"))?;
            let newest = *newest.get_or_insert(t);
            let step = u32::try_from((newest - t) / SAMPLE_STEP_SECS)
                .map_err(|_| anyhow::anyhow!("sample ids span more than 2^32 steps"))?;
            if by_time.last().is_some_and(|(last, _)| *last >= step) {
                anyhow::bail!("sample id {id} is not older than the one before it");
            }
            by_time.push((step, check_hash(&id)));
        }
        let kept = (self.kept.iter().cloned()).zip(self.len..).collect();
        Ok(Places {
            newest: newest.unwrap_or_default(),
            by_time,
            kept,
        })
    }
}

/// The least time between two sample granules (`SampleGranules` steps back 30 to 900 s): two
/// ids' times counted in these steps from the newest are never the same step.
const SAMPLE_STEP_SECS: i64 = 30;

/// The acquisition time an HLS id carries (`HLS.S30.T18TYN.2022001T153012.v2.0`), in seconds.
fn acquired(id: &str) -> Option<i64> {
    let time = id.split('.').nth(3)?;
    chrono::NaiveDateTime::parse_from_str(time, "%Y%jT%H%M%S")
        .ok()
        .map(|t| t.and_utc().timestamp())
}

/// 32 bits of an id's hash: an id of the list's time that is not the list's.
fn check_hash(id: &str) -> u32 {
    (id_hash(id) >> 32) as u32
}

/// Where each id of a [`GranuleList`] is.
pub struct Places {
    /// The newest (first) id's time.
    newest: i64,
    /// Each id's time in steps from the newest, and its check hash, in list order.
    by_time: Vec<(u32, u32)>,
    /// The kept ids, by their places after the sample's.
    kept: std::collections::HashMap<String, usize>,
}

impl Places {
    /// The place of `id`; `None` for an id not in the list (but for a 2^-32 chance, for an id
    /// of exactly a listed id's time).
    pub fn of(&self, id: &str) -> Option<usize> {
        if let Some(at) = self.kept.get(id) {
            return Some(*at);
        }
        let steps = (self.newest - acquired(id)?) / SAMPLE_STEP_SECS;
        let steps = u32::try_from(steps).ok()?;
        let at = self.by_time.partition_point(|&(s, _)| s < steps);
        self.by_time
            .get(at)
            .filter(|&&(s, check)| s == steps && check == check_hash(id))
            .map(|_| at)
    }
}

/// A 64-bit hash of an id, the same every time (SipHash with fixed keys): the granule list's
/// places and the simulator's set of jobs seen.
pub(crate) fn id_hash(id: &str) -> u64 {
    use std::hash::Hasher;
    let mut h = std::hash::DefaultHasher::new();
    h.write(id.as_bytes());
    h.finish()
}

#[cfg(test)]
mod tests;
