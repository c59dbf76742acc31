use super::scratch::ScratchFile;
use super::shelf::Shelf;
use crate::ports::{
    ListPage, ObjectMeta, ObjectStore, PutCondition, StoreError, StoredObject, LIST_PAGE_KEYS,
};
use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use std::fs::File;
use std::ops::{Bound, Range};
use std::sync::Mutex;

/// Where an object's bytes are, as read out under the lock.
#[derive(Debug, Clone)]
enum Body {
    Held(Box<[u8]>),
    /// In the spill file, at this frame ([`ScratchFile::append_framed`]).
    Spilled(u64),
}

/// The bit of `Entry::at` saying the store holds the body itself (in `Objects::held`, under the
/// rest of `at`: the write's number).
const HELD: u64 = 1 << 63;

/// One object. Kept small — 16 bytes (the key is the shelf's; where the body is — a frame in the
/// scratch file, whose header holds its stored length, or a held write's number —, its length,
/// its time relative to the store's creation; a held body in a side table): a
/// ten-million-granule campaign holds ~21 million of them. A held body belongs to
/// its write: an entry must never be duplicated under a second key (a copy is a put, a write of
/// its own), or deleting one would drop the other's body.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Where its body is: its frame's offset in the scratch file, or [`HELD`] with the write's
    /// number. Each write has its own (a frame is never written twice, a number never given
    /// twice), so this is the object's ETag too.
    at: u64,
    /// The body's length.
    len: u32,
    /// Milliseconds after the store was made (a twin lives far less than the 49 days this holds).
    modified_ms: u32,
}

impl Entry {
    fn len(&self) -> u64 {
        u64::from(self.len)
    }

    fn is_held(&self) -> bool {
        self.at & HELD != 0
    }

    fn etag(&self) -> String {
        match self.is_held() {
            true => format!("\"h{}\"", self.at & !HELD),
            false => format!("\"s{}\"", self.at),
        }
    }
}

/// Bodies this long or longer go to the spill file, when there is one.
const SPILL_MIN_BYTES: usize = 64;

/// A key as (folder, rest): the rest is the last two components (`granule_id=G/attempt=1.json`,
/// `state=S/<id>.json`), or the last one when there is only one folder (`items/` + `<id>.json`).
/// Keys under one folder share it instead of each holding a copy: a log key is ~120 bytes, 60 of
/// them its partition folder.
fn split(key: &str) -> (&str, &str) {
    match key.rfind('/') {
        None => ("", key),
        Some(last) => match key[..last].rfind('/') {
            Some(second) => key.split_at(second + 1),
            None => key.split_at(last + 1),
        },
    }
}

#[derive(Debug)]
struct Objects {
    /// Each folder's keys (the rest of each) packed on a shelf: a campaign's ten million
    /// `items/` keys cost ~25 bytes each instead of ~130 in a map of boxed strings.
    folders: BTreeMap<Box<str>, Shelf<Entry>>,
    /// The bodies the store holds itself (all of a store without a spill file, the short ones
    /// of one with), by their entry's `at`; an empty body is not kept.
    held: std::collections::HashMap<u64, Box<[u8]>>,
    /// Writes given a held number so far (the last one's number); empty bodies count too.
    held_writes: u64,
    made: DateTime<Utc>,
}

impl Default for Objects {
    fn default() -> Self {
        Self {
            folders: BTreeMap::new(),
            held: Default::default(),
            held_writes: 0,
            made: crate::clock::now(),
        }
    }
}

impl Objects {
    fn entry(&self, key: &str) -> Option<&Entry> {
        let (folder, rest) = split(key);
        self.folders.get(folder)?.get(rest)
    }

    fn insert(&mut self, key: &str, entry: Entry) {
        let (folder, rest) = split(key);
        let replaced = match self.folders.get_mut(folder) {
            Some(within) => within.insert(rest, entry),
            None => {
                let mut within = Shelf::default();
                within.insert(rest, entry);
                self.folders.insert(folder.into(), within);
                None
            }
        };
        self.let_go(replaced);
    }

