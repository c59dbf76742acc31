use super::describe;
use crate::ports::{
    ListPage, ObjectMeta, ObjectStore, PutCondition, StoreError, StoredObject, Upload,
    LIST_PAGE_KEYS,
};
use async_trait::async_trait;
use aws_sdk_s3::error::SdkError;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::EncodingType;
use bytes::Bytes;
use std::ops::Range;

mod upload;
use upload::S3Upload;

/// S3 bucket as the object store. Conditional writes use If-None-Match / If-Match; S3 answers a
/// lost condition with 412 (or 409 for a concurrent conditional write), both mapped to Conflict.
#[derive(Clone, Debug)]
pub struct S3Store {
    client: aws_sdk_s3::Client,
    bucket: String,
    /// The storage class every write asks for (`None`: the bucket's default).
    storage_class: Option<aws_sdk_s3::types::StorageClass>,
    /// Objects larger than this are copied part by part ([`MAX_SINGLE_COPY`]).
    max_single_copy: u64,
    /// The smallest part of such a copy.
    copy_part: u64,
}

/// The largest object one CopyObject copies (S3 API reference, CopyObject: a copy "up to 5 GB
/// in size in a single atomic action"; larger objects are copied with UploadPartCopy).
pub const MAX_SINGLE_COPY: u64 = 5 * 1024 * 1024 * 1024;
/// A part of a multipart copy: big enough that a 5 TB object needs under S3's 10,000 parts
/// only when it must (the part grows to `size / 10,000` beyond that).
const COPY_PART: u64 = 512 * 1024 * 1024;
/// S3's limit on the parts of one multipart upload.
const MAX_PARTS: u64 = 10_000;

impl S3Store {
    /// Every page of a ListObjectsV2 of `prefix` (grouped at `delimiter`, when given), each
    /// handed to `take` in order: the one paginator `list` and `list_folders` share. Asked with
    /// `encoding-type=url` (see [`listed_key`]).
    async fn each_page(
        &self,
        prefix: &str,
        delimiter: Option<&str>,
        mut take: impl FnMut(
            aws_sdk_s3::operation::list_objects_v2::ListObjectsV2Output,
        ) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .set_delimiter(delimiter.map(str::to_owned))
            .encoding_type(EncodingType::Url)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            take(page.map_err(|e| StoreError::backend(prefix, describe(&e)).with_source(e))?)?;
        }
        Ok(())
    }

    pub fn new(client: aws_sdk_s3::Client, bucket: impl Into<String>) -> Self {
        Self {
            client,
            bucket: bucket.into(),
            storage_class: None,
            max_single_copy: MAX_SINGLE_COPY,
            copy_part: COPY_PART,
        }
    }

    /// Copies objects over `max_single` bytes in parts of at least `part` (S3 accepts parts of
    /// 5 MiB and more): the emulator tests copy part by part without 5 GB objects.
    pub fn with_copy_limits(mut self, max_single: u64, part: u64) -> Self {
        self.max_single_copy = max_single;
        self.copy_part = part;
        self
    }

    /// `from` (of `size` bytes, at `source`) copied to `to` with UploadPartCopy; the upload is
    /// aborted if a part fails.
    async fn copy_in_parts(
        &self,
        source: &str,
        from: &str,
        to: &str,
        size: u64,
    ) -> Result<(), StoreError> {
        use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
        let err = |e: &dyn std::fmt::Display| StoreError::backend(to, e);
        let upload = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(to)
            .set_storage_class(self.storage_class.clone())
            .send()
            .await
            .map_err(|e| err(&describe(&e)))?;
        let id = upload.upload_id.ok_or_else(|| {
            StoreError::backend(to, "CreateMultipartUpload returned no upload id")
        })?;
        let part = self.copy_part.max(size.div_ceil(MAX_PARTS));
        let mut parts = Vec::new();
        let mut start = 0u64;
        let mut number = 1i32;
        let copied: Result<(), StoreError> = async {
            while start < size {
                let end = (start + part).min(size) - 1;
                let out = self
                    .client
                    .upload_part_copy()
                    .bucket(&self.bucket)
                    .key(to)
                    .upload_id(&id)
                    .part_number(number)
                    .copy_source(source)
                    .copy_source_range(format!("bytes={start}-{end}"))
                    .send()
                    .await
                    .map_err(|e| match http_status(&e) {
                        Some(404) => StoreError::NotFound {
                            key: from.to_owned(),
                        },
                        _ => err(&describe(&e)),
                    })?;
                let etag = out.copy_part_result.and_then(|r| r.e_tag).ok_or_else(|| {
                    StoreError::backend(to, format!("UploadPartCopy {number} returned no ETag"))
                })?;
                parts.push(
                    CompletedPart::builder()
                        .e_tag(etag)
                        .part_number(number)
                        .build(),
                );
                start = end + 1;
                number += 1;
            }
            self.client
                .complete_multipart_upload()
                .bucket(&self.bucket)
                .key(to)
                .upload_id(&id)
                .multipart_upload(
                    CompletedMultipartUpload::builder()
                        .set_parts(Some(parts))
                        .build(),
                )
                .send()
                .await
                .map(|_| ())
                .map_err(|e| err(&describe(&e)))
        }
        .await;
        if copied.is_err() {
            // A lifecycle rule on the bucket frees parts of abandoned uploads (see the template).
            let _ = self
                .client
                .abort_multipart_upload()
                .bucket(&self.bucket)
                .key(to)
                .upload_id(&id)
                .send()
                .await;
        }
        copied
    }

    /// Every object this store writes goes to `class` (`STANDARD`, `GLACIER_IR`, `DEEP_ARCHIVE`,
    /// … as S3 spells them).
    pub fn with_storage_class(mut self, class: &str) -> Self {
        self.storage_class = Some(aws_sdk_s3::types::StorageClass::from(class));
        self
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }
}

