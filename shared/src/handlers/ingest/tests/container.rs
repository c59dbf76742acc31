//! Container deposits (seed 004): one zip is the object; the download stores it and expands it
//! into its files, which processing, recording and the catalog then see as any deposit's files.
//! A zip entry that would leave the object's folder, a payload that is not a zip, and a zip
//! over the configured size fail the job with why.

use super::*;
use std::io::Write;

/// A zip of `entries` (name, body); a name ending in `/` is a directory.
fn zip_of(entries: &[(&str, &str)]) -> Bytes {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, body) in entries {
        if name.ends_with('/') {
            zip.add_directory(*name, options).unwrap();
        } else {
            zip.start_file(*name, options).unwrap();
            zip.write_all(body.as_bytes()).unwrap();
        }
    }
    Bytes::from(zip.finish().unwrap().into_inner())
}

/// A zip whose two entries have one name: written as `a.txt` and `b.txt`, then the second
/// renamed in its local header and its central directory entry (a writer refuses the name
/// twice; a depositor's tool may not).
fn named_twice() -> Bytes {
    let zip = zip_of(&[("a.txt", "first"), ("b.txt", "second")]);
    let mut bytes = zip.to_vec();
    let mut at = 0;
    while let Some(i) = bytes[at..].windows(5).position(|w| w == b"b.txt") {
        bytes[at + i..at + i + 5].copy_from_slice(b"a.txt");
        at += i + 5;
    }
    Bytes::from(bytes)
}

/// `n` hexadecimal digits no compressor shrinks much (a linear congruential sequence).
fn noise(n: usize) -> String {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            char::from_digit(((x >> 59) & 0xf) as u32, 16).unwrap_or('0')
        })
        .collect()
}

async fn deposit(w: &World, url: &str) -> BatchId {
    let submission = crate::domain::ingest::record::Submission {
        collection: "coll".into(),
        manifest_url: url.into(),
        kind: ManifestKind::Container,
        priority: 5,
        callback: None,
        profile: None,
        submitter: "depositor".into(),
        deposit: Default::default(),
    };
    submit(&w.ingest_ctx, submission, Utc::now())
        .await
        .unwrap()
        .id
}

#[tokio::test]
async fn a_zip_is_expanded_into_the_objects_files_and_processed_as_one_object() {
    let w = world(IngestSettings::default());
    let url = "http://archive/scans.zip";
    w.remote.serve(
        url,
        zip_of(&[
            ("a.txt", "alpha"),
            ("pages/", ""),
            ("pages/b.txt", "bravo!"),
        ]),
    );
    let id = deposit(&w, url).await;
    // Up to processing: the stored files are the zip's, and the zip itself is gone.
    for _ in 0..3 {
        tick(&w.ingest_ctx, Utc::now()).await.unwrap();
    }
    let job = w.job(&id.job(1)).await;
    assert_eq!(job.state, JobState::Processing, "{}", job.reason);
    let names: Vec<(&str, u64)> = job
        .stored
        .iter()
        .map(|f| (f.name.as_str(), f.size))
        .collect();
    assert_eq!(names, vec![("a.txt", 5), ("pages/b.txt", 6)]);
    use sha2::Digest;
    assert_eq!(
        job.stored[0].sha256,
        format!("sha256:{:x}", sha2::Sha256::digest(b"alpha"))
    );
    let folder = w.ingest_ctx.ingest().keys.objects(&id.job(1));
    let mut keys: Vec<String> = w
        .store
        .list(&folder)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.key[folder.len()..].to_owned())
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        vec!["a.txt", "pages/b.txt"],
        "the zip is not left beside its files"
    );
    assert_eq!(job.space_needed, 11);
    // One processing job, then recorded, announced and cleaned up like any object.
    w.run(|_| true).await;
    assert_eq!(w.jobs.submitted().len(), 1);
    assert_eq!(w.batch(&id).await.state, BatchState::Deleted);
    assert_eq!(w.job(&id.job(1)).await.stored.len(), 2);
}

#[tokio::test]
async fn an_unsafe_entry_a_payload_that_is_no_zip_and_a_zip_or_its_content_too_large_fail_their_jobs(
) {
    let w = world(IngestSettings {
        max_container_bytes: 2_000,
        ..IngestSettings::default()
    });
    let cases = [
        (
            "http://archive/slip.zip",
            zip_of(&[("../evil.txt", "x")]),
            "outside the object",
        ),
        (
            "http://archive/page.zip",
            Bytes::from_static(b"<html>503</html>"),
            "not a readable zip",
        ),
        (
            "http://archive/big.zip",
            zip_of(&[("big.bin", &noise(8_000))]),
            "GRANARY_INGEST_MAX_CONTAINER_BYTES",
        ),
        (
            "http://archive/bomb.zip",
            zip_of(&[("zeros.bin", &"0".repeat(50_000))]),
            "expanded content",
        ),
        (
            "http://archive/over.zip",
            zip_of(&[(".container/over.zip", "x")]),
            "outside the object",
        ),
        (
            "http://archive/empty.zip",
            zip_of(&[("only/", "")]),
            "holds no files",
        ),
        (
            "http://archive/twice.zip",
            named_twice(),
            "a name is used twice",
        ),
        (
            "http://archive/forged.zip",
            zip_of(&[("log\nforged line.txt", "x")]),
            "outside the object",
        ),
    ];
    let mut ids = Vec::new();
    for (url, body, _) in &cases {
        w.remote.serve(url, body.clone());
        ids.push(deposit(&w, url).await);
    }
    w.run(|_| true).await;
    assert!(w.jobs.submitted().is_empty(), "nothing reaches processing");
    for (id, (url, _, why)) in ids.iter().zip(&cases) {
        let job = w.job(&id.job(1)).await;
        assert_eq!(job.state, JobState::Failed, "{url}");
        assert!(job.reason.contains(why), "{url}: {}", job.reason);
        assert!(
            w.store
                .list(&w.ingest_ctx.ingest().keys.objects(&id.job(1)))
                .await
                .unwrap()
                .iter()
                .all(|m| !m.key.contains("evil")),
            "nothing is written outside or for a failed entry"
        );
    }
}

/// A zip of more entries than a container may hold fails its job before anything is written,
/// whatever their size: each entry would cost a PUT.
#[tokio::test]
async fn a_zip_of_too_many_entries_fails_its_job_before_anything_is_written() {
    use crate::handlers::ingest::container::MAX_CONTAINER_ENTRIES;
    let w = world(IngestSettings::default());
    let names: Vec<String> = (0..=MAX_CONTAINER_ENTRIES)
        .map(|i| format!("f{i}"))
        .collect();
    let entries: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "")).collect();
    let url = "http://archive/crowd.zip";
    w.remote.serve(url, zip_of(&entries));
    let id = deposit(&w, url).await;
    w.run(|_| true).await;
    let job = w.job(&id.job(1)).await;
    assert_eq!(job.state, JobState::Failed);
    assert!(job.reason.contains("entries or more"), "{}", job.reason);
    let folder = w.ingest_ctx.ingest().keys.objects(&id.job(1));
    let written = w.store.list(&folder).await.unwrap();
    assert!(
        written.iter().all(|m| !m.key.contains("/f")),
        "{} entries written",
        written.len()
    );
}