    fn remove(&mut self, key: &str) {
        let (folder, rest) = split(key);
        if let Some(within) = self.folders.get_mut(folder) {
            let removed = within.remove(rest);
            if within.is_empty() {
                self.folders.remove(folder);
            }
            self.let_go(removed);
        }
    }

    /// Drops the held body of an entry replaced or removed.
    fn let_go(&mut self, gone: Option<Entry>) {
        if let Some(gone) = gone.filter(Entry::is_held) {
            self.held.remove(&gone.at);
        }
    }

    /// Where `entry`'s bytes are, copied out if the store holds them; `None` if a held body
    /// is missing (a bug of the twin's, said as such by the caller).
    fn body(&self, entry: &Entry) -> Option<Body> {
        if !entry.is_held() {
            return Some(Body::Spilled(entry.at));
        }
        match self.held.get(&entry.at) {
            Some(bytes) => Some(Body::Held(bytes.clone())),
            None if entry.len() == 0 => Some(Body::Held(Box::default())),
            None => None,
        }
    }

    fn modified(&self, entry: &Entry) -> DateTime<Utc> {
        self.made + chrono::Duration::milliseconds(i64::from(entry.modified_ms))
    }

    /// The folders directly under `prefix`, without reading every key: a key's folder always
    /// starts with `prefix` when the key lies in a folder under it (`split` keeps all but the
    /// last segment of the key's path, or all but the last two).
    fn list_folders(&self, prefix: &str) -> Vec<String> {
        let mut found = std::collections::BTreeSet::new();
        for (folder, within) in self
            .folders
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|(f, _)| f.starts_with(prefix))
        {
            if folder.len() > prefix.len() {
                found.extend(crate::ports::object_store::folders_of(
                    prefix,
                    std::iter::once(folder.as_ref()),
                ));
            } else {
                let keys: Vec<String> = within
                    .keys()
                    .into_iter()
                    .map(|rest| format!("{folder}{rest}"))
                    .collect();
                found.extend(crate::ports::object_store::folders_of(
                    prefix,
                    keys.iter().map(String::as_str),
                ));
            }
        }
        found.into_iter().collect()
    }

    /// Every key starting with `prefix`, in key order.
    fn list(&self, prefix: &str) -> Vec<ObjectMeta> {
        let meta = |folder: &str, rest: &str, e: &Entry| ObjectMeta {
            key: format!("{folder}{rest}"),
            size: e.len(),
            last_modified: Some(self.modified(e)),
            etag: Some(e.etag()),
        };
        let mut out = Vec::new();
        // Folders under the prefix: all their keys.
        for (folder, within) in self
            .folders
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|(f, _)| f.starts_with(prefix))
        {
            within.each_from("", |rest, e| {
                out.push(meta(folder, rest, e));
                true
            });
        }
        // Folders the prefix runs into: their keys whose rest continues it.
        let shorter = std::iter::once(0)
            .chain(prefix.match_indices('/').map(|(i, _)| i + 1))
            .filter(|&end| end < prefix.len());
        for end in shorter {
            let (folder, wanted) = prefix.split_at(end);
            if let Some(within) = self.folders.get(folder) {
                within.each_from(wanted, |rest, e| {
                    let wanted_here = rest.starts_with(wanted);
                    if wanted_here {
                        out.push(meta(folder, rest, e));
                    }
                    wanted_here
                });
            }
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }

    /// The first `max` keys under `prefix` after `start_after`, and whether more follow: each
    /// folder that can hold such keys is read from where `start_after` falls in it, for at most
    /// `max + 1` keys (a folder's keys are in order; folders' keys interleave, so the pages are
    /// merged).
    fn list_page(&self, prefix: &str, start_after: &str, max: usize) -> (Vec<ObjectMeta>, bool) {
        let mut out = Vec::new();
        let under = self
            .folders
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|(f, _)| f.starts_with(prefix));
        // Folders the prefix runs into (`items/` for the prefix `items/HLS`).
        let into = std::iter::once(0)
            .chain(prefix.match_indices('/').map(|(i, _)| i + 1))
            .filter(|&end| end < prefix.len())
            .filter_map(|end| self.folders.get_key_value(&prefix[..end]));
        for (folder, within) in under.chain(into) {
            let start = match start_after.strip_prefix(&**folder) {
                Some(rest) => rest,
                // Every key of the folder sorts after `start_after`.
                None if start_after < &**folder => "",
                // Or none does.
                None => continue,
            };
            let wanted = prefix.strip_prefix(&**folder).unwrap_or("");
            let mut taken = 0;
            within.each_from(start.max(wanted), |rest, e| {
                if !rest.starts_with(wanted) {
                    return false;
                }
                if rest > start {
                    out.push(ObjectMeta {
                        key: format!("{folder}{rest}"),
                        size: e.len(),
                        last_modified: Some(self.modified(e)),
                        etag: Some(e.etag()),
                    });
                    taken += 1;
                }
                taken <= max
            });
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        let truncated = out.len() > max;
        out.truncate(max);
        (out, truncated)
    }
}

