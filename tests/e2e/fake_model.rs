//! A scripted model server on 127.0.0.1 for the real-host tests of hosts that speak HTTP with
//! a JSON body (Gemini CLI's `streamGenerateContent`, OpenCode's `chat/completions`): each
//! request is handed to the test's protocol, which answers with a content type and a body, and
//! says whether to keep the request for the test to look at.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// What the server answers one request: (content type, body), and whether the test keeps it.
pub(crate) type Answer = (&'static str, String, bool);

type Protocol = dyn Fn(&str, &Value) -> Answer + Send + Sync;

/// Whole HTTP replies a fake model server gives its next requests for the model instead of
/// an answer: a host's quota or rate limit, as the provider sends it. Shared by every fake
/// server of the real-host tests.
#[derive(Clone, Default)]
pub(crate) struct Refusals(Arc<Mutex<VecDeque<String>>>);

impl Refusals {
    /// Queues `status` (`429 Too Many Requests`) with `headers` and a JSON `body`, `times` over.
    pub(crate) fn push(&self, times: usize, status: &str, headers: &[(&str, String)], body: &str) {
        let mut reply = format!("HTTP/1.1 {status}\r\ncontent-type: application/json\r\n");
        for (k, v) in headers {
            reply.push_str(&format!("{k}: {v}\r\n"));
        }
        reply.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
        self.0.lock().unwrap().extend(std::iter::repeat_n(reply, times));
    }

    /// The next refusal queued, if one is.
    pub(crate) fn take(&self) -> Option<String> {
        self.0.lock().unwrap().pop_front()
    }

    /// How many are still queued.
    pub(crate) fn left(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// Seconds since the Unix epoch, now.
pub(crate) fn epoch_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

/// The server: its port, the requests the protocol kept, in order, and the refusals it gives
/// the next requests it would keep.
pub(crate) struct FakeModel {
    pub(crate) port: u16,
    pub(crate) requests: Arc<Mutex<Vec<Value>>>,
    pub(crate) refusals: Refusals,
}

impl FakeModel {
    /// Serves `protocol(path, body)` for every request until the test ends.
    pub(crate) fn start(protocol: impl Fn(&str, &Value) -> Answer + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let protocol: Arc<Protocol> = Arc::new(protocol);
        let kept = requests.clone();
        let refusals = Refusals::default();
        let refuse = refusals.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (protocol, kept, refuse) = (protocol.clone(), kept.clone(), refuse.clone());
                std::thread::spawn(move || serve(stream, &*protocol, &kept, &refuse));
            }
        });
        Self { port, requests, refusals }
    }

    /// Every kept request, as one JSON text (to search for what the model was shown).
    pub(crate) fn all(&self) -> String {
        serde_json::to_string(&*self.requests.lock().unwrap()).unwrap()
    }
}

fn serve(mut stream: TcpStream, protocol: &Protocol, kept: &Mutex<Vec<Value>>, refusals: &Refusals) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut content_length = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" || line == "\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                content_length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; content_length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let path = request_line.split_whitespace().nth(1).unwrap_or("/").to_owned();
        let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let (kind, payload, keep) = protocol(&path, &req);
        if keep && let Some(refusal) = refusals.take() {
            if stream.write_all(refusal.as_bytes()).is_err() {
                return;
            }
            continue;
        }
        if keep {
            kept.lock().unwrap().push(req);
        }
        let reply = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\ncontent-length: {}\r\n\r\n{payload}",
            payload.len()
        );
        if stream.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}
