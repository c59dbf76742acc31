use super::*;
use crate::adapters::memory::{MemoryQueue, MemorySource};
use crate::adapters::tap::{Call, Fate, Op, Refusal, Tap};
use crate::config::Config;
use crate::ports::SourceFile;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Refuses the first part upload (the attempt fails) and then the first delete of a
/// DOWNLOADING in-flight marker (the failure's record is written, the call after it refused).
#[derive(Default)]
struct RefuseTheUploadThenTheMarker {
    upload: AtomicBool,
    marker: AtomicBool,
}

impl Tap for RefuseTheUploadThenTheMarker {
    fn enter(&self, call: &Call<'_>) -> Result<Fate, Refusal> {
        let refuse = Refusal {
            message: "slow down",
            ambiguous: false,
        };
        let first = |flag: &AtomicBool| !flag.swap(true, Ordering::SeqCst);
        let marker = call.op == Op::StoreDelete && call.target.contains("inflight/DOWNLOADING/");
        if (call.op == Op::StoreUploadPart && first(&self.upload))
            || (marker && self.upload.load(Ordering::SeqCst) && first(&self.marker))
        {
            return Err(refuse);
        }
        Ok(Fate::Make)
    }
}

/// A failed attempt whose record was written before a later call of the same change was
/// refused reads back as "already made": the loop still tries the next attempt. It ended
/// there once, leaving the item DOWNLOADING_FAILED with nothing to move it (found by
/// `granary-local simulate` with an importer under throttling).
#[tokio::test]
async fn a_failure_recorded_before_a_refused_call_is_still_retried_in_the_loop() {
    let body = bytes::Bytes::from_static(b"a file");
    let file = SourceFile {
        url: "https://source.example/one.dat".into(),
        name: "one.dat".into(),
        size: Some(body.len() as u64),
        last_modified: None,
        version: None,
        digest: None,
    };
    let ctx = Ctx {
        source: Some(Arc::new(MemorySource {
            files: vec![(file, body)],
        })),
        import_queue: Some(Arc::new(MemoryQueue::new("import"))),
        ..Ctx::in_memory(Config::for_unit_tests(&[]))
    };
    crate::handlers::importer::discover::discover(&ctx)
        .await
        .unwrap();
    let found = ctx
        .items()
        .find(&crate::domain::item::ItemQuery::default())
        .await
        .unwrap();
    let id = found[0].id.clone();
    let tapped = ctx.tapped(Arc::new(RefuseTheUploadThenTheMarker::default()));
    let state = download(&tapped, &id, false).await.unwrap();
    let record = ctx.items().look(&id).await.unwrap().unwrap();
    assert_eq!((state, record.state), (Downloaded, Downloaded));
    assert_eq!(record.attempts.download, 2, "the second attempt stored it");
}
