//! A sorted map from string keys to small values, packed for tens of millions of keys: the keys
//! sit in blocks of at most [`BLOCK_KEYS`], each block's keys front- and rear-coded (a key
//! stores only what differs from the key before it, between the start and the end they share)
//! in one boxed byte string, its values in one boxed slice.
//!
//! Why: the in-memory store twin of a ten-million-granule campaign holds ~21 million keys. In a
//! `BTreeMap<Box<str>, _>` each costs its own heap string (~40–60 bytes, plus the allocator's
//! rounding) and a B-tree slot that is half empty when keys arrive in order — ~130 bytes a key
//! beside its value, 2.6 GB of the campaign's 4.4. Keys of one folder share most of their bytes
//! (`HLS.S30.T18TYN.2020001T…`), so front coding keeps ~15–25 of them; and neighbours end alike
//! (`….v2.0.json`, `….v2.0/attempt=1.json`), which rear coding keeps once for a byte a key. A lookup
//! binary-searches the blocks by their first key and scans one block; an edit re-encodes one
//! block.

use std::collections::BTreeMap;
use std::ops::Bound;

/// Keys in one block: a lookup decodes at most this many, an edit re-encodes them.
const BLOCK_KEYS: usize = 32;

/// One block: its keys coded in order against the key before each (as the lengths of the start
/// and of the end it shares with it and of what lies between, LEB128, then what lies between),
/// and their values in the same order. Both boxed, sized exactly: a `Vec`'s spare
/// capacity would cost as much as the coding saves.
#[derive(Debug, Clone)]
struct Block<V> {
    keys: Box<[u8]>,
    values: Box<[V]>,
}

fn put_varint(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// The LEB128 number at `bytes[*at..]`, moving `at` past it.
fn take_varint(bytes: &[u8], at: &mut usize) -> usize {
    let mut n = 0usize;
    let mut shift = 0;
    while let Some(&b) = bytes.get(*at) {
        *at += 1;
        n |= usize::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    n
}

fn shared_len(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// How many bytes `a` and `b` end with alike (what a key shares with its neighbour's end).
fn shared_end_len(a: &[u8], b: &[u8]) -> usize {
    a.iter()
        .rev()
        .zip(b.iter().rev())
        .take_while(|(x, y)| x == y)
        .count()
}

/// Codes `keys` (sorted) into one byte string, each against the one before it: the start they
/// share, then the end they share past it (so the two never overlap in either key).
fn encode<'a>(keys: impl IntoIterator<Item = &'a [u8]>) -> Box<[u8]> {
    let mut out = Vec::new();
    let mut previous: &[u8] = &[];
    for key in keys {
        let start = shared_len(previous, key);
        let end = shared_end_len(&previous[start..], &key[start..]);
        put_varint(&mut out, start);
        put_varint(&mut out, end);
        put_varint(&mut out, key.len() - start - end);
        out.extend_from_slice(&key[start..key.len() - end]);
        previous = key;
    }
    out.into_boxed_slice()
}

/// Walks a block's keys in order, decoding each into one of two reused buffers (the key before
/// it is read from the other).
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
    key: Vec<u8>,
    previous: Vec<u8>,
}

impl<'a> Cursor<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self {
            bytes,
            at: 0,
            key: Vec::new(),
            previous: Vec::new(),
        }
    }

    /// The next key, or `None` past the last.
    fn next_key(&mut self) -> Option<&[u8]> {
        if self.at >= self.bytes.len() {
            return None;
        }
        let start = take_varint(self.bytes, &mut self.at);
        let end = take_varint(self.bytes, &mut self.at);
        let len = take_varint(self.bytes, &mut self.at);
        let between = (self.at + len).min(self.bytes.len());
        std::mem::swap(&mut self.key, &mut self.previous);
        let before = &self.previous;
        let start = start.min(before.len());
        let end_from = before.len().saturating_sub(end).max(start);
        self.key.clear();
        self.key.extend_from_slice(&before[..start]);
        self.key.extend_from_slice(&self.bytes[self.at..between]);
        self.key.extend_from_slice(&before[end_from..]);
        self.at = between;
        Some(&self.key)
    }
}

impl<V> Block<V> {
    fn len(&self) -> usize {
        self.values.len()
    }

    /// Every key, decoded.
    fn decoded(&self) -> Vec<Box<[u8]>> {
        let mut cursor = Cursor::new(&self.keys);
        let mut out = Vec::with_capacity(self.len());
        while let Some(key) = cursor.next_key() {
            out.push(key.into());
        }
        out
    }

    /// `Ok(i)` when `key` is the block's `i`th key, `Err(i)` where it would go.
    fn position(&self, key: &[u8]) -> Result<usize, usize> {
        let mut cursor = Cursor::new(&self.keys);
        let mut i = 0;
        while let Some(here) = cursor.next_key() {
            match here.cmp(key) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Equal => return Ok(i),
                std::cmp::Ordering::Greater => return Err(i),
            }
        }
        Err(i)
    }
}

