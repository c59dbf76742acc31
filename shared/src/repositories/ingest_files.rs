//! What an ingest job stores beside its records: the local ids' bindings, the object's files
//! copied into storage with its ERC, Dublin Core and storage manifest, the downloaded files as
//! listed, and a container's zip. Each method is one store call (or the one record protocol),
//! with its condition, in the order the handler makes it.

use super::json::{change_record, read_json, write_json, Changed, RecordAt, RecordError};
use super::{RepositoryError, Versioned};
use crate::domain::ingest::deposit::LocalIdBinding;
use crate::domain::machine::Refused;
use crate::ports::{ObjectMeta, ObjectStore, PutCondition, StoreError, StoredObject};
use bytes::Bytes;
use std::sync::Arc;

#[derive(Clone)]
pub struct IngestFiles {
    store: Arc<dyn ObjectStore>,
}

impl IngestFiles {
    pub fn new(store: Arc<dyn ObjectStore>) -> Self {
        Self { store }
    }

    // ---- local ids' bindings ----

    /// The local id's binding at `key`, with its ETag.
    pub async fn local_id_binding(
        &self,
        key: &str,
    ) -> Result<Option<Versioned<LocalIdBinding>>, RepositoryError> {
        read_json(self.store.as_ref(), key).await
    }

    /// Writes `binding` at `key` under `condition` (created If-None-Match, or replacing the
    /// version read); `Ok(false)` when someone else wrote first.
    pub async fn put_local_id_binding(
        &self,
        key: &str,
        binding: &LocalIdBinding,
        condition: PutCondition,
    ) -> Result<bool, RepositoryError> {
        match write_json(self.store.as_ref(), key, binding, condition).await {
            Ok(_) => Ok(true),
            Err(e) if e.is_conflict() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The local id `local`'s binding at `key` changed as `decide` says, through the one record
    /// protocol.
    pub async fn change_local_id_binding<F>(
        &self,
        key: &str,
        local: &str,
        decide: F,
    ) -> Result<Changed<LocalIdBinding>, RecordError>
    where
        F: Fn(&LocalIdBinding) -> Result<Option<LocalIdBinding>, Refused>,
    {
        let at = RecordAt {
            key,
            what: "a local id binding",
            id: local,
        };
        change_record(self.store.as_ref(), at, decide, &()).await
    }

    // ---- the stored object ----

    /// A downloaded file copied to its place in the object's storage folder.
    pub async fn copy_into_storage(&self, from: &str, to: &str) -> Result<(), StoreError> {
        self.store.copy(from, to).await
    }

    /// A file granary writes into the object's storage folder (its ERC, its Dublin Core),
    /// overwriting what a pass before wrote.
    pub async fn put_storage_file(&self, key: &str, body: Bytes) -> Result<(), StoreError> {
        self.store
            .put(key, body, PutCondition::Overwrite)
            .await
            .map(|_| ())
    }

    /// The object's storage manifest, written last, overwriting what a pass before wrote.
    pub async fn put_storage_manifest(&self, key: &str, body: Bytes) -> Result<(), StoreError> {
        self.store
            .put(key, body, PutCondition::Overwrite)
            .await
            .map(|_| ())
    }

    /// The storage manifest at `key` as stored (`None`: missing).
    pub async fn storage_manifest(&self, key: &str) -> Result<Option<StoredObject>, StoreError> {
        self.store.get(key).await
    }

    /// Every object under the storage folder `prefix`, with its size.
    pub async fn stored_files(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StoreError> {
        self.store.list(prefix).await
    }

    /// A catalog record of a completed job at `key`, overwriting what a pass before wrote.
    pub async fn put_catalog_record(&self, key: &str, body: Bytes) -> Result<(), StoreError> {
        self.store
            .put(key, body, PutCondition::Overwrite)
            .await
            .map(|_| ())
    }

    // ---- downloads ----

    /// A manifest an operator or a depositor put in granary's bucket, at `key` (`None`: missing).
    pub async fn manifest(&self, key: &str) -> Result<Option<StoredObject>, StoreError> {
        self.store.get(key).await
    }

    /// A downloaded container's zip at `key` (`None`: missing).
    pub async fn container(&self, key: &str) -> Result<Option<StoredObject>, StoreError> {
        self.store.get(key).await
    }

    /// A file expanded from a container, at its place among the job's objects (overwriting what
    /// a pass before expanded).
    pub async fn put_expanded_file(&self, key: &str, body: Bytes) -> Result<(), StoreError> {
        self.store
            .put(key, body, PutCondition::Overwrite)
            .await
            .map(|_| ())
    }

    /// The objects whose keys start with the downloaded file's `key` (it among them if present).
    pub async fn downloaded_file(&self, key: &str) -> Result<Vec<ObjectMeta>, StoreError> {
        self.store.list(key).await
    }

    /// A container's zip, once expanded (deleting an absent one succeeds).
    pub async fn delete_container(&self, key: &str) -> Result<(), StoreError> {
        self.store.delete(key).await
    }
}
