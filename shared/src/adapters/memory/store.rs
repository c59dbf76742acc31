use crate::ports::{ObjectMeta, ObjectStore, PutCondition, StoreError, StoredObject};
use async_trait::async_trait;
use bytes::Bytes;
use chrono::Utc;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Mutex;

#[derive(Debug, Clone)]
struct Entry {
    body: Bytes,
    etag: String,
    meta: ObjectMeta,
}

/// In-memory object store with S3's conditional-write semantics (atomic, unlike some emulators).
#[derive(Debug, Default)]
pub struct MemoryStore {
    objects: Mutex<BTreeMap<String, Entry>>,
    versions: Mutex<u64>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Entry>> {
        // A poisoned lock means a test thread panicked mid-write; the map itself is still usable.
        self.objects.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn next_etag(&self) -> String {
        let mut v = self.versions.lock().unwrap_or_else(|p| p.into_inner());
        *v += 1;
        format!("\"m{v}\"")
    }

    pub fn keys(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }
}

#[async_trait]
impl ObjectStore for MemoryStore {
    async fn get(&self, key: &str) -> Result<Option<StoredObject>, StoreError> {
        Ok(self.lock().get(key).map(|e| StoredObject {
            body: e.body.clone(),
            etag: e.etag.clone(),
        }))
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, StoreError> {
        let map = self.lock();
        let e = map.get(key).ok_or_else(|| StoreError::NotFound {
            key: key.to_owned(),
        })?;
        let len = e.body.len() as u64;
        let (start, end) = (range.start.min(len) as usize, range.end.min(len) as usize);
        Ok(e.body.slice(start..end.max(start)))
    }

    async fn get_suffix(&self, key: &str, len: u64) -> Result<(Bytes, u64), StoreError> {
        let map = self.lock();
        let e = map.get(key).ok_or_else(|| StoreError::NotFound {
            key: key.to_owned(),
        })?;
        let size = e.body.len() as u64;
        let start = size.saturating_sub(len) as usize;
        Ok((e.body.slice(start..), size))
    }

    async fn put(
        &self,
        key: &str,
        body: Bytes,
        condition: PutCondition,
    ) -> Result<String, StoreError> {
        let etag = self.next_etag();
        let mut map = self.lock();
        let current = map.get(key).map(|e| e.etag.as_str());
        let allowed = match (&condition, current) {
            (PutCondition::Overwrite, _) => true,
            (PutCondition::IfAbsent, existing) => existing.is_none(),
            (PutCondition::IfMatch(want), Some(have)) => want == have,
            (PutCondition::IfMatch(_), None) => false,
        };
        if !allowed {
            return Err(StoreError::Conflict {
                key: key.to_owned(),
            });
        }
        let meta = ObjectMeta {
            key: key.to_owned(),
            size: body.len() as u64,
            last_modified: Some(Utc::now()),
        };
        map.insert(
            key.to_owned(),
            Entry {
                body,
                etag: etag.clone(),
                meta,
            },
        );
        Ok(etag)
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StoreError> {
        Ok(self
            .lock()
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, e)| e.meta.clone())
            .collect())
    }

    async fn copy(&self, from: &str, to: &str) -> Result<(), StoreError> {
        let body = self
            .lock()
            .get(from)
            .map(|e| e.body.clone())
            .ok_or_else(|| StoreError::NotFound {
                key: from.to_owned(),
            })?;
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
}
