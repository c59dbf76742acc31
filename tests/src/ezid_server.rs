//! An EZID-compatible identifier service on loopback, as EZID's API documents it (API version
//! 2): `POST /shoulder/<shoulder>` with HTTP Basic authentication and an ANVL body
//! (`text/plain; charset=UTF-8`) mints `<shoulder><n>` and answers `201` with `success: <id>`;
//! an unknown shoulder or a bad login gets `400`/`401` with `error: …`. Misbehaviour on demand
//! (a stall past the client's timeout after minting, a 500 after minting). Plain tokio sockets,
//! one request per connection.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How the next mint request is answered; the last one repeats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Mint,
    /// `400 error: bad request - <why>`, nothing minted.
    Refuse(String),
    /// Mints, then sends nothing for this long (past the client's timeout).
    MintAndStall(Duration),
    /// Mints, then `500`.
    MintAndFail,
}

/// One request the server received.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub content_type: Option<String>,
    pub authorization: Option<String>,
    pub body: String,
}

#[derive(Default)]
struct State {
    plan: Vec<Answer>,
    answered: usize,
    minted: Vec<String>,
    received: Vec<Received>,
}

pub struct EzidServer {
    pub url: String,
    /// `user:password` the server accepts.
    pub login: (String, String),
    pub shoulder: String,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for EzidServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl EzidServer {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The answers to the next requests, in order (the last repeats).
    pub fn plan(&self, answers: Vec<Answer>) {
        let mut s = self.lock();
        s.plan = answers;
        s.answered = 0;
    }

    /// Every identifier minted so far.
    pub fn minted(&self) -> Vec<String> {
        self.lock().minted.clone()
    }

    pub fn received(&self) -> Vec<Received> {
        self.lock().received.clone()
    }
}

pub async fn start(shoulder: &str) -> EzidServer {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("binding the EZID server: {e}"));
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let state = Arc::new(Mutex::new(State {
        plan: vec![Answer::Mint],
        ..State::default()
    }));
    let login = ("granary".to_owned(), "s3cret: with colon".to_owned());
    let served = (state.clone(), login.clone(), shoulder.to_owned());
    let task = tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let (state, login, shoulder) = served.clone();
            tokio::spawn(async move {
                let _ = answer(socket, state, login, shoulder).await;
            });
        }
    });
    EzidServer {
        url: format!("http://127.0.0.1:{port}"),
        login,
        shoulder: shoulder.to_owned(),
        state,
        task,
    }
}

fn basic(login: &(String, String)) -> String {
    use base64::Engine;
    let raw = format!("{}:{}", login.0, login.1);
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(raw)
    )
}

async fn answer(
    mut socket: TcpStream,
    state: Arc<Mutex<State>>,
    login: (String, String),
    shoulder: String,
) -> std::io::Result<()> {
    let Some(received) = read_request(&mut socket).await? else {
        return Ok(());
    };
    let authorized = received.authorization.as_deref() == Some(basic(&login).as_str());
    let wanted = format!("/shoulder/{shoulder}");
    let (answer, minted) = record_and_mint(&state, &received, authorized, &wanted, &shoulder);
    let (status, body) = match (&answer, &minted) {
        _ if !authorized => (401, "error: unauthorized".to_owned()),
        (_, None) if received.path != wanted => (
            400,
            format!("error: bad request - no such shoulder: {}", received.path),
        ),
        (Answer::Refuse(why), _) => (400, format!("error: bad request - {why}")),
        (Answer::MintAndStall(d), _) => {
            tokio::time::sleep(*d).await;
            return Ok(());
        }
        (Answer::MintAndFail, _) => (500, "error: internal server error".to_owned()),
        (Answer::Mint, Some(id)) => (201, format!("success: {id}")),
        (Answer::Mint, None) => (400, "error: bad request".to_owned()),
    };
    let reason = match status {
        201 => "Created",
        400 => "Bad Request",
        401 => "Unauthorized",
        _ => "Internal Server Error",
    };
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=UTF-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    socket.write_all(response.as_bytes()).await?;
    socket.shutdown().await
}

/// One HTTP request read off the socket: its head, then as much body as its Content-Length
/// says (`None` when the client hung up before the head ended).
async fn read_request(socket: &mut TcpStream) -> std::io::Result<Option<Received>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let header = |name: &str| {
        head.lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_owned())
    };
    let length: usize = header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let mut first = head.lines().next().unwrap_or("").split_whitespace();
    Ok(Some(Received {
        method: first.next().unwrap_or("").to_owned(),
        path: first.next().unwrap_or("").to_owned(),
        content_type: header("content-type"),
        authorization: header("authorization"),
        body: String::from_utf8_lossy(&buf[head_end..]).to_string(),
    }))
}

/// Records the request and takes the plan's next answer; mints an identifier when the request
/// is an authorized POST to the shoulder that the answer does not refuse.
fn record_and_mint(
    state: &Mutex<State>,
    received: &Received,
    authorized: bool,
    wanted: &str,
    shoulder: &str,
) -> (Answer, Option<String>) {
    let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
    s.received.push(received.clone());
    let answer = s
        .plan
        .get(s.answered)
        .or(s.plan.last())
        .cloned()
        .unwrap_or(Answer::Mint);
    s.answered += 1;
    let mints = received.method == "POST"
        && received.path == wanted
        && authorized
        && !matches!(answer, Answer::Refuse(_));
    let id = mints.then(|| {
        let id = format!("{shoulder}{:05}", s.minted.len() + 1);
        s.minted.push(id.clone());
        id
    });
    (answer, id)
}
