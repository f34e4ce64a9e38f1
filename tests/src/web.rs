//! `loopx serve` for tests: the real binary serving in the background, and plain HTTP/1.1
//! requests with exactly the headers a test gives (a foreign `Host` or `Origin` included).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::Sandbox;

/// A `loopx serve` process, killed when dropped.
#[derive(Debug)]
pub struct Served {
    child: Child,
    pub port: u16,
    pub token: String,
    /// The URL it printed, token included.
    pub url: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    /// Starts `loopx serve --port 0` in `dir`, with `env` added to the sandbox's environment,
    /// and waits for the URL it prints.
    pub fn start(s: &Sandbox, dir: &Path, env: &[(&str, &str)]) -> Self {
        let mut c = s.command();
        c.current_dir(dir)
            .args(["serve", "--port", "0", "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            c.env(k, v);
        }
        let mut child = c.spawn().expect("start loopx serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("read the URL");
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        let url = v["url"].as_str().expect("url").to_owned();
        let port = u16::try_from(v["port"].as_u64().expect("port")).expect("a port");
        let token = url.split("token=").nth(1).expect("a token in the URL").to_owned();
        Self { child, port, token, url }
    }

    /// `path` with the token in its query, as the dashboard's own links carry it.
    pub fn at(&self, path: &str) -> String {
        let sep = if path.contains('?') { '&' } else { '?' };
        format!("{path}{sep}token={}", self.token)
    }

    /// The headers a browser on this dashboard's own page sends: its Host.
    pub fn own(&self) -> Vec<(String, String)> {
        vec![("Host".into(), format!("127.0.0.1:{}", self.port))]
    }

    /// A page, as a link of the dashboard asks for it (the token in the query).
    pub fn get(&self, path: &str) -> Reply {
        request(self.port, "GET", &self.at(path), &self.own(), None)
    }

    /// A form POST from the dashboard's own page (to the form's action, which carries the
    /// token, with the page's Origin).
    pub fn post(&self, path: &str, form: &str) -> Reply {
        let mut h = self.own();
        h.push(("Origin".into(), format!("http://127.0.0.1:{}", self.port)));
        h.push(("Content-Type".into(), "application/x-www-form-urlencoded".into()));
        request(self.port, "POST", &self.at(path), &h, Some(form))
    }
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// One request on a fresh connection, with exactly `headers` (and `Connection: close`).
pub fn request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: Option<&str>,
) -> Reply {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).expect("connect to the dashboard");
    conn.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        req.push_str(&format!("Content-Length: {}\r\n", b.len()));
    }
    req.push_str("\r\n");
    if let Some(b) = body {
        req.push_str(b);
    }
    conn.write_all(req.as_bytes()).expect("send");
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw).expect("read the answer");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status =
        lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|c| c.parse().ok()).unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    Reply { status, headers, body: body.to_owned() }
}

/// Opens `/events` with the dashboard's cookie and returns the stream, its headers read.
pub fn events(served: &Served) -> BufReader<TcpStream> {
    let mut conn = TcpStream::connect(("127.0.0.1", served.port)).expect("connect");
    let mut req = format!("GET {} HTTP/1.1\r\nAccept: text/event-stream\r\n", served.at("/events"));
    for (k, v) in served.own() {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    conn.write_all(req.as_bytes()).expect("send");
    let mut reader = BufReader::new(conn);
    let mut line = String::new();
    loop {
        line.clear();
        reader.read_line(&mut line).expect("read the headers");
        if line == "\r\n" || line.is_empty() {
            break;
        }
    }
    reader
}

/// Reads the event stream until an `event: change` line or `timeout`; whether one came.
pub fn change_within(stream: &mut BufReader<TcpStream>, timeout: Duration) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    let mut line = String::new();
    while std::time::Instant::now() < deadline {
        let left =
            deadline.saturating_duration_since(std::time::Instant::now()).max(Duration::from_millis(1));
        stream.get_ref().set_read_timeout(Some(left)).expect("timeout");
        line.clear();
        match stream.read_line(&mut line) {
            Ok(0) => return false,
            Ok(_) if line.trim_end() == "event: change" => return true,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
    false
}
