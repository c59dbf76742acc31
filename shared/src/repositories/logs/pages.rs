//! The logs a page at a time (one LIST of up to 1,000 keys, then their GETs, 32 at a time), so a
//! campaign of millions of logs is read in the memory of one page: `granary audit`.

use super::super::json::{read_json, RepositoryError};
use crate::domain::layout::logs::{LogKey, LogRecord};
use crate::ports::ObjectStore;
use futures::StreamExt;

/// Reads at once, as `scan_log_facts` does.
const READS_AT_ONCE: usize = 32;

pub struct LogPages<'a> {
    store: &'a dyn ObjectStore,
    prefix: &'a str,
    after: String,
    done: bool,
    /// Objects under the prefix that are not granary logs (skipped).
    pub foreign: u64,
}

impl<'a> LogPages<'a> {
    pub fn new(store: &'a dyn ObjectStore, prefix: &'a str) -> Self {
        Self {
            store,
            prefix,
            after: String::new(),
            done: false,
            foreign: 0,
        }
    }

    /// The next page's logs, read; `None` once the prefix is done. A log deleted between its
    /// LIST and its GET is left out (it is no longer there to say anything).
    pub async fn next_page(&mut self) -> Result<Option<Vec<(LogKey, LogRecord)>>, RepositoryError> {
        if self.done {
            return Ok(None);
        }
        let page = self.store.list_page(self.prefix, &self.after).await?;
        self.done = !page.truncated || page.objects.is_empty();
        if let Some(last) = page.objects.last() {
            self.after = last.key.clone();
        }
        let mut keyed = Vec::with_capacity(page.objects.len());
        for meta in page.objects {
            match LogKey::parse(self.prefix, &meta.key) {
                Ok(key) => keyed.push((meta.key, key)),
                Err(_) => self.foreign += 1,
            }
        }
        let store = self.store;
        let mut reads = futures::stream::iter(keyed)
            .map(|(raw, key)| async move { (key, read_json::<LogRecord>(store, &raw).await) })
            .buffered(READS_AT_ONCE);
        let mut out = Vec::new();
        while let Some((key, record)) = reads.next().await {
            if let Some(r) = record? {
                out.push((key, r.value));
            }
        }
        Ok(Some(out))
    }
}
