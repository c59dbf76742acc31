use super::scratch::{ScratchFile, Spilled};
use crate::ports::{ObjectMeta, ObjectStore, PutCondition, StoreError, StoredObject};
use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use std::fs::File;
use std::ops::Range;
use std::sync::Mutex;

/// Where an object's bytes are.
#[derive(Debug, Clone)]
enum Body {
    Held(Box<[u8]>),
    /// In the spill file.
    Spilled(Spilled),
}

/// One object. Kept small (the key is the map's, the ETag a number): a million-granule campaign
/// holds a few million of them.
#[derive(Debug, Clone)]
struct Entry {
    body: Body,
    version: u64,
    /// Milliseconds since the epoch.
    last_modified: i64,
}

impl Entry {
    fn len(&self) -> u64 {
        match &self.body {
            Body::Held(b) => b.len() as u64,
            Body::Spilled(at) => u64::from(at.len),
        }
    }

    fn etag(&self) -> String {
        format!("\"m{}\"", self.version)
    }
}

/// Bodies this long or longer go to the spill file, when there is one.
const SPILL_MIN_BYTES: usize = 64;

#[derive(Debug, Default)]
struct Objects {
    map: BTreeMap<Box<str>, Entry>,
    versions: u64,
    /// Bytes of replaced and deleted objects stay there (it is a scratch file).
    spill: Option<ScratchFile>,
}

