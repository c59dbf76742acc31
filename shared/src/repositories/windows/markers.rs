//! A window's open marker (`<open prefix>windows/...`): it stands while the window has granules
//! whose end is not handled, and carries the progress the reconciler's passes saw
//! (`domain::window::WindowProgress`).

use super::Windows;
use crate::domain::layout::claims::window_key;
use crate::ports::{PutCondition, StoreError, StoredObject};
use bytes::Bytes;

impl Windows<'_> {
    /// The open marker of the window at `(inventory, start)`, with its ETag (`None`: closed).
    pub async fn open_marker(
        &self,
        inventory: &str,
        start: u64,
    ) -> Result<Option<StoredObject>, StoreError> {
        self.store
            .get(&window_key(self.open_prefix, inventory, start))
            .await
    }

    /// Writes the window's progress into its open marker under `condition`.
    pub async fn keep_progress(
        &self,
        inventory: &str,
        start: u64,
        progress: Bytes,
        condition: PutCondition,
    ) -> Result<String, StoreError> {
        self.store
            .put(
                &window_key(self.open_prefix, inventory, start),
                progress,
                condition,
            )
            .await
    }

    /// Removes the window's open marker: the window is closed.
    pub async fn close(&self, inventory: &str, start: u64) -> Result<(), StoreError> {
        self.store
            .delete(&window_key(self.open_prefix, inventory, start))
            .await
    }
}
