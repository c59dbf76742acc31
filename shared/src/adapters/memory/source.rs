use crate::ports::{Source, SourceError, SourceFile, SourceStream};
use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;

/// In-memory source: a fixed list of files and their bytes.
#[derive(Debug, Default, Clone)]
pub struct MemorySource {
    pub files: Vec<(SourceFile, Bytes)>,
}

#[async_trait]
impl Source for MemorySource {
    async fn list(&self) -> Result<Vec<SourceFile>, SourceError> {
        Ok(self.files.iter().map(|(f, _)| f.clone()).collect())
    }

    async fn open(&self, url: &str) -> Result<(SourceStream, Option<u64>), SourceError> {
        let (_, body) = self
            .files
            .iter()
            .find(|(f, _)| f.url == url)
            .ok_or_else(|| SourceError::Permanent {
                url: url.to_owned(),
                message: "no such file".into(),
                source: None,
            })?;
        let len = body.len() as u64;
        Ok((futures::stream::iter([Ok(body.clone())]).boxed(), Some(len)))
    }
}
