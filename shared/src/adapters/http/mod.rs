//! An HTTP(S) open directory as a source: the HTML index page data archives publish, one link per
//! file. Sizes, dates and ETags come from a HEAD per file; a published digest from a sidecar file
//! (`<name>.sha256` or `<name>.md5`) listed beside it.

pub mod ezid;
pub mod remote;

use crate::ports::{Source, SourceError, SourceFile, SourceStream};
use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};
use regex::Regex;
use reqwest::{Client, StatusCode, Url};
use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::Duration;

// A regex, not an HTML parser: directory indexes (Apache, nginx, S3 website, THREDDS) are
// machine-written and only their href attributes matter here.
static HREF: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?i)href\s*=\s*(?:"([^"]*)"|'([^']*)')"#).unwrap_or_else(|_| unreachable!())
});

const SIDECARS: [(&str, &str); 2] = [(".sha256", "sha256"), (".md5", "md5")];

/// How many redirects a request follows at most.
const MAX_REDIRECTS: usize = 10;

/// Redirects are followed only to the origin (scheme, host and port) the request started at.
/// reqwest's default follows up to 10 redirects anywhere: an archive (or whoever answers for it)
/// could then point a Lambda at 127.0.0.1:9001, the Lambda Runtime API, or at the instance
/// metadata service, and have granary fetch and store what it answers.
pub(crate) fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let same = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error("too many redirects")
        } else if same {
            attempt.follow()
        } else {
            let to = attempt.url().origin().ascii_serialization();
            attempt.error(format!("redirect to another origin ({to}) refused"))
        }
    })
}

#[derive(Clone, Debug)]
pub struct HttpIndexSource {
    client: Client,
    index: Url,
    concurrency: usize,
}

impl HttpIndexSource {
    /// `index_url` is the directory page; `timeout` bounds each request (a body read included).
    pub fn new(
        index_url: &str,
        timeout: Duration,
        concurrency: usize,
    ) -> Result<Self, SourceError> {
        let permanent = |message: String| SourceError::Permanent {
            url: index_url.to_owned(),
            message,
            source: None,
        };
        let mut index = Url::parse(index_url).map_err(|e| permanent(e.to_string()))?;
        if !matches!(index.scheme(), "http" | "https") {
            return Err(permanent(
                "only http and https directory indexes are supported".into(),
            ));
        }
        // Relative links resolve against the directory, so the index URL must end with '/'.
        if !index.path().ends_with('/') {
            index.set_path(&format!("{}/", index.path()));
        }
        let client = Client::builder()
            .timeout(timeout)
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("granary/", env!("CARGO_PKG_VERSION")))
            .redirect(same_origin_redirects())
            .build()
            .map_err(|e| permanent(e.to_string()))?;
        Ok(Self {
            client,
            index,
            concurrency: concurrency.max(1),
        })
    }

    /// The files an index page links to, directly inside the indexed directory.
    pub fn links(&self, html: &str) -> Vec<Url> {
        let mut out: Vec<Url> = HREF
            .captures_iter(html)
            .filter_map(|c| c.get(1).or(c.get(2)))
            .filter_map(|m| self.index.join(m.as_str()).ok())
            .filter(|u| {
                u.query().is_none()
                    && u.origin() == self.index.origin()
                    && u.path().starts_with(self.index.path())
                    && u.path().len() > self.index.path().len()
                    && !u.path()[self.index.path().len()..].contains('/')
            })
            .map(|mut u| {
                u.set_fragment(None);
                u
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }

    async fn head(&self, url: Url) -> Result<SourceFile, SourceError> {
        let resp = self
            .client
            .head(url.clone())
            .send()
            .await
            .map_err(|e| transient(url.as_str(), e))?;
        check_status(url.as_str(), resp.status())?;
        let header = |name: reqwest::header::HeaderName| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let name = file_name(&url);
        Ok(SourceFile {
            url: url.to_string(),
            name,
            size: header(reqwest::header::CONTENT_LENGTH).and_then(|v| v.parse().ok()),
            last_modified: header(reqwest::header::LAST_MODIFIED)
                .and_then(|v| chrono::DateTime::parse_from_rfc2822(&v).ok())
                .map(|t| t.with_timezone(&chrono::Utc)),
            version: header(reqwest::header::ETAG),
            digest: None,
        })
    }

    async fn text(&self, url: &Url) -> Result<String, SourceError> {
        let resp = self
            .client
            .get(url.clone())
            .send()
            .await
            .map_err(|e| transient(url.as_str(), e))?;
        check_status(url.as_str(), resp.status())?;
        resp.text().await.map_err(|e| transient(url.as_str(), e))
    }
}

fn file_name(url: &Url) -> String {
    let last = url.path().rsplit('/').next().unwrap_or_default();
    crate::domain::percent::decode(last)
}

/// reqwest's own message hides the cause ("error decoding response body"): name a timeout as
/// one and append the source chain.
fn transient(url: &str, e: reqwest::Error) -> SourceError {
    let mut message = if e.is_timeout() {
        "timed out".to_owned()
    } else {
        e.to_string()
    };
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        message.push_str(&format!(": {s}"));
        source = s.source();
    }
    SourceError::Transient {
        url: url.to_owned(),
        message,
        source: Some(Box::new(e)),
    }
}

