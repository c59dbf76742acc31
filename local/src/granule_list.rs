//! A campaign's granule ids, for the accounting at its end. The local campaign's inventories are
//! the sample rows of one seed ([`crate::campaign::SampleGranules`]), so the list keeps the seed
//! and the count and makes the ids again when read: ten million ids held as text cost ~400 MB
//! for the whole campaign, though they are read only once it is over.

use crate::campaign::SampleGranules;

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
    /// accounting runs, instead of the ids' text). Refused if two ids share a hash (never seen:
    /// one chance in ~10^11 at ten million), since a place must name one granule.
    pub fn places(&self) -> anyhow::Result<Places> {
        let mut by_hash: Vec<(u64, u32)> = Vec::with_capacity(self.len);
        for (i, id) in self.iter().enumerate() {
            let i = u32::try_from(i)
                .map_err(|_| anyhow::anyhow!("more than 2^32 granules in one campaign"))?;
            by_hash.push((id_hash(&id), i));
        }
        by_hash.sort_unstable();
        if let Some(pair) = by_hash.windows(2).find(|w| w[0].0 == w[1].0) {
            anyhow::bail!(
                "granules {} and {} of the sample share a hash",
                pair[0].1,
                pair[1].1
            );
        }
        Ok(Places(by_hash))
    }
}

/// Where each id of a [`GranuleList`] is.
pub struct Places(Vec<(u64, u32)>);

impl Places {
    /// The place of `id`; `None` for an id not in the list (but for a 2^-64 chance per id of
    /// meeting one of the list's hashes).
    pub fn of(&self, id: &str) -> Option<usize> {
        let h = id_hash(id);
        let at = self.0.partition_point(|&(k, _)| k < h);
        self.0
            .get(at)
            .filter(|(k, _)| *k == h)
            .map(|&(_, i)| i as usize)
    }
}

fn id_hash(id: &str) -> u64 {
    use std::hash::Hasher;
    // SipHash with fixed keys: the same id hashes the same way every time.
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
        let rows: Vec<String> = crate::campaign::sample_granules(500, 7)
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
}
