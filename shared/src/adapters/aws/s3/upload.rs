//! A multipart upload, started only when a second part arrives.

use super::*;

/// A multipart upload, started only when a second part arrives: a file that fits in one part is
/// one PutObject.
pub(super) struct S3Upload<'a> {
    store: &'a S3Store,
    key: String,
    first: Option<Bytes>,
    multipart: Option<(String, Vec<aws_sdk_s3::types::CompletedPart>)>,
    size: u64,
}

impl<'a> S3Upload<'a> {
    /// Nothing sent yet: the first part is held until a second shows whether one PUT will do.
    pub(super) fn new(store: &'a S3Store, key: &str) -> Self {
        Self {
            store,
            key: key.to_owned(),
            first: None,
            multipart: None,
            size: 0,
        }
    }
    async fn upload_part(&mut self, part: Bytes) -> Result<(), StoreError> {
        let s = self.store;
        if self.multipart.is_none() {
            let out = s
                .client
                .create_multipart_upload()
                .bucket(&s.bucket)
                .set_storage_class(s.storage_class.clone())
                .key(&self.key)
                .content_type("application/octet-stream")
                .send()
                .await
                .map_err(|e| StoreError::backend(&self.key, describe(&e)).with_source(e))?;
            let id = out.upload_id.ok_or_else(|| {
                StoreError::backend(&self.key, "CreateMultipartUpload returned no upload id")
            })?;
            self.multipart = Some((id, Vec::new()));
        }
        let Some((id, parts)) = self.multipart.as_mut() else {
            return Err(StoreError::backend(
                &self.key,
                "multipart upload not started",
            ));
        };
        let number = parts.len() as i32 + 1;
        let out = s
            .client
            .upload_part()
            .bucket(&s.bucket)
            .key(&self.key)
            .upload_id(id.as_str())
            .part_number(number)
            .body(ByteStream::from(part))
            .send()
            .await
            .map_err(|e| StoreError::backend(&self.key, describe(&e)).with_source(e))?;
        parts.push(
            aws_sdk_s3::types::CompletedPart::builder()
                .part_number(number)
                .set_e_tag(out.e_tag)
                .build(),
        );
        Ok(())
    }
}

#[async_trait]
impl Upload for S3Upload<'_> {
    async fn write_part(&mut self, part: Bytes) -> Result<(), StoreError> {
        self.size += part.len() as u64;
        if let Some(first) = self.first.take() {
            self.upload_part(first).await?;
        }
        if self.multipart.is_some() {
            self.upload_part(part).await
        } else {
            self.first = Some(part);
            Ok(())
        }
    }

    async fn finish(mut self: Box<Self>) -> Result<u64, StoreError> {
        let s = self.store;
        match self.multipart.take() {
            None => {
                let body = self.first.take().unwrap_or_default();
                s.client
                    .put_object()
                    .bucket(&s.bucket)
                    .set_storage_class(s.storage_class.clone())
                    .key(&self.key)
                    .content_type("application/octet-stream")
                    .body(ByteStream::from(body))
                    .send()
                    .await
                    .map_err(|e| StoreError::backend(&self.key, describe(&e)).with_source(e))?;
            }
            Some((id, parts)) => {
                s.client
                    .complete_multipart_upload()
                    .bucket(&s.bucket)
                    .key(&self.key)
                    .upload_id(id)
                    .multipart_upload(
                        aws_sdk_s3::types::CompletedMultipartUpload::builder()
                            .set_parts(Some(parts))
                            .build(),
                    )
                    .send()
                    .await
                    .map_err(|e| StoreError::backend(&self.key, describe(&e)).with_source(e))?;
            }
        }
        Ok(self.size)
    }

    async fn abort(mut self: Box<Self>) {
        if let Some((id, _)) = self.multipart.take() {
            let s = self.store;
            if let Err(e) = s
                .client
                .abort_multipart_upload()
                .bucket(&s.bucket)
                .key(&self.key)
                .upload_id(id)
                .send()
                .await
            {
                // A lifecycle rule on the bucket frees parts of abandoned uploads (see the template).
                tracing::warn!(key = self.key, error = %describe(&e), "aborting a multipart upload failed");
            }
        }
    }
}
