//! The depositors' servers over HTTP(S) (reqwest, rustls): HEAD for sizes, streaming GETs, JSON
//! callbacks. Every request has a timeout; 5xx, 429 and transport failures are transient.

use super::{check_status, transient};
use crate::ports::{Remote, SourceError, SourceStream};
use async_trait::async_trait;
use reqwest::Client;
use std::time::Duration;

/// Every Lambda's context has one, but only the ingest dispatcher calls it: the client (TLS
/// roots and all) is built at the first call, not at every function's start.
pub struct HttpRemote {
    timeout: Duration,
    client: std::sync::OnceLock<Client>,
}

impl HttpRemote {
    pub fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            client: std::sync::OnceLock::new(),
        }
    }

    fn client(&self) -> Result<&Client, SourceError> {
        if let Some(client) = self.client.get() {
            return Ok(client);
        }
        let built = Client::builder()
            .timeout(self.timeout)
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("granary/", env!("CARGO_PKG_VERSION")))
            .redirect(super::same_origin_redirects())
            .build()
            .map_err(|e| SourceError::Permanent {
                url: "(http client)".to_owned(),
                message: e.to_string(),
                source: Some(Box::new(e)),
            })?;
        Ok(self.client.get_or_init(|| built))
    }
}

#[async_trait]
impl Remote for HttpRemote {
    async fn size_of(&self, url: &str) -> Result<Option<u64>, SourceError> {
        let resp = self
            .client()?
            .head(url)
            .send()
            .await
            .map_err(|e| transient(url, e))?;
        check_status(url, resp.status())?;
        // reqwest reports a HEAD's Content-Length as the body it did not read: take the header.
        Ok(resp
            .headers()
            .get(reqwest::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok()))
    }

    async fn fetch(&self, url: &str) -> Result<(SourceStream, Option<u64>), SourceError> {
        super::get_stream(self.client()?, url).await
    }

    async fn call_back(&self, url: &str, body: &serde_json::Value) -> Result<(), SourceError> {
        let resp = self
            .client()?
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| transient(url, e))?;
        check_status(url, resp.status())
    }
}
