//! A minimal AWS Lambda Runtime API server (the `/2018-06-01/runtime/...` endpoints a Lambda
//! binary polls), so a real function binary can be run and measured locally: it serves a fixed
//! list of events, one per `invocation/next`, and records responses and errors.

use anyhow::{bail, Context, Result};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

#[derive(Debug, Default)]
pub struct RuntimeApiState {
    pending: VecDeque<String>,
    next_id: u64,
    /// When the function first asked for an event (its init is done).
    pub first_poll: Option<Instant>,
    pub responses: u64,
    pub errors: u64,
    pub init_errors: Vec<String>,
    pub last_error: Option<String>,
}

pub struct RuntimeApi {
    pub addr: String,
    pub state: Arc<Mutex<RuntimeApiState>>,
    /// Notified after every response or error.
    pub progress: Arc<Notify>,
}

impl RuntimeApi {
    pub async fn start(events: Vec<String>) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?.to_string();
        let state = Arc::new(Mutex::new(RuntimeApiState {
            pending: events.into(),
            ..Default::default()
        }));
        let progress = Arc::new(Notify::new());
        let (st, pr) = (state.clone(), progress.clone());
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let (st, pr) = (st.clone(), pr.clone());
                tokio::spawn(async move {
                    let _ = serve(conn, st, pr).await;
                });
            }
        });
        Ok(Self {
            addr,
            state,
            progress,
        })
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, RuntimeApiState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One keep-alive connection: requests in, responses out, until the client closes it.
async fn serve(
    conn: TcpStream,
    state: Arc<Mutex<RuntimeApiState>>,
    progress: Arc<Notify>,
) -> Result<()> {
    let mut reader = BufReader::new(conn);
    loop {
        let Some(request) = read_request(&mut reader).await? else {
            return Ok(());
        };
        let (status, headers, payload) =
            if request.method == "GET" && request.path.ends_with("/runtime/invocation/next") {
                let Some((id, event)) = take_next_event(&state) else {
                    // Nothing left: keep the function parked here until the bench stops it.
                    std::future::pending::<()>().await;
                    return Ok(());
                };
                ("200 OK", invocation_headers(id), event)
            } else {
                let status = record_report(&request, &state, &progress);
                (status, String::new(), "{}".to_owned())
            };
        let response = format!(
            "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\n\r\n{payload}",
            payload.len()
        );
        reader.get_mut().write_all(response.as_bytes()).await?;
    }
}

/// One HTTP request as the function sent it.
struct Request {
    method: String,
    path: String,
    body: Vec<u8>,
}

/// The next request on the connection: its request line, headers and body (by Content-Length,
/// or chunked). `None` when the client has closed the connection.
async fn read_request(reader: &mut BufReader<TcpStream>) -> Result<Option<Request>> {
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).await? == 0 {
        return Ok(None);
    }
    let mut parts = request_line.split_whitespace();
    let (method, path) = (
        parts.next().unwrap_or("").to_owned(),
        parts.next().unwrap_or("").to_owned(),
    );
    let (mut length, mut chunked) = (0usize, false);
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).await?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse().context("content-length")?;
        }
        if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        }
    }
    let body = if chunked {
        read_chunked(reader).await?
    } else {
        read_exact(reader, length).await?
    };
    Ok(Some(Request { method, path, body }))
}

/// The next pending event and its request number; the first poll marks the function's init done.
fn take_next_event(state: &Mutex<RuntimeApiState>) -> Option<(u64, String)> {
    let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
    st.first_poll.get_or_insert_with(Instant::now);
    st.pending.pop_front().map(|e| {
        st.next_id += 1;
        (st.next_id, e)
    })
}

/// The headers Lambda sends with invocation `id`.
fn invocation_headers(id: u64) -> String {
    let deadline = chrono::Utc::now().timestamp_millis() + 60_000;
    format!(
        "Lambda-Runtime-Aws-Request-Id: req-{id}\r\nLambda-Runtime-Deadline-Ms: {deadline}\r\n\
         Lambda-Runtime-Invoked-Function-Arn: arn:aws:lambda:us-east-1:000000000000:function:bench\r\n\
         Lambda-Runtime-Trace-Id: Root=1-00000000-000000000000000000000000;Sampled=0\r\n\
         Content-Type: application/json\r\n"
    )
}

/// Records what the function reports (a response, an init error or an invocation error) and
/// wakes whoever waits on progress: the HTTP status to answer with.
fn record_report(
    request: &Request,
    state: &Mutex<RuntimeApiState>,
    progress: &Notify,
) -> &'static str {
    let lock = || state.lock().unwrap_or_else(|p| p.into_inner());
    let (method, path) = (request.method.as_str(), request.path.as_str());
    if method == "POST" && path.ends_with("/response") {
        lock().responses += 1;
        progress.notify_one();
        "202 Accepted"
    } else if method == "POST" && path.ends_with("/init/error") {
        lock()
            .init_errors
            .push(String::from_utf8_lossy(&request.body).into_owned());
        progress.notify_one();
        "202 Accepted"
    } else if method == "POST" && path.ends_with("/error") {
        let mut st = lock();
        st.errors += 1;
        st.last_error = Some(String::from_utf8_lossy(&request.body).into_owned());
        progress.notify_one();
        "202 Accepted"
    } else {
        "404 Not Found"
    }
}

async fn read_exact(reader: &mut BufReader<TcpStream>, n: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0; n];
    reader.read_exact(&mut buf).await?;
    Ok(buf)
}

async fn read_chunked(reader: &mut BufReader<TcpStream>) -> Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size_line = String::new();
        reader.read_line(&mut size_line).await?;
        let size = usize::from_str_radix(size_line.trim().split(';').next().unwrap_or("0"), 16)
            .context("chunk size")?;
        let mut chunk = vec![0; size + 2];
        reader.read_exact(&mut chunk).await?;
        if size == 0 {
            return Ok(body);
        }
        chunk.truncate(size);
        body.extend(chunk);
        if body.len() > 64 * 1024 * 1024 {
            bail!("response body too large");
        }
    }
}
