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

/// The first `len` sample granules of `seed`, in inventory order.
#[derive(Debug, Default, Clone, Copy)]
pub struct GranuleList {
    seed: u64,
    len: usize,
}

impl GranuleList {
    pub fn sample(seed: u64, len: usize) -> Self {
        Self { seed, len }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The ids, made again from the seed.
    pub fn iter(&self) -> impl Iterator<Item = String> {
        SampleGranules::new(self.seed)
            .take(self.len)
            .map(|row| row.granule_id)
    }

    /// Each id's place in the list, found by a hash of the id (16 bytes a granule while the
    /// accounting runs, instead of the ids' text). Ids whose hashes meet (about one chance in
    /// 370,000 at ten million ids) are kept by their text instead.
    pub fn places(&self) -> anyhow::Result<Places> {
        self.places_by(id_hash)
    }

    fn places_by(&self, hash: fn(&str) -> u64) -> anyhow::Result<Places> {
        let id_hash = hash;
        let mut by_hash: Vec<(u64, u32)> = Vec::with_capacity(self.len);
        for (i, id) in self.iter().enumerate() {
            let i = u32::try_from(i)
                .map_err(|_| anyhow::anyhow!("more than 2^32 granules in one campaign"))?;
            by_hash.push((id_hash(&id), i));
        }
        by_hash.sort_unstable();
        let shared: std::collections::BTreeSet<u64> = by_hash
            .windows(2)
            .filter(|w| w[0].0 == w[1].0)
            .map(|w| w[0].0)
            .collect();
        let mut by_text = std::collections::HashMap::new();
        if !shared.is_empty() {
            by_hash.retain(|(h, _)| !shared.contains(h));
            for (i, id) in self.iter().enumerate() {
                if shared.contains(&id_hash(&id)) {
                    by_text.insert(id, i);
                }
            }
        }
        Ok(Places {
            hash,
            by_hash,
            shared,
            by_text,
        })
    }
}

/// Where each id of a [`GranuleList`] is.
pub struct Places {
    hash: fn(&str) -> u64,
    by_hash: Vec<(u64, u32)>,
    /// Hashes more than one id of the list has, and those ids' places by their text.
    shared: std::collections::BTreeSet<u64>,
    by_text: std::collections::HashMap<String, usize>,
}

impl Places {
    /// The place of `id`; `None` for an id not in the list (but for a 2^-64 chance per id of
    /// meeting one of the list's hashes).
    pub fn of(&self, id: &str) -> Option<usize> {
        let h = (self.hash)(id);
        if self.shared.contains(&h) {
            return self.by_text.get(id).copied();
        }
        let at = self.by_hash.partition_point(|&(k, _)| k < h);
        self.by_hash
            .get(at)
            .filter(|(k, _)| *k == h)
            .map(|&(_, i)| i as usize)
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
mod tests {
    use super::*;

    #[test]
    fn ids_are_the_sample_rows_and_each_has_its_place() {
        let list = GranuleList::sample(7, 500);
        let ids: Vec<String> = list.iter().collect();
        let rows: Vec<String> = sample_granules(500, 7)
            .into_iter()
            .map(|r| r.granule_id)
            .collect();
        assert_eq!(ids, rows);
        assert_eq!(list.len(), 500);
        let places = list.places().unwrap();
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(places.of(id), Some(i), "{id}");
        }
        assert_eq!(places.of("HLS.S30.T10SEG.1999001T000000.v2.0"), None);
        assert!(GranuleList::default().is_empty());
    }

    #[test]
    fn ids_whose_hashes_meet_still_have_their_places() {
        let list = GranuleList::sample(7, 300);
        // A hash of eight values: every id shares its hash with dozens of others.
        let places = list.places_by(|id| id.len() as u64 % 8).unwrap();
        for (i, id) in list.iter().enumerate() {
            assert_eq!(places.of(&id), Some(i), "{id}");
        }
        assert_eq!(places.of("HLS.S30.T10SEG.1999001T000000.v2.0"), None);
    }
}
