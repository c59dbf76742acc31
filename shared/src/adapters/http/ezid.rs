//! EZID's mint over HTTP(S) (API version 2, ezid.cdlib.org/doc/apidoc.html): `POST
//! <base>/shoulder/<shoulder>` with an ANVL body (`text/plain; charset=UTF-8`), HTTP Basic
//! authentication; `201` with `success: <id>` is a mint. Nothing minted: EZID's `error: …` to
//! the request (`400`: [`MintError::Refused`]), and what says the service, not the request, is
//! wrong — no connection, a login refused (`401`/`403`), a redirect or a page that is not EZID's
//! (a wrong base URL) — [`MintError::Unavailable`], tried again later. What may have reached the
//! service without an answer — a timeout, a 5xx — is [`MintError::Unknown`]: the caller must
//! not mint again blindly.

use crate::domain::ingest::deposit::mint_answer;
use crate::ports::{MintError, Minter};
use async_trait::async_trait;
use reqwest::Client;
use std::time::Duration;

pub struct HttpMinter {
    base: String,
    /// `user:password`, or none for a service that asks for none.
    credentials: Option<(String, String)>,
    timeout: Duration,
    client: std::sync::OnceLock<Client>,
}

impl HttpMinter {
    pub fn new(base: &str, credentials: Option<(String, String)>, timeout: Duration) -> Self {
        Self {
            base: base.trim_end_matches('/').to_owned(),
            credentials,
            timeout,
            client: std::sync::OnceLock::new(),
        }
    }

    fn client(&self) -> Result<&Client, MintError> {
        if let Some(c) = self.client.get() {
            return Ok(c);
        }
        let built = Client::builder()
            .timeout(self.timeout)
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("granary/", env!("CARGO_PKG_VERSION")))
            // A mint is a POST: never replayed at another address.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| MintError::Unavailable(format!("the HTTP client: {e}")))?;
        Ok(self.client.get_or_init(|| built))
    }
}

/// `user:password` as the SSM parameter holds it.
pub fn parse_credentials(raw: &str) -> Option<(String, String)> {
    let (user, password) = raw.trim().split_once(':')?;
    (!user.is_empty()).then(|| (user.to_owned(), password.to_owned()))
}

#[async_trait]
impl Minter for HttpMinter {
    async fn mint(&self, shoulder: &str, metadata: &str) -> Result<String, MintError> {
        let url = format!("{}/shoulder/{shoulder}", self.base);
        let mut request = self
            .client()?
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, "text/plain; charset=UTF-8")
            .body(metadata.to_owned());
        if let Some((user, password)) = &self.credentials {
            request = request.basic_auth(user, Some(password));
        }
        let response = match request.send().await {
            Ok(r) => r,
            // No connection was made: the service never saw the request.
            Err(e) if e.is_connect() => return Err(MintError::Unavailable(format!("{url}: {e}"))),
            Err(e) => return Err(MintError::Unknown(format!("{url}: {e}"))),
        };
        let status = response.status();
        let body = response
            .text()
            .await
            .map_err(|e| MintError::Unknown(format!("{url}: HTTP {status}, body unread: {e}")))?;
        if status.is_redirection() {
            return Err(MintError::Unavailable(format!(
                "{url}: HTTP {status} (a redirect: check GRANARY_INGEST_EZID_URL, https)"
            )));
        }
        if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
            return Err(MintError::Unavailable(format!(
                "{url}: HTTP {status}: {} (check the credentials parameter)",
                body.lines().next().unwrap_or("")
            )));
        }
        if status.is_server_error() {
            return Err(MintError::Unknown(format!(
                "{url}: HTTP {status}: {}",
                body.lines().next().unwrap_or("")
            )));
        }
        match mint_answer(&body) {
            Ok(id) if status.is_success() => Ok(id),
            Ok(id) => Err(MintError::Unknown(format!(
                "{url}: HTTP {status} naming {id}"
            ))),
            // EZID's own refusal: it says `error:` and minted nothing.
            Err(why) if status.is_client_error() && body.trim_start().starts_with("error") => {
                Err(MintError::Refused(format!("HTTP {status}: {why}")))
            }
            // A 4xx that is not EZID's answer (a 404 page at a wrong base URL): nothing minted.
            Err(why) if status.is_client_error() => Err(MintError::Unavailable(format!(
                "{url}: HTTP {status}, not EZID's answer ({why}): check GRANARY_INGEST_EZID_URL"
            ))),
            Err(why) => Err(MintError::Unknown(format!("{url}: HTTP {status}: {why}"))),
        }
    }
}
