use crate::ports::{Remote, SourceError, SourceStream};
use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

/// In-memory twin of the depositors' servers: files by URL, and the callbacks received.
#[derive(Debug, Default)]
pub struct MemoryRemote {
    files: Mutex<BTreeMap<String, Bytes>>,
    /// URLs whose HEAD announces no size.
    /// Callback URLs that answer with an error.
    failing: Mutex<BTreeSet<String>>,
    calls: Mutex<Vec<(String, serde_json::Value)>>,
}

impl MemoryRemote {
    pub fn serve(&self, url: &str, body: impl Into<Bytes>) {
        self.lock_files().insert(url.to_owned(), body.into());
    }

    pub fn fail_callbacks_to(&self, url: &str) {
        lock(&self.failing).insert(url.to_owned());
    }

    /// The callbacks received so far, in order.
    pub fn calls(&self) -> Vec<(String, serde_json::Value)> {
        lock(&self.calls).clone()
    }

    fn lock_files(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Bytes>> {
        lock(&self.files)
    }

    fn missing(url: &str) -> SourceError {
        SourceError::Permanent {
            url: url.to_owned(),
            message: "HTTP 404 Not Found".into(),
            source: None,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[async_trait]
impl Remote for MemoryRemote {
    async fn size_of(&self, url: &str) -> Result<Option<u64>, SourceError> {
        let files = self.lock_files();
        let body = files.get(url).ok_or_else(|| Self::missing(url))?;
        Ok(Some(body.len() as u64))
    }

    async fn fetch(&self, url: &str) -> Result<(SourceStream, Option<u64>), SourceError> {
        let body = self
            .lock_files()
            .get(url)
            .cloned()
            .ok_or_else(|| Self::missing(url))?;
        let len = body.len() as u64;
        Ok((futures::stream::iter([Ok(body)]).boxed(), Some(len)))
    }

    async fn call_back(&self, url: &str, body: &serde_json::Value) -> Result<(), SourceError> {
        if lock(&self.failing).contains(url) {
            return Err(SourceError::Transient {
                url: url.to_owned(),
                message: "HTTP 503 Service Unavailable".into(),
                source: None,
            });
        }
        lock(&self.calls).push((url.to_owned(), body.clone()));
        Ok(())
    }
}