/// In-memory object store with S3's conditional-write semantics (atomic, unlike some emulators).
///
/// [`MemoryStore::spilling`] keeps object bodies in a scratch file instead of memory (keys and
/// metadata stay in memory): a campaign of a million granules writes gigabytes of logs, records
/// and history, which the page cache holds or drops as the machine allows.
#[derive(Debug, Default)]
pub struct MemoryStore {
    objects: Mutex<Objects>,
    /// Where bodies go, outside the objects' lock: a body is compressed, written and read back
    /// without holding up other requests (the scratch file orders its own appends, and bytes it
    /// has written never move). Bytes of replaced and deleted objects stay there.
    spill: Option<ScratchFile>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// A store whose bodies are written to `scratch` (an empty file opened for reading and
    /// writing; a `tempfile::tempfile()` removes itself).
    pub fn spilling(scratch: File) -> Self {
        Self {
            objects: Mutex::new(Objects::default()),
            spill: Some(ScratchFile::new(scratch)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Objects> {
        // A poisoned lock means a test thread panicked mid-write; the map itself is still usable.
        self.objects.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn keys(&self) -> Vec<String> {
        self.lock().list("").into_iter().map(|m| m.key).collect()
    }

    /// Where `key`'s body is, its length and its ETag, read under the lock; the bytes are read
    /// after it is let go.
    fn locate(&self, key: &str) -> Result<Option<(Body, u64, String)>, StoreError> {
        let objects = self.lock();
        let Some(e) = objects.entry(key) else {
            return Ok(None);
        };
        let body = objects
            .body(e)
            .ok_or_else(|| StoreError::backend(key, "the memory store lost a held body"))?;
        Ok(Some((body, e.len(), e.etag())))
    }

    /// Bytes `range` (clamped to the body) of `body`.
    fn read(&self, key: &str, body: &Body, range: Range<u64>) -> Result<Bytes, StoreError> {
        let clamp = |len: u64| {
            let (start, end) = (range.start.min(len), range.end.min(len));
            (start, end.max(start))
        };
        match (body, &self.spill) {
            (Body::Held(b), _) => {
                let (start, end) = clamp(b.len() as u64);
                Ok(Bytes::copy_from_slice(&b[start as usize..end as usize]))
            }
            (Body::Spilled(frame), Some(file)) => {
                let read = || {
                    let at = file.frame(*frame)?;
                    let (start, end) = clamp(u64::from(at.len));
                    file.read(at, start, end - start)
                };
                read().map(Bytes::from).map_err(|e| spill_error(key, &e))
            }
            (Body::Spilled(_), None) => Err(StoreError::backend(
                key,
                "the body was spilled but the store has no spill file",
            )),
        }
    }
}

fn spill_error(key: &str, e: &std::io::Error) -> StoreError {
    StoreError::backend(key, format!("the memory store's spill file: {e}"))
}

#[async_trait]
impl ObjectStore for MemoryStore {
    async fn get(&self, key: &str) -> Result<Option<StoredObject>, StoreError> {
        let Some((body, len, etag)) = self.locate(key)? else {
            return Ok(None);
        };
        Ok(Some(StoredObject {
            body: self.read(key, &body, 0..len)?,
            etag,
        }))
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, StoreError> {
        let (body, _, _) = self.locate(key)?.ok_or_else(|| StoreError::NotFound {
            key: key.to_owned(),
        })?;
        self.read(key, &body, range)
    }

    async fn get_suffix(&self, key: &str, len: u64) -> Result<(Bytes, u64), StoreError> {
        let (body, size, _) = self.locate(key)?.ok_or_else(|| StoreError::NotFound {
            key: key.to_owned(),
        })?;
        Ok((self.read(key, &body, size.saturating_sub(len)..size)?, size))
    }

    async fn put(
        &self,
        key: &str,
        body: Bytes,
        condition: PutCondition,
    ) -> Result<String, StoreError> {
        // Written before the lock is taken: a write the condition then refuses leaves its bytes
        // in the scratch file unreferenced, as a replaced object's do.
        let (spilled, held) = match &self.spill {
            Some(file) if body.len() >= SPILL_MIN_BYTES => (
                Some(
                    file.append_framed(&body)
                        .map_err(|e| spill_error(key, &e))?,
                ),
                None,
            ),
            // Copied before the lock too.
            _ => (None, Some(body.to_vec().into_boxed_slice())),
        };
        let mut guard = self.lock();
        let objects = &mut *guard;
        let current = objects.entry(key).map(Entry::etag);
        let allowed = match (&condition, current) {
            (PutCondition::Overwrite, _) => true,
            (PutCondition::IfAbsent, existing) => existing.is_none(),
            (PutCondition::IfMatch(want), Some(have)) => *want == have,
            // As S3 answers it: 404, not 412 (see `PutCondition::IfMatch`).
            (PutCondition::IfMatch(_), None) => {
                return Err(StoreError::NotFound {
                    key: key.to_owned(),
                })
            }
        };
        if !allowed {
            return Err(StoreError::Conflict {
                key: key.to_owned(),
            });
        }
        let since = crate::clock::now()
            .signed_duration_since(objects.made)
            .num_milliseconds();
        let len = u32::try_from(body.len())
            .map_err(|_| StoreError::backend(key, "the memory store holds bodies under 4 GiB"))?;
        let at = match spilled {
            Some(frame) if frame & HELD == 0 => frame,
            Some(_) => {
                return Err(StoreError::backend(
                    key,
                    "the memory store's spill file is past 8 EiB",
                ))
            }
            None => {
                objects.held_writes += 1;
                let at = HELD | objects.held_writes;
                if let Some(held) = held.filter(|b| !b.is_empty()) {
                    objects.held.insert(at, held);
                }
                at
            }
        };
        let entry = Entry {
            at,
            len,
            modified_ms: u32::try_from(since.max(0)).unwrap_or(u32::MAX),
        };
        let etag = entry.etag();
        objects.insert(key, entry);
        Ok(etag)
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StoreError> {
        Ok(self.lock().list(prefix))
    }

    async fn list_folders(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        Ok(self.lock().list_folders(prefix))
    }

    async fn list_page(&self, prefix: &str, start_after: &str) -> Result<ListPage, StoreError> {
        let (objects, truncated) = self.lock().list_page(prefix, start_after, LIST_PAGE_KEYS);
        Ok(ListPage { objects, truncated })
    }

    async fn copy(&self, from: &str, to: &str) -> Result<(), StoreError> {
        let body = self
            .get(from)
            .await?
            .ok_or_else(|| StoreError::NotFound {
                key: from.to_owned(),
            })?
            .body;
        self.put(to, body, PutCondition::Overwrite)
            .await
            .map(|_| ())
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.lock().remove(key);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
