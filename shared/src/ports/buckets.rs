//! Buckets other than granary's own: an archive's source and its destinations.

use super::ObjectStore;
use std::sync::Arc;

pub trait Buckets: Send + Sync {
    /// The object store of `bucket`, writing in `storage_class` (`None`: the bucket's default).
    fn store(&self, bucket: &str, storage_class: Option<&str>) -> Arc<dyn ObjectStore>;
}
