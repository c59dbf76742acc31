//! granary's SDK retry policy, checked against the real AWS SDK: a loopback HTTP server answers
//! every request with a chosen status and counts how many requests the SDK sent.
//! SubmitJob must be sent exactly once whatever happens (it has no idempotency token); other calls
//! are retried up to `SDK_MAX_ATTEMPTS` on a 5xx or throttling answer.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use granary::adapters::aws::{load_sdk_config_for, AwsClients, BatchJobRunner, SDK_MAX_ATTEMPTS};
use granary::ports::{JobRequest, JobRunner};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Answers every request with `status` and an AWS JSON error body; returns its URL and a counter.
async fn server(status: u16, error_type: &'static str) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let mut got = Vec::new();
                // Read the headers and the announced body.
                loop {
                    let Ok(n) = sock.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&got).to_string();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text[..end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if got.len() >= end + 4 + len {
                            break;
                        }
                    }
                }
                seen.fetch_add(1, Ordering::SeqCst);
                let body = format!(r#"{{"__type":"{error_type}","message":"test"}}"#);
                let reply = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\nx-amzn-errortype: {error_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(reply.as_bytes()).await;
            });
        }
    });
    (url, count)
}

fn request() -> JobRequest {
    JobRequest {
        job_name: "g-a1-x".into(),
        environment: BTreeMap::new(),
        parameters: BTreeMap::new(),
        array_size: None,
        queue: None,
        memory_mib: None,
    }
}

async fn runner(url: &str) -> BatchJobRunner {
    let clients = AwsClients::new(&load_sdk_config_for(url).await);
    BatchJobRunner::new(clients.batch, "q", "d")
}

#[tokio::test]
async fn submit_job_is_sent_once_on_a_server_error_and_the_error_is_ambiguous() {
    let (url, count) = server(500, "ServerException").await;
    let err = runner(&url).await.submit(request()).await.unwrap_err();
    assert_eq!(
        count.load(Ordering::SeqCst),
        1,
        "SubmitJob must not be retried by the SDK"
    );
    assert!(
        err.may_have_taken_effect,
        "a 5xx may have created the job: {err}"
    );
}

#[tokio::test]
async fn submit_job_is_sent_once_when_throttled_and_the_error_is_a_refusal() {
    let (url, count) = server(429, "TooManyRequestsException").await;
    let err = runner(&url).await.submit(request()).await.unwrap_err();
    assert_eq!(count.load(Ordering::SeqCst), 1);
    assert!(
        !err.may_have_taken_effect,
        "a throttled call did nothing: {err}"
    );
}

#[tokio::test]
async fn other_calls_are_retried_by_the_policy() {
    let (url, count) = server(500, "ServerException").await;
    let err = runner(&url).await.find_by_name("g-a1-x").await.unwrap_err();
    assert_eq!(
        count.load(Ordering::SeqCst),
        SDK_MAX_ATTEMPTS as usize,
        "ListJobs is retried: {err}"
    );
    let (url, count) = server(400, "ClientException").await;
    runner(&url).await.find_by_name("g-a1-x").await.unwrap_err();
    assert_eq!(count.load(Ordering::SeqCst), 1, "a 4xx is never retried");
}
