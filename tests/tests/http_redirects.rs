//! The HTTP source follows redirects only within the origin it asked: a redirect elsewhere (to
//! another host or port — the Lambda Runtime API on 127.0.0.1, the metadata service) is refused
//! and nothing is fetched from there. Two real servers on loopback; no emulator needed.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use granary::adapters::http::HttpIndexSource;
use granary::ports::Source;
use granary_tests::http_source::{self, Behaviour};
use std::time::Duration;

#[tokio::test]
async fn redirects_are_followed_within_the_origin_only() {
    let archive = http_source::start().await;
    let elsewhere = http_source::start().await;
    elsewhere.archive.put(
        "secret",
        b"what the other host says",
        vec![Behaviour::Serve],
    );
    archive
        .archive
        .put("a.bin", b"granule bytes", vec![Behaviour::Serve]);
    archive.archive.put(
        "moved.bin",
        b"",
        vec![Behaviour::RedirectTo(format!("{}a.bin", archive.index_url))],
    );
    archive.archive.put(
        "away.bin",
        b"",
        vec![Behaviour::RedirectTo(format!(
            "{}secret",
            elsewhere.index_url
        ))],
    );
    let source = HttpIndexSource::new(&archive.index_url, Duration::from_secs(5), 1).unwrap();

    let (mut stream, _) = source
        .open(&format!("{}moved.bin", archive.index_url))
        .await
        .expect("a same-origin redirect is followed");
    let mut body = Vec::new();
    while let Some(chunk) = futures::StreamExt::next(&mut stream).await {
        body.extend_from_slice(&chunk.unwrap());
    }
    assert_eq!(body, b"granule bytes");

    let refused = source.open(&format!("{}away.bin", archive.index_url)).await;
    let Err(e) = refused else {
        panic!("a redirect to another origin was followed")
    };
    assert!(e.to_string().contains("another origin"), "{e}");
    assert_eq!(elsewhere.archive.gets("secret"), 0, "nothing fetched there");
}
