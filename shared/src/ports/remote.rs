//! The depositors' side of the ingest queue: the files their manifests point at, and the
//! callbacks they ask for.

use super::source::{SourceError, SourceStream};
use async_trait::async_trait;

#[async_trait]
pub trait Remote: Send + Sync {
    /// The size the server announces for the file (HEAD), if it announces one.
    async fn size_of(&self, url: &str) -> Result<Option<u64>, SourceError>;
    /// The file's bytes as they arrive, and the length the server announced.
    async fn fetch(&self, url: &str) -> Result<(SourceStream, Option<u64>), SourceError>;
    /// POSTs `body` as JSON to a depositor's callback URL; any 2xx is success.
    async fn call_back(&self, url: &str, body: &serde_json::Value) -> Result<(), SourceError>;
}
