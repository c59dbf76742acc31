//! What memory the granules needed (`granary report --scan --cost`): each granule's success,
//! by its platform and the memory its job reserved, and how many out-of-memory ends it took to
//! get there (`domain::memory`). An operator right-sizes the job definition from it: when most
//! of a platform's granules succeed only after a raise, its base is too small.

use super::LogFact;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryNeed {
    pub platform: String,
    /// What the succeeding job reserved, MiB (`None`: its detail did not say).
    pub memory_mib: Option<u32>,
    /// Granules that succeeded with it.
    pub granules: u64,
    /// Of those, the granules that ran out of memory at least once first.
    pub after_out_of_memory: u64,
    /// Their out-of-memory ends in all.
    pub out_of_memory_ends: u64,
}

/// One row per platform and reserved memory, smallest first.
pub fn memory_needed(facts: &[LogFact]) -> Vec<MemoryNeed> {
    let mut ends: BTreeMap<&str, u64> = BTreeMap::new();
    for f in facts.iter().filter(|f| f.out_of_memory) {
        *ends.entry(f.granule_id.as_str()).or_default() += 1;
    }
    let mut rows: BTreeMap<(String, Option<u32>), MemoryNeed> = BTreeMap::new();
    let mut seen = std::collections::BTreeSet::new();
    for f in facts {
        let success = f.outcome == "success" && !f.superseded && !f.revoked;
        if !success || !seen.insert(f.granule_id.as_str()) {
            continue;
        }
        let memory_mib = f
            .usage
            .map(|u| u.memory_mib)
            .and_then(|m| u32::try_from(m).ok());
        let row = rows
            .entry((f.platform.clone(), memory_mib))
            .or_insert_with(|| MemoryNeed {
                platform: f.platform.clone(),
                memory_mib,
                granules: 0,
                after_out_of_memory: 0,
                out_of_memory_ends: 0,
            });
        row.granules += 1;
        let n = ends.get(f.granule_id.as_str()).copied().unwrap_or(0);
        row.after_out_of_memory += u64::from(n > 0);
        row.out_of_memory_ends += n;
    }
    rows.into_values().collect()
}
