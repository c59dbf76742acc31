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
    /// URLs whose HEAD announces no size (a server streaming without Content-Length).
    sizeless: Mutex<BTreeSet<String>>,
    /// URLs whose next GETs fail with a 503, and how many more will.
    flaky: Mutex<BTreeMap<String, u32>>,
    /// GETs asked of each URL.
    fetches: Mutex<BTreeMap<String, u32>>,
    /// Callback URLs that answer with an error.
    failing: Mutex<BTreeSet<String>>,
    calls: Mutex<Vec<(String, serde_json::Value)>>,
    /// URLs whose server takes this long to answer any request (on tokio's clock).
    latency: Mutex<BTreeMap<String, std::time::Duration>>,
    /// The HTTP client's timeout, as `HttpRemote` sets it (`GRANARY_INGEST_TIMEOUT_SECS`): a
    /// server slower than this fails the request after it. None: waits as long as it takes.
    request_timeout: Mutex<Option<std::time::Duration>>,
}

impl MemoryRemote {
    pub fn serve(&self, url: &str, body: impl Into<Bytes>) {
        self.lock_files().insert(url.to_owned(), body.into());
    }

    /// HEAD of `url` announces no size from now on.
    pub fn hide_size(&self, url: &str) {
        lock(&self.sizeless).insert(url.to_owned());
    }

    /// The next `times` GETs of `url` answer 503.
    pub fn fail_fetches(&self, url: &str, times: u32) {
        lock(&self.flaky).insert(url.to_owned(), times);
    }

    /// How many GETs `url` was asked for.
    pub fn fetches(&self, url: &str) -> u32 {
        lock(&self.fetches).get(url).copied().unwrap_or(0)
    }

    /// Every request to `url` (HEAD, GET, callback) is answered only after `delay`: a slow or
    /// hanging depositor's server.
    pub fn slow(&self, url: &str, delay: std::time::Duration) {
        lock(&self.latency).insert(url.to_owned(), delay);
    }

    /// Requests end after `timeout` with the client's timeout error, as reqwest's do.
    pub fn time_out_after(&self, timeout: std::time::Duration) {
        *lock(&self.request_timeout) = Some(timeout);
    }

    /// Waits as long as `url`'s server takes to answer, or the client's timeout.
    async fn answer_delay(&self, url: &str) -> Result<(), SourceError> {
        let delay = lock(&self.latency).get(url).copied();
        let timeout = *lock(&self.request_timeout);
        match (delay, timeout) {
            (Some(delay), Some(timeout)) if delay > timeout => {
                tokio::time::sleep(timeout).await;
                Err(SourceError::Transient {
                    url: url.to_owned(),
                    message: format!("timed out after {}s", timeout.as_secs()),
                    source: None,
                })
            }
            (Some(delay), _) => {
                tokio::time::sleep(delay).await;
                Ok(())
            }
            (None, _) => Ok(()),
        }
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
        self.answer_delay(url).await?;
        let files = self.lock_files();
        let body = files.get(url).ok_or_else(|| Self::missing(url))?;
        if lock(&self.sizeless).contains(url) {
            return Ok(None);
        }
        Ok(Some(body.len() as u64))
    }

    async fn fetch(&self, url: &str) -> Result<(SourceStream, Option<u64>), SourceError> {
        *lock(&self.fetches).entry(url.to_owned()).or_default() += 1;
        self.answer_delay(url).await?;
        if let Some(left) = lock(&self.flaky).get_mut(url).filter(|n| **n > 0) {
            *left -= 1;
            return Err(SourceError::Transient {
                url: url.to_owned(),
                message: "HTTP 503 Service Unavailable".into(),
                source: None,
            });
        }
        let body = self
            .lock_files()
            .get(url)
            .cloned()
            .ok_or_else(|| Self::missing(url))?;
        let len = body.len() as u64;
        Ok((futures::stream::iter([Ok(body)]).boxed(), Some(len)))
    }

    async fn call_back(&self, url: &str, body: &serde_json::Value) -> Result<(), SourceError> {
        self.answer_delay(url).await?;
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