impl<V: Clone> Block<V> {
    fn from_parts(keys: &[Box<[u8]>], values: Vec<V>) -> Self {
        Self {
            keys: encode(keys.iter().map(|k| &k[..])),
            values: values.into_boxed_slice(),
        }
    }
}

/// The map. Each block is filed under a key no greater than any of its own and greater than
/// every key of the block before it (its first key when it was made or last re-filed).
#[derive(Debug, Clone)]
pub(super) struct Shelf<V> {
    blocks: BTreeMap<Box<[u8]>, Block<V>>,
    len: usize,
}

impl<V> Default for Shelf<V> {
    fn default() -> Self {
        Self {
            blocks: BTreeMap::new(),
            len: 0,
        }
    }
}

impl<V: Clone> Shelf<V> {
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The block `key` belongs in: the last one filed at or below it.
    fn holder(&self, key: &[u8]) -> Option<(&[u8], &Block<V>)> {
        self.blocks
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()
            .map(|(filed, block)| (&filed[..], block))
    }

    pub(super) fn get(&self, key: &str) -> Option<&V> {
        let (_, block) = self.holder(key.as_bytes())?;
        let i = block.position(key.as_bytes()).ok()?;
        block.values.get(i)
    }

    /// Sets `key` to `value`; returns the value it replaced.
    pub(super) fn insert(&mut self, key: &str, value: V) -> Option<V> {
        let key = key.as_bytes();
        let filed: Option<Box<[u8]>> = self
            .holder(key)
            .map(|(f, _)| Box::from(f))
            // Below every block's filing: the first block takes it and is filed under it.
            .or_else(|| self.blocks.keys().next().cloned());
        let Some(filed) = filed else {
            self.blocks
                .insert(key.into(), Block::from_parts(&[key.into()], vec![value]));
            self.len = 1;
            return None;
        };
        let block = self.blocks.get_mut(&filed)?;
        match block.position(key) {
            Ok(i) => block
                .values
                .get_mut(i)
                .map(|slot| std::mem::replace(slot, value)),
            Err(i) => {
                let block = self.blocks.remove(&filed)?;
                let mut keys = block.decoded();
                let mut values = block.values.into_vec();
                keys.insert(i, key.into());
                values.insert(i, value);
                self.len += 1;
                self.file(keys, values, filed);
                None
            }
        }
    }

    /// Files `keys` and `values` (in order) as one block, or two when there are more than a
    /// block holds; `filed` is what the block was filed under (kept while no key went below it,
    /// so the blocks' filings stay as they were).
    fn file(&mut self, mut keys: Vec<Box<[u8]>>, mut values: Vec<V>, filed: Box<[u8]>) {
        let filing = |keys: &[Box<[u8]>], filed: Box<[u8]>| match keys.first() {
            Some(first) if **first < *filed => first.clone(),
            _ => filed,
        };
        if keys.len() <= BLOCK_KEYS {
            let at = filing(&keys, filed);
            self.blocks.insert(at, Block::from_parts(&keys, values));
            return;
        }
        // Keys arriving in order land at the end of the last block: split there, leaving it
        // full, rather than in the middle (which would leave every block half empty).
        let last_block = self
            .blocks
            .range::<[u8], _>((Bound::Excluded(&filed[..]), Bound::Unbounded))
            .next()
            .is_none();
        let split = if last_block {
            keys.len() - 1
        } else {
            keys.len() / 2
        };
        let upper_keys = keys.split_off(split);
        let upper_values = values.split_off(split);
        let at = filing(&keys, filed);
        self.blocks.insert(at, Block::from_parts(&keys, values));
        if let Some(first) = upper_keys.first() {
            self.blocks
                .insert(first.clone(), Block::from_parts(&upper_keys, upper_values));
        }
    }

    /// Removes `key`; returns its value.
    pub(super) fn remove(&mut self, key: &str) -> Option<V> {
        let key = key.as_bytes();
        let (filed, block) = self.holder(key)?;
        let i = block.position(key).ok()?;
        let filed = Box::from(filed);
        let block = self.blocks.remove(&filed)?;
        let mut keys = block.decoded();
        let mut values = block.values.into_vec();
        keys.remove(i);
        let removed = values.remove(i);
        self.len -= 1;
        if !keys.is_empty() {
            // Filed where it was: still no greater than its keys, above the block before.
            self.blocks.insert(filed, Block::from_parts(&keys, values));
        }
        Some(removed)
    }

