//! A campaign's granule ids, kept compactly: the local campaign holds every id it put in its
//! inventories to account for each at the end, and ten million ids as `String`s cost ~72 bytes
//! each (the `String` and its heap block) where the text is ~35. Here they share one buffer.

/// Granule ids in the order they were added, in one text buffer.
#[derive(Debug, Default, Clone)]
pub struct GranuleList {
    text: String,
    /// Where each id ends in `text` (the next starts there).
    ends: Vec<u32>,
}

impl GranuleList {
    pub fn with_capacity(ids: usize) -> Self {
        Self {
            // The sample ids are ~35 bytes (HLS.S30.T10SEG.2024001T183959.v2.0).
            text: String::with_capacity(ids.saturating_mul(36)),
            ends: Vec::with_capacity(ids),
        }
    }

    /// Adds `id`; refused past 4 GiB of ids (a hundred million of them).
    pub fn push(&mut self, id: &str) -> anyhow::Result<()> {
        let end = u32::try_from(self.text.len() + id.len()).map_err(|_| {
            anyhow::anyhow!("more than 4 GiB of granule ids ({} of them)", self.len())
        })?;
        self.text.push_str(id);
        self.ends.push(end);
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The `i`th id, if there are that many.
    pub fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)? as usize;
        let start = match i {
            0 => 0,
            _ => self.ends[i - 1] as usize,
        };
        self.text.get(start..end)
    }

    pub fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    pub fn contains(&self, id: &str) -> bool {
        self.iter().any(|g| g == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_come_back_in_order_and_by_place() {
        let ids = ["HLS.S30.T10SEG.2024001T183959.v2.0", "", "b"];
        let mut list = GranuleList::with_capacity(2);
        for id in ids {
            list.push(id).unwrap();
        }
        assert_eq!(list.len(), 3);
        assert_eq!(list.iter().collect::<Vec<_>>(), ids);
        assert_eq!(list.get(0), Some(ids[0]));
        assert_eq!(list.get(1), Some(""));
        assert_eq!(list.get(2), Some("b"));
        assert_eq!(list.get(3), None);
        assert!(list.contains("b") && !list.contains("c"));
        assert!(GranuleList::default().is_empty());
    }
}