fn check_status(url: &str, status: StatusCode) -> Result<(), SourceError> {
    if status.is_success() {
        return Ok(());
    }
    let message = format!("HTTP {status}");
    if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
        Err(SourceError::Transient {
            url: url.to_owned(),
            message,
            source: None,
        })
    } else {
        Err(SourceError::Permanent {
            url: url.to_owned(),
            message,
            source: None,
        })
    }
}

/// The first hexadecimal word of a sidecar (`<hex>  <name>` or just `<hex>`).
pub fn parse_sidecar(algo: &str, body: &str) -> Option<String> {
    let hex = body.split_whitespace().next()?;
    let want = if algo == "sha256" { 64 } else { 32 };
    (hex.len() == want && hex.chars().all(|c| c.is_ascii_hexdigit()))
        .then(|| format!("{algo}:{}", hex.to_ascii_lowercase()))
}

#[async_trait]
impl Source for HttpIndexSource {
    async fn list(&self) -> Result<Vec<SourceFile>, SourceError> {
        let html = self.text(&self.index).await?;
        let links = self.links(&html);
        let mut sidecars: BTreeMap<String, (&str, Url)> = BTreeMap::new();
        let mut files = Vec::new();
        for url in links {
            let path = url.path().to_owned();
            match SIDECARS.iter().find(|(ext, _)| path.ends_with(ext)) {
                Some((ext, algo)) => {
                    sidecars.insert(path[..path.len() - ext.len()].to_owned(), (algo, url));
                }
                None => files.push(url),
            }
        }
        let sidecars = &sidecars;
        let listed: Vec<Result<SourceFile, SourceError>> = futures::stream::iter(files)
            .map(|url| async move {
                let mut file = self.head(url.clone()).await?;
                if let Some((algo, sidecar)) = sidecars.get(url.path()) {
                    let body = self.text(sidecar).await?;
                    file.digest = parse_sidecar(algo, &body);
                    if file.digest.is_none() {
                        tracing::warn!(sidecar = %sidecar, "digest sidecar holds no digest; ignored");
                    }
                }
                Ok(file)
            })
            .buffered(self.concurrency)
            .collect()
            .await;
        listed.into_iter().collect()
    }

    async fn open(&self, url: &str) -> Result<(SourceStream, Option<u64>), SourceError> {
        get_stream(&self.client, url).await
    }
}

/// A GET whose body is streamed as it arrives, with the length the server announced (the
/// directory source and the ingest queue's depositors share it).
async fn get_stream(
    client: &Client,
    url: &str,
) -> Result<(SourceStream, Option<u64>), SourceError> {
    let resp = client
        .get(url)
        .send()
        .await
        .map_err(|e| transient(url, e))?;
    check_status(url, resp.status())?;
    let len = resp.content_length();
    let owned = url.to_owned();
    let stream = resp
        .bytes_stream()
        .map_err(move |e| transient(&owned, e))
        .boxed();
    Ok((stream, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_files_directly_inside_the_directory() {
        let s = HttpIndexSource::new("http://h/data/2024", Duration::from_secs(1), 1).unwrap();
        let html = r#"<a href="../">up</a> <a href="a.h5">a</a> <A HREF='b%20c.h5'>b</A>
            <a href="sub/">dir</a> <a href="?C=N;O=D">sort</a> <a href="http://other/x.h5">x</a>
            <a href="/data/2024/d.h5#top">d</a> <a href="a.h5">again</a> <a href="sub/e.h5">e</a>"#;
        let got: Vec<String> = s.links(html).iter().map(|u| u.to_string()).collect();
        assert_eq!(
            got,
            vec![
                "http://h/data/2024/a.h5",
                "http://h/data/2024/b%20c.h5",
                "http://h/data/2024/d.h5"
            ]
        );
        assert_eq!(file_name(&s.links(html)[1]), "b c.h5");
    }

    #[test]
    fn sidecars_yield_a_digest_or_nothing() {
        let sha = "A".repeat(64);
        assert_eq!(
            parse_sidecar("sha256", &format!("{sha}  a.h5\n")),
            Some(format!("sha256:{}", "a".repeat(64)))
        );
        assert_eq!(
            parse_sidecar("md5", "d41d8cd98f00b204e9800998ecf8427e"),
            Some("md5:d41d8cd98f00b204e9800998ecf8427e".into())
        );
        assert_eq!(parse_sidecar("md5", "not a digest"), None);
        assert_eq!(parse_sidecar("sha256", ""), None);
    }

    #[test]
    fn only_http_indexes_are_accepted() {
        assert!(HttpIndexSource::new("ftp://h/x/", Duration::from_secs(1), 1).is_err());
        assert!(HttpIndexSource::new("not a url", Duration::from_secs(1), 1).is_err());
    }
}