    /// Calls `visit` with each key at or after `start`, in order, while it returns `true`.
    pub(super) fn each_from(&self, start: &str, mut visit: impl FnMut(&str, &V) -> bool) {
        let start = start.as_bytes();
        let first = self
            .holder(start)
            .map(|(f, _)| Bound::Included(f))
            .unwrap_or(Bound::Unbounded);
        for block in self
            .blocks
            .range::<[u8], _>((first, Bound::Unbounded))
            .map(|(_, b)| b)
        {
            let mut cursor = Cursor::new(&block.keys);
            let mut i = 0;
            while let Some(key) = cursor.next_key() {
                if key >= start {
                    let Some(value) = block.values.get(i) else {
                        return;
                    };
                    // Keys are the store's own `&str`s, whole again once decoded.
                    if !visit(&String::from_utf8_lossy(key), value) {
                        return;
                    }
                }
                i += 1;
            }
        }
    }

    /// Every key, in order.
    pub(super) fn keys(&self) -> Vec<String> {
        let mut out = Vec::with_capacity(self.len);
        self.each_from("", |key, _| {
            out.push(key.to_owned());
            true
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(String, u32),
        Remove(String),
    }

    fn key() -> impl Strategy<Value = String> {
        // Few distinct characters and shared prefixes: front coding, block splits and keys
        // below every block's filing are all exercised.
        prop_oneof![
            "[ab]{0,6}",
            "G0[0-9]{1,3}\\.json",
            "granule_id=[xyé]{1,4}/attempt=[12]\\.json",
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (key(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
            1 => key().prop_map(Op::Remove),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn behaves_as_an_ordered_map(ops in proptest::collection::vec(op(), 0..400), probe in key()) {
            let mut shelf = Shelf::default();
            let mut model = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Insert(k, v) => {
                        prop_assert_eq!(shelf.insert(&k, v), model.insert(k, v));
                    }
                    Op::Remove(k) => {
                        prop_assert_eq!(shelf.remove(&k), model.remove(&k));
                    }
                }
            }
            prop_assert_eq!(shelf.is_empty(), model.is_empty());
            prop_assert_eq!(shelf.keys(), model.keys().cloned().collect::<Vec<_>>());
            for (k, v) in &model {
                prop_assert_eq!(shelf.get(k), Some(v));
            }
            prop_assert_eq!(shelf.get(&probe), model.get(&probe));
            let mut from = Vec::new();
            shelf.each_from(&probe, |k, v| { from.push((k.to_owned(), *v)); true });
            let want: Vec<(String, u32)> =
                model.range(probe.clone()..).map(|(k, v)| (k.clone(), *v)).collect();
            prop_assert_eq!(from, want);
        }
    }

    #[test]
    fn keys_in_order_fill_their_blocks() {
        let mut shelf = Shelf::default();
        for i in 0..(BLOCK_KEYS * 10) {
            shelf.insert(&format!("G{i:06}.json"), i);
        }
        assert_eq!(shelf.blocks.len(), 10);
        assert!(shelf.blocks.values().all(|b| b.len() == BLOCK_KEYS));
        // Front coded: neighbours share `G000` and more, so the blocks hold fewer bytes than
        // the keys' own 12 each.
        let bytes: usize = shelf.blocks.values().map(|b| b.keys.len()).sum();
        assert!(
            bytes * 4 < BLOCK_KEYS * 10 * 12 * 3,
            "{bytes} bytes of keys"
        );
    }

    #[test]
    fn neighbours_ending_alike_are_coded_by_what_lies_between() {
        // A log folder's rests: each shares its start with the key before it (up to the
        // seconds' last digit or two) and `.v2.0/attempt=1.json` after; a byte or two is left.
        let keys: Vec<String> = (10..42)
            .map(|s| format!("granule_id=HLS.S30.T18TYN.2025039T2359{s}.v2.0/attempt=1.json"))
            .collect();
        let coded = encode(keys.iter().map(|k| k.as_bytes()));
        let first = keys[0].len() + 3;
        assert!(
            coded.len() <= first + (keys.len() - 1) * 6,
            "{} bytes for {} keys",
            coded.len(),
            keys.len()
        );
        let block = Block::from_parts(
            &keys.iter().map(|k| k.as_bytes().into()).collect::<Vec<_>>(),
            vec![(); keys.len()],
        );
        let decoded: Vec<String> = block
            .decoded()
            .iter()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect();
        assert_eq!(decoded, keys);
        // A start and an end that would overlap in the shorter key are not both taken.
        let tricky = ["ab", "abab", "ababab", "b", "bab"];
        let block = Block::from_parts(
            &tricky
                .iter()
                .map(|k| k.as_bytes().into())
                .collect::<Vec<_>>(),
            vec![(); tricky.len()],
        );
        let decoded: Vec<Box<[u8]>> = block.decoded();
        assert_eq!(decoded, tricky.map(|k| Box::<[u8]>::from(k.as_bytes())));
    }
}
