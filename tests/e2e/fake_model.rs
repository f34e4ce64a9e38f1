//! A scripted model server on 127.0.0.1 for the real-host tests of hosts that speak HTTP with
//! a JSON body (Gemini CLI's `streamGenerateContent`, OpenCode's `chat/completions`): each
//! request is handed to the test's protocol, which answers with a content type and a body, and
//! says whether to keep the request for the test to look at.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// What the server answers one request: (content type, body), and whether the test keeps it.
pub(crate) type Answer = (&'static str, String, bool);

type Protocol = dyn Fn(&str, &Value) -> Answer + Send + Sync;

/// The server: its port, and the requests the protocol kept, in order.
pub(crate) struct FakeModel {
    pub(crate) port: u16,
    pub(crate) requests: Arc<Mutex<Vec<Value>>>,
}

impl FakeModel {
    /// Serves `protocol(path, body)` for every request until the test ends.
    pub(crate) fn start(protocol: impl Fn(&str, &Value) -> Answer + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let protocol: Arc<Protocol> = Arc::new(protocol);
        let kept = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (protocol, kept) = (protocol.clone(), kept.clone());
                std::thread::spawn(move || serve(stream, &*protocol, &kept));
            }
        });
        Self { port, requests }
    }

    /// Every kept request, as one JSON text (to search for what the model was shown).
    pub(crate) fn all(&self) -> String {
        serde_json::to_string(&*self.requests.lock().unwrap()).unwrap()
    }
}

fn serve(mut stream: TcpStream, protocol: &Protocol, kept: &Mutex<Vec<Value>>) {
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