/// A key (or common prefix) as a page listed it. granary lists with `encoding-type=url`: a key
/// may hold characters XML 1.0 cannot carry (bytes 0 to 31), and without the encoding one such
/// key makes every listing of its prefix unreadable ("ListObjectsV2", Amazon S3 API Reference,
/// `EncodingType`: Key, Prefix, Delimiter and StartAfter come back encoded; CommonPrefixes do
/// too). The SDK neither asks for it nor decodes it. Decoded only when the page says it is
/// encoded: a store that ignores the parameter answers raw keys, and `a+b` stays `a+b`.
pub(crate) fn listed_key(prefix: &str, encoded: bool, key: String) -> Result<String, StoreError> {
    if !encoded {
        return Ok(key);
    }
    crate::domain::percent::decode_listed(&key).map_err(|e| {
        StoreError::backend(
            prefix,
            format!("listed key {key:?} is not URL-encoded UTF-8: {e}"),
        )
    })
}

/// Whether a page's keys are URL-encoded (it says so).
fn url_encoded(encoding: Option<&EncodingType>) -> bool {
    encoding == Some(&EncodingType::Url)
}

/// A listed object's key, size and time (`None` for an entry without a key).
fn meta(
    prefix: &str,
    encoded: bool,
    o: aws_sdk_s3::types::Object,
) -> Result<Option<ObjectMeta>, StoreError> {
    let last_modified = o
        .last_modified
        .and_then(|t| chrono::DateTime::from_timestamp(t.secs(), t.subsec_nanos()));
    let Some(key) = o.key else {
        return Ok(None);
    };
    Ok(Some(ObjectMeta {
        key: listed_key(prefix, encoded, key)?,
        size: o.size.unwrap_or(0).max(0) as u64,
        last_modified,
        etag: o.e_tag,
    }))
}

/// A page's objects, their keys decoded.
fn page_objects(
    prefix: &str,
    encoding: Option<&EncodingType>,
    contents: Option<Vec<aws_sdk_s3::types::Object>>,
) -> Result<Vec<ObjectMeta>, StoreError> {
    let encoded = url_encoded(encoding);
    let mut out = Vec::new();
    for o in contents.unwrap_or_default() {
        out.extend(meta(prefix, encoded, o)?);
    }
    Ok(out)
}

fn http_status<E, R: HasStatus>(e: &SdkError<E, R>) -> Option<u16> {
    e.raw_response().map(|r| r.status_code())
}

trait HasStatus {
    fn status_code(&self) -> u16;
}

impl HasStatus for aws_sdk_s3::config::http::HttpResponse {
    fn status_code(&self) -> u16 {
        self.status().as_u16()
    }
}

async fn collect(key: &str, body: ByteStream) -> Result<Bytes, StoreError> {
    body.collect()
        .await
        .map(|b| b.into_bytes())
        .map_err(|e| StoreError::backend(key, e))
}

