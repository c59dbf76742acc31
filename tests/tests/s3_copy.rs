//! granary's S3 adapter copying on the emulator: a key with spaces and a `+` (CopySource must be
//! URL-encoded, or it names another object), a missing source (NotFound, not a backend error), and
//! an object past the single-copy limit copied part by part (UploadPartCopy) — with the limit
//! lowered, so the test needs 11 MiB, not 5 GB.

use bytes::Bytes;
use granary::adapters::aws::S3Store;
use granary::ports::{ObjectStore, PutCondition, StoreError};
use granary_tests::*;

#[tokio::test]
async fn copies_awkward_keys_reports_a_missing_source_and_copies_large_objects_in_parts() {
    let s = stack("s3copy", 1, &[]).await;
    const MIB: u64 = 1024 * 1024;
    let store =
        S3Store::new(s.clients.s3.clone(), &s.stack.bucket).with_copy_limits(10 * MIB, 5 * MIB);

    let awkward = "in/sheet 1+2 (ü).tif";
    store
        .put(
            awkward,
            Bytes::from_static(b"awkward"),
            PutCondition::Overwrite,
        )
        .await
        .unwrap();
    store.copy(awkward, "out/sheet 1+2 (ü).tif").await.unwrap();
    let copied = store.get("out/sheet 1+2 (ü).tif").await.unwrap().unwrap();
    assert_eq!(&copied.body[..], b"awkward");

    let e = store.copy("in/nothing-here", "out/x").await.unwrap_err();
    assert!(matches!(e, StoreError::NotFound { .. }), "{e}");

    // 11 MiB and a little: parts of 5, 5 and 1 MiB and a bit.
    let big: Vec<u8> = (0..(11 * MIB + 123)).map(|i| (i % 251) as u8).collect();
    store
        .put(
            "in/big.bin",
            Bytes::from(big.clone()),
            PutCondition::Overwrite,
        )
        .await
        .unwrap();
    store.copy("in/big.bin", "out/big.bin").await.unwrap();
    let copied = store.get("out/big.bin").await.unwrap().unwrap();
    assert_eq!(copied.body.len(), big.len());
    assert!(
        copied.body[..] == big[..],
        "the parts are the object, in order"
    );
    // A multipart object's ETag says how many parts made it.
    assert!(
        copied.etag.trim_matches('"').ends_with("-3"),
        "{}",
        copied.etag
    );
}
