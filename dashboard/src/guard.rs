//! Who may ask: every request passes [`check`] before it reaches a page.
//!
//! - `Host` must name this server (`127.0.0.1:PORT` or `localhost:PORT`): a page from another
//!   site cannot reach it by rebinding a name of its own to 127.0.0.1.
//! - `Origin`, when sent, must be this server, and a write (POST) must send it; a browser's
//!   `Sec-Fetch-Site: cross-site` is refused: no other site writes here or reads a page.
//! - The token printed by `loopx serve` is required in the query of every request but the
//!   stylesheet's and the script's; the pages put it in every link and form. It is never a
//!   cookie: a browser sends cookies to every port of a host, so another local server would
//!   receive it. A write (POST) also carries it in its form, checked by the handler.
//! - Every answer says not to be cached, framed or sniffed, and allows scripts and styles from
//!   this server's own files only.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use loopx_core::{Error, Result};

use crate::App;

/// A random token: 128 bits, hex.
pub(crate) fn new_token() -> Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| Error::internal(format!("no randomness for the token: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Equal, in time that does not depend on where they differ.
pub(crate) fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn refuse(status: StatusCode, why: &str) -> Response {
    let body = format!("{why}\n");
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

/// The value of `name` in a query string.
fn query_value<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query.split('&').find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
}

pub(crate) async fn check(State(app): State<Arc<App>>, req: Request<Body>, next: Next) -> Response {
    let port = app.port;
    let ours = [format!("127.0.0.1:{port}"), format!("localhost:{port}")];
    let host = req.headers().get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    if !ours.iter().any(|o| o == host) {
        return refuse(StatusCode::FORBIDDEN, "refused: the Host header does not name this dashboard");
    }
    let origin = req.headers().get(header::ORIGIN).map(|o| o.to_str().unwrap_or(""));
    if let Some(origin) = origin
        && !ours.iter().any(|o| origin == format!("http://{o}"))
    {
        return refuse(StatusCode::FORBIDDEN, "refused: a request from another origin");
    }
    if req.method() == Method::POST && origin.is_none() {
        return refuse(
            StatusCode::FORBIDDEN,
            "refused: a write that does not say where it comes from (no Origin)",
        );
    }
    if req.headers().get("sec-fetch-site").is_some_and(|v| v == "cross-site") {
        return refuse(StatusCode::FORBIDDEN, "refused: a request from another site");
    }
    // The stylesheet and the script are the same for everyone, and hold nothing.
    let public = req.method() == Method::GET && req.uri().path().starts_with("/assets/");
    let token = req.uri().query().and_then(|q| query_value(q, "token"));
    if !public && !token.is_some_and(|t| same(t, &app.token)) {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "refused: this dashboard needs the token in the URL that `loopx serve` printed",
        );
    }
    let mut resp = next.run(req).await;
    secure(resp.headers_mut());
    resp
}

/// Headers every answer carries.
fn secure(h: &mut HeaderMap) {
    let set = [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        // Same-origin: the address (and its token) never leaves with a link, and a form still
        // sends its real Origin (`no-referrer` would make it "null").
        (header::REFERRER_POLICY, "same-origin"),
        (header::CACHE_CONTROL, "no-store"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ];
    for (k, v) in set {
        h.insert(k, HeaderValue::from_static(v));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd"));
        assert!(!same("abc", "ab"));
        assert!(!same("", "a"));
    }

    #[test]
    fn values_are_found_by_exact_name() {
        assert_eq!(query_value("page=2&token=xyz", "token"), Some("xyz"));
        assert_eq!(query_value("xtoken=1", "token"), None);
    }

    #[test]
    fn a_token_is_128_random_bits() {
        let (a, b) = (new_token().unwrap_or_default(), new_token().unwrap_or_default());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }
}