#[async_trait]
impl ObjectStore for S3Store {
    async fn get(&self, key: &str) -> Result<Option<StoredObject>, StoreError> {
        let out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await;
        match out {
            Ok(o) => {
                let etag = o.e_tag.clone().unwrap_or_default();
                let body = collect(key, o.body).await?;
                Ok(Some(StoredObject { body, etag }))
            }
            Err(e) if http_status(&e) == Some(404) => Ok(None),
            Err(e) => Err(StoreError::backend(key, describe(&e)).with_source(e)),
        }
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, StoreError> {
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        let out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .range(format!("bytes={}-{}", range.start, range.end - 1))
            .send()
            .await;
        match out {
            Ok(o) => collect(key, o.body).await,
            Err(e) if http_status(&e) == Some(404) => Err(StoreError::NotFound {
                key: key.to_owned(),
            }),
            Err(e) => Err(StoreError::backend(key, describe(&e)).with_source(e)),
        }
    }

    async fn get_suffix(&self, key: &str, len: u64) -> Result<(Bytes, u64), StoreError> {
        let out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .range(format!("bytes=-{len}"))
            .send()
            .await;
        match out {
            Ok(o) => {
                // "bytes 100-199/200" when ranged; absent when the server sent the whole object.
                let total = o
                    .content_range
                    .as_deref()
                    .and_then(|r| r.rsplit('/').next())
                    .and_then(|t| t.parse::<u64>().ok());
                let body = collect(key, o.body).await?;
                let total = total.unwrap_or(body.len() as u64);
                // An emulator that ignores suffix ranges returns everything: keep only the suffix.
                let body = if body.len() as u64 > len {
                    body.slice(body.len() - len as usize..)
                } else {
                    body
                };
                Ok((body, total))
            }
            Err(e) if http_status(&e) == Some(404) => Err(StoreError::NotFound {
                key: key.to_owned(),
            }),
            // An empty object cannot satisfy a range.
            Err(e) if http_status(&e) == Some(416) => Ok((Bytes::new(), 0)),
            Err(e) => Err(StoreError::backend(key, describe(&e)).with_source(e)),
        }
    }

    async fn put(
        &self,
        key: &str,
        body: Bytes,
        condition: PutCondition,
    ) -> Result<String, StoreError> {
        let mut req = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .set_storage_class(self.storage_class.clone())
            .key(key)
            .content_type("application/json")
            .body(ByteStream::from(body));
        req = match condition {
            PutCondition::Overwrite => req,
            PutCondition::IfAbsent => req.if_none_match("*"),
            PutCondition::IfMatch(etag) => req.if_match(etag),
        };
        match req.send().await {
            Ok(o) => Ok(o.e_tag.unwrap_or_default()),
            Err(e) if matches!(http_status(&e), Some(412 | 409)) => Err(StoreError::Conflict {
                key: key.to_owned(),
            }),
            // If-Match on a key with no object: S3 answers 404.
            Err(e) if http_status(&e) == Some(404) => Err(StoreError::NotFound {
                key: key.to_owned(),
            }),
            Err(e) => Err(StoreError::backend(key, describe(&e)).with_source(e)),
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StoreError> {
        let mut out = Vec::new();
        self.each_page(prefix, None, |page| {
            out.extend(page_objects(
                prefix,
                page.encoding_type.as_ref(),
                page.contents,
            )?);
            Ok(())
        })
        .await?;
        Ok(out)
    }

    async fn list_page(&self, prefix: &str, start_after: &str) -> Result<ListPage, StoreError> {
        let page = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .set_start_after(Some(start_after.to_owned()).filter(|s| !s.is_empty()))
            .max_keys(LIST_PAGE_KEYS as i32)
            .encoding_type(EncodingType::Url)
            .send()
            .await
            .map_err(|e| StoreError::backend(prefix, describe(&e)).with_source(e))?;
        let objects = page_objects(prefix, page.encoding_type.as_ref(), page.contents)?;
        // A full page without IsTruncated (a store that leaves it out) is taken as cut short:
        // the caller then looks further instead of judging the keys past it absent.
        let truncated = page.is_truncated.unwrap_or(objects.len() >= LIST_PAGE_KEYS);
        Ok(ListPage { objects, truncated })
    }

    async fn list_folders(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let mut out = Vec::new();
        self.each_page(prefix, Some("/"), |page| {
            let encoded = url_encoded(page.encoding_type.as_ref());
            for folder in page.common_prefixes.unwrap_or_default() {
                if let Some(p) = folder.prefix {
                    out.push(listed_key(prefix, encoded, p)?);
                }
            }
            Ok(())
        })
        .await?;
        Ok(out)
    }

    async fn copy(&self, from: &str, to: &str) -> Result<(), StoreError> {
        let source = format!(
            "{}/{}",
            self.bucket,
            crate::domain::percent::encode(from, |b| {
                crate::domain::percent::unreserved(b) || b == b'/'
            })
        );
        // Its size decides how: one CopyObject, or part by part past S3's limit for one.
        let size = match self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(from)
            .send()
            .await
        {
            Ok(h) => h.content_length.unwrap_or(0).max(0) as u64,
            Err(e) if http_status(&e) == Some(404) => {
                return Err(StoreError::NotFound {
                    key: from.to_owned(),
                })
            }
            Err(e) => return Err(StoreError::backend(from, describe(&e)).with_source(e)),
        };
        if size > self.max_single_copy {
            return self.copy_in_parts(&source, from, to, size).await;
        }
        self.client
            .copy_object()
            .bucket(&self.bucket)
            .set_storage_class(self.storage_class.clone())
            .key(to)
            // CopySource is URL-encoded (S3 API reference, CopyObject: "The value must be
            // URL-encoded"): a key with a space or a `+` names another object otherwise.
            .copy_source(&source)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| match http_status(&e) {
                // NoSuchKey: the source is gone.
                Some(404) => StoreError::NotFound {
                    key: from.to_owned(),
                },
                _ => StoreError::backend(from, describe(&e)).with_source(e),
            })
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| StoreError::backend(key, describe(&e)).with_source(e))
    }

    async fn begin_upload<'a>(&'a self, key: &str) -> Result<Box<dyn Upload + 'a>, StoreError> {
        Ok(Box::new(S3Upload::new(self, key)))
    }
}
