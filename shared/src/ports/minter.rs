//! An identifier service (EZID or one that speaks its API): mints a new identifier on a
//! shoulder. A mint is not idempotent — every request that reaches the service may make one —
//! so its errors say whether the request may have been acted on.

use async_trait::async_trait;

#[derive(Debug, thiserror::Error)]
pub enum MintError {
    /// The service answered and minted nothing for this request (`error: …` with a 400): the
    /// reason is its own, and sending the same request again will not help.
    #[error("the identifier service refused: {0}")]
    Refused(String),
    /// Nothing was minted, and the reason is the service's state, not the request: it could not
    /// be reached (no connection), or it refused granary's login or sent granary elsewhere (a
    /// redirect, a page that is not EZID's): trying later, or fixing the configuration, helps.
    #[error("the identifier service is unavailable: {0}")]
    Unavailable(String),
    /// The request may have been acted on and the answer is lost (a timeout, a 5xx, a body that
    /// is not EZID's): an identifier may exist that nobody recorded.
    #[error("the identifier service's answer is unknown: {0}")]
    Unknown(String),
}

#[async_trait]
pub trait Minter: Send + Sync {
    /// Mints an identifier on `shoulder` with `metadata` (an ANVL body); the identifier minted.
    async fn mint(&self, shoulder: &str, metadata: &str) -> Result<String, MintError>;
}
