//! An S3 prefix (any bucket the role may read) as an importer source.

use super::describe;
use crate::ports::{Source, SourceError, SourceFile, SourceStream};
use async_trait::async_trait;
use futures::StreamExt;

#[derive(Clone, Debug)]
pub struct S3PrefixSource {
    client: aws_sdk_s3::Client,
    bucket: String,
    prefix: String,
}

impl S3PrefixSource {
    /// From `s3://bucket/prefix/`.
    pub fn from_url(client: aws_sdk_s3::Client, url: &str) -> Result<Self, SourceError> {
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| SourceError::Permanent {
                url: url.to_owned(),
                message: "an S3 source must look like s3://bucket/prefix/".into(),
                source: None,
            })?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(SourceError::Permanent {
                url: url.to_owned(),
                message: "the S3 source names no bucket".into(),
                source: None,
            });
        }
        Ok(Self {
            client,
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
        })
    }

    fn split<'a>(&self, url: &'a str) -> Option<&'a str> {
        url.strip_prefix("s3://")?
            .strip_prefix(self.bucket.as_str())?
            .strip_prefix('/')
    }
}

fn err(url: &str, e: impl std::error::Error + Send + Sync + 'static) -> SourceError {
    SourceError::Transient {
        url: url.to_owned(),
        message: e.to_string(),
        source: Some(Box::new(e)),
    }
}

/// A failed S3 call: the service's code and message, with the SDK's error as the source.
fn sdk_err<E, R>(url: &str, e: aws_sdk_s3::error::SdkError<E, R>) -> SourceError
where
    E: aws_sdk_s3::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let message = describe(&e);
    SourceError::Transient {
        url: url.to_owned(),
        message,
        source: Some(Box::new(e)),
    }
}

#[async_trait]
impl Source for S3PrefixSource {
    async fn list(&self) -> Result<Vec<SourceFile>, SourceError> {
        let url = format!("s3://{}/{}", self.bucket, self.prefix);
        let mut out = Vec::new();
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(&self.prefix)
            .encoding_type(aws_sdk_s3::types::EncodingType::Url)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| sdk_err(&url, e))?;
            let encoded = page.encoding_type == Some(aws_sdk_s3::types::EncodingType::Url);
            for o in page.contents.unwrap_or_default() {
                let Some(key) = o.key else { continue };
                // A depositor's key may hold what XML cannot carry: listed URL-encoded
                // (`S3Store`'s `listed_key`).
                let key = super::s3::listed_key(&self.prefix, encoded, key).map_err(|e| {
                    SourceError::Permanent {
                        url: url.clone(),
                        message: e.to_string(),
                        source: Some(Box::new(e)),
                    }
                })?;
                if key.ends_with('/') {
                    continue;
                }
                out.push(SourceFile {
                    url: format!("s3://{}/{key}", self.bucket),
                    name: key.rsplit('/').next().unwrap_or(&key).to_owned(),
                    size: o.size.and_then(|s| u64::try_from(s).ok()),
                    last_modified: o
                        .last_modified
                        .and_then(|t| chrono::DateTime::from_timestamp(t.secs(), t.subsec_nanos())),
                    version: o.e_tag,
                    digest: None,
                });
            }
        }
        Ok(out)
    }

    async fn open(&self, url: &str) -> Result<(SourceStream, Option<u64>), SourceError> {
        let key = self.split(url).ok_or_else(|| SourceError::Permanent {
            url: url.to_owned(),
            message: format!("not an object of s3://{}/", self.bucket),
            source: None,
        })?;
        let out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| sdk_err(url, e))?;
        let len = out.content_length.and_then(|l| u64::try_from(l).ok());
        let owned = url.to_owned();
        let stream = futures::stream::unfold(Some(out.body), move |body| {
            let owned = owned.clone();
            async move {
                let mut body = body?;
                match body.next().await {
                    None => None,
                    Some(Ok(b)) => Some((Ok(b), Some(body))),
                    Some(Err(e)) => Some((Err(err(&owned, e)), None)),
                }
            }
        })
        .boxed();
        Ok((stream, len))
    }
}
