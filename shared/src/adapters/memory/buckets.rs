use super::MemoryStore;
use crate::ports::{Buckets, ObjectStore};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// In-memory buckets, created on first use; the storage class each bucket was last written in
/// is remembered (S3 keeps it per object; one per bucket is enough for the tests).
#[derive(Default)]
pub struct MemoryBuckets {
    stores: Mutex<BTreeMap<String, Arc<MemoryStore>>>,
    classes: Mutex<BTreeMap<String, String>>,
}

impl MemoryBuckets {
    /// The bucket's store (the same one every call).
    pub fn bucket(&self, bucket: &str) -> Arc<MemoryStore> {
        self.stores
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(bucket.to_owned())
            .or_insert_with(|| Arc::new(MemoryStore::new()))
            .clone()
    }

    /// Makes `store` the bucket named `bucket` (granary's own bucket, reached as a source).
    pub fn adopt(&self, bucket: &str, store: Arc<MemoryStore>) {
        self.stores
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(bucket.to_owned(), store);
    }

    pub fn storage_class(&self, bucket: &str) -> Option<String> {
        self.classes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(bucket)
            .cloned()
    }
}

impl Buckets for MemoryBuckets {
    fn store(&self, bucket: &str, storage_class: Option<&str>) -> Arc<dyn ObjectStore> {
        if let Some(class) = storage_class {
            self.classes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(bucket.to_owned(), class.to_owned());
        }
        self.bucket(bucket)
    }
}
