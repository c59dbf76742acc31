//! A real HTTP server on loopback that plays a data archive's open directory: an index page of
//! links, files with Content-Length / Last-Modified / ETag on HEAD, and misbehaviour on demand
//! (5xx, slow bodies, bodies cut short). Plain tokio sockets, HTTP/1.1, one request per connection.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How a file answers each GET, in order; the last behaviour repeats.
#[derive(Debug, Clone)]
pub enum Behaviour {
    Serve,
    /// 500 Internal Server Error.
    Fail,
    /// Headers at once, body after this long.
    Slow(Duration),
    /// Announces the full length, sends this many bytes, closes.
    Truncate(usize),
    /// 302 Found to this URL.
    RedirectTo(String),
}

#[derive(Debug, Clone)]
struct File {
    body: Vec<u8>,
    plan: Vec<Behaviour>,
    gets: usize,
}

#[derive(Clone, Default)]
pub struct Archive {
    files: Arc<Mutex<BTreeMap<String, File>>>,
}

pub struct ArchiveServer {
    pub archive: Archive,
    /// The directory index URL, ending in `/`.
    pub index_url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ArchiveServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Archive {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, File>> {
        self.files.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds (or replaces) `name` in the directory.
    pub fn put(&self, name: &str, body: &[u8], plan: Vec<Behaviour>) {
        self.lock().insert(
            name.to_owned(),
            File {
                body: body.to_vec(),
                plan,
                gets: 0,
            },
        );
    }

    /// GET requests `name` has answered.
    pub fn gets(&self, name: &str) -> usize {
        self.lock().get(name).map_or(0, |f| f.gets)
    }
}

pub async fn start() -> ArchiveServer {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("binding the archive server: {e}"));
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let archive = Archive::default();
    let served = archive.clone();
    let task = tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let archive = served.clone();
            tokio::spawn(async move {
                let _ = answer(socket, archive).await;
            });
        }
    });
    ArchiveServer {
        archive,
        index_url: format!("http://127.0.0.1:{port}/data/"),
        task,
    }
}

async fn answer(mut socket: TcpStream, archive: Archive) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf).to_string();
    let mut parts = head.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    if path == "/data/" || path == "/data" {
        let links: String = archive
            .lock()
            .keys()
            .map(|n| format!("<a href=\"{n}\">{n}</a>\n"))
            .collect();
        let page = format!(
            "<html><body><h1>Index of /data</h1><a href=\"../\">../</a>\n<a href=\"?C=M;O=A\">sort</a>\n{links}</body></html>"
        );
        return respond(&mut socket, &method, 200, &[], page.as_bytes(), None).await;
    }
    let name = path.trim_start_matches("/data/").to_owned();
    let found = {
        let mut files = archive.lock();
        files.get_mut(&name).map(|file| {
            if method == "HEAD" {
                (file.body.clone(), Behaviour::Serve)
            } else {
                let b = file
                    .plan
                    .get(file.gets)
                    .or(file.plan.last())
                    .cloned()
                    .unwrap_or(Behaviour::Serve);
                file.gets += 1;
                (file.body.clone(), b)
            }
        })
    };
    let Some((body, behaviour)) = found else {
        return respond(&mut socket, &method, 404, &[], b"not found", None).await;
    };
    let etag = format!(
        "\"{:x}-{}\"",
        body.len(),
        body.first().copied().unwrap_or(0)
    );
    let headers = [
        ("Last-Modified", "Tue, 15 Nov 2022 08:12:31 GMT".to_owned()),
        ("ETag", etag),
    ];
    match behaviour {
        Behaviour::Serve => respond(&mut socket, &method, 200, &headers, &body, None).await,
        Behaviour::Fail => {
            respond(&mut socket, &method, 500, &[], b"archive overloaded", None).await
        }
        Behaviour::Slow(d) => respond(&mut socket, &method, 200, &headers, &body, Some(d)).await,
        Behaviour::RedirectTo(to) => {
            let head = format!(
                "HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            socket.write_all(head.as_bytes()).await?;
            socket.shutdown().await
        }
        Behaviour::Truncate(n) => {
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            socket.write_all(head.as_bytes()).await?;
            socket.write_all(&body[..n.min(body.len())]).await?;
            socket.shutdown().await
        }
    }
}

async fn respond(
    socket: &mut TcpStream,
    method: &str,
    status: u16,
    headers: &[(&str, String)],
    body: &[u8],
    delay: Option<Duration>,
) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        _ => "Internal Server Error",
    };
    let mut head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    socket.write_all(head.as_bytes()).await?;
    if let Some(d) = delay {
        tokio::time::sleep(d).await;
    }
    if method != "HEAD" {
        socket.write_all(body).await?;
    }
    socket.shutdown().await
}