/// In-memory object store with S3's conditional-write semantics (atomic, unlike some emulators).
///
/// [`MemoryStore::spilling`] keeps object bodies in a scratch file instead of memory (keys and
/// metadata stay in memory): a campaign of a million granules writes gigabytes of logs, records
/// and history, which the page cache holds or drops as the machine allows.
#[derive(Debug, Default)]
pub struct MemoryStore {
    objects: Mutex<Objects>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// A store whose bodies are written to `scratch` (an empty file opened for reading and
    /// writing; a `tempfile::tempfile()` removes itself).
    pub fn spilling(scratch: File) -> Self {
        Self {
            objects: Mutex::new(Objects {
                spill: Some(ScratchFile::new(scratch)),
                ..Objects::default()
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Objects> {
        // A poisoned lock means a test thread panicked mid-write; the map itself is still usable.
        self.objects.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn keys(&self) -> Vec<String> {
        self.lock().map.keys().map(|k| k.to_string()).collect()
    }

    /// Bytes `range` (clamped to the body) of `entry`.
    fn read(
        objects: &Objects,
        key: &str,
        entry: &Entry,
        range: Range<u64>,
    ) -> Result<Bytes, StoreError> {
        let len = entry.len();
        let (start, end) = (range.start.min(len), range.end.min(len));
        let end = end.max(start);
        match (&entry.body, &objects.spill) {
            (Body::Held(b), _) => Ok(Bytes::copy_from_slice(&b[start as usize..end as usize])),
            (Body::Spilled(at), Some(file)) => file
                .read(*at, start, end - start)
                .map(Bytes::from)
                .map_err(|e| spill_error(key, &e)),
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
        let objects = self.lock();
        let Some(e) = objects.map.get(key) else {
            return Ok(None);
        };
        Ok(Some(StoredObject {
            body: Self::read(&objects, key, e, 0..e.len())?,
            etag: e.etag(),
        }))
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, StoreError> {
        let objects = self.lock();
        let e = objects.map.get(key).ok_or_else(|| StoreError::NotFound {
            key: key.to_owned(),
        })?;
        Self::read(&objects, key, e, range)
    }

    async fn get_suffix(&self, key: &str, len: u64) -> Result<(Bytes, u64), StoreError> {
        let objects = self.lock();
        let e = objects.map.get(key).ok_or_else(|| StoreError::NotFound {
            key: key.to_owned(),
        })?;
        let size = e.len();
        Ok((
            Self::read(&objects, key, e, size.saturating_sub(len)..size)?,
            size,
        ))
    }

    async fn put(
        &self,
        key: &str,
        body: Bytes,
        condition: PutCondition,
    ) -> Result<String, StoreError> {
        let mut guard = self.lock();
        let objects = &mut *guard;
        let current = objects.map.get(key).map(Entry::etag);
        let allowed = match (&condition, current) {
            (PutCondition::Overwrite, _) => true,
            (PutCondition::IfAbsent, existing) => existing.is_none(),
            (PutCondition::IfMatch(want), Some(have)) => *want == have,
            (PutCondition::IfMatch(_), None) => false,
        };
        if !allowed {
            return Err(StoreError::Conflict {
                key: key.to_owned(),
            });
        }
        let body = match &mut objects.spill {
            Some(file) if body.len() >= SPILL_MIN_BYTES => {
                Body::Spilled(file.append(&body).map_err(|e| spill_error(key, &e))?)
            }
            _ => Body::Held(body.to_vec().into_boxed_slice()),
        };
        objects.versions += 1;
        let entry = Entry {
            body,
            version: objects.versions,
            last_modified: Utc::now().timestamp_millis(),
        };
        let etag = entry.etag();
        objects.map.insert(key.into(), entry);
        Ok(etag)
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StoreError> {
        Ok(self
            .lock()
            .map
            .range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, e)| ObjectMeta {
                key: k.to_string(),
                size: e.len(),
                last_modified: DateTime::<Utc>::from_timestamp_millis(e.last_modified),
            })
            .collect())
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
        self.lock().map.remove(key);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn conditional_writes() {
        let s = MemoryStore::new();
        let e1 = s
            .put("k", Bytes::from_static(b"1"), PutCondition::IfAbsent)
            .await
            .unwrap();
        assert!(matches!(
            s.put("k", Bytes::from_static(b"2"), PutCondition::IfAbsent)
                .await,
            Err(StoreError::Conflict { .. })
        ));
        let e2 = s
            .put(
                "k",
                Bytes::from_static(b"2"),
                PutCondition::IfMatch(e1.clone()),
            )
            .await
            .unwrap();
        assert!(matches!(
            s.put("k", Bytes::from_static(b"3"), PutCondition::IfMatch(e1))
                .await,
            Err(StoreError::Conflict { .. })
        ));
        assert_eq!(s.get("k").await.unwrap().unwrap().etag, e2);
        assert_eq!(
            s.get_suffix("k", 10).await.unwrap(),
            (Bytes::from_static(b"2"), 1)
        );
        s.put("k2", Bytes::from_static(b"abcdef"), PutCondition::Overwrite)
            .await
            .unwrap();
        assert_eq!(
            s.get_range("k2", 1..3).await.unwrap(),
            Bytes::from_static(b"bc")
        );
        assert_eq!(s.list("k").await.unwrap().len(), 2);
    }

    #[tokio::test]
    async fn a_spilling_store_reads_back_what_it_wrote() {
        let s = MemoryStore::spilling(super::super::scratch::tests::tempfile_in_temp_dir());
        let long = Bytes::from((0..200u8).collect::<Vec<u8>>());
        let e1 = s
            .put("a", long.clone(), PutCondition::IfAbsent)
            .await
            .unwrap();
        s.put("b", Bytes::from_static(b"short"), PutCondition::IfAbsent)
            .await
            .unwrap();
        let replaced = Bytes::from(vec![7u8; 100]);
        s.put("a", replaced.clone(), PutCondition::IfMatch(e1))
            .await
            .unwrap();
        assert_eq!(s.get("a").await.unwrap().unwrap().body, replaced);
        assert_eq!(
            s.get("b").await.unwrap().unwrap().body,
            Bytes::from_static(b"short")
        );
        assert_eq!(
            s.get_range("a", 98..500).await.unwrap(),
            Bytes::from(vec![7u8; 2])
        );
        assert_eq!(
            s.get_suffix("a", 3).await.unwrap(),
            (Bytes::from(vec![7u8; 3]), 100)
        );
        s.copy("a", "c").await.unwrap();
        assert_eq!(s.get("c").await.unwrap().unwrap().body, replaced);
        let sizes: Vec<u64> = s.list("").await.unwrap().iter().map(|m| m.size).collect();
        assert_eq!(sizes, vec![100, 5, 100]);
    }
}
