//! Who may ask: every request passes [`check`] before it reaches a page.
//!
//! - `Host` must name this server (`127.0.0.1:PORT` or `localhost:PORT`): a page from another
//!   site cannot reach it by rebinding a name of its own to 127.0.0.1.
//! - `Origin`, when sent, must be this server, and a browser's `Sec-Fetch-Site: cross-site` is
//!   refused: no other site writes here or reads a page.
//! - The token printed by `loopx serve` is required: in the query on first use (answered with a
//!   cookie and a redirect that drops it from the address), in the cookie after. A write (POST)
//!   also carries it in its form, checked by the handler.
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

/// The cookie's name: one per port, so two dashboards on one machine keep their own.
fn cookie_name(port: u16) -> String {
    format!("loopx_token_{port}")
}

fn refuse(status: StatusCode, why: &str) -> Response {
    let body = format!("{why}\n");
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

/// The value of `name` in a query string.
fn query_value<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query.split('&').find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
}

fn cookie_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|kv| kv.trim().strip_prefix(name)?.strip_prefix('='))
}

pub(crate) async fn check(State(app): State<Arc<App>>, req: Request<Body>, next: Next) -> Response {
    let port = app.port;
    let ours = [format!("127.0.0.1:{port}"), format!("localhost:{port}")];
    let host = req.headers().get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    if !ours.iter().any(|o| o == host) {
        return refuse(StatusCode::FORBIDDEN, "refused: the Host header does not name this dashboard");
    }
    if let Some(origin) = req.headers().get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        if !ours.iter().any(|o| origin == format!("http://{o}")) {
            return refuse(StatusCode::FORBIDDEN, "refused: a request from another origin");
        }
    }
    if req.headers().get("sec-fetch-site").is_some_and(|v| v == "cross-site") {
        return refuse(StatusCode::FORBIDDEN, "refused: a request from another site");
    }
    let name = cookie_name(port);
    let in_query = req.uri().query().and_then(|q| query_value(q, "token"));
    let in_cookie = cookie_value(req.headers(), &name);
    if in_cookie.is_some_and(|t| same(t, &app.token)) {
        let mut resp = next.run(req).await;
        secure(resp.headers_mut());
        return resp;
    }
    match in_query {
        // First use: keep the token in a cookie and take it out of the address bar.
        Some(t) if same(t, &app.token) && req.method() == Method::GET => {
            let rest: Vec<&str> = req
                .uri()
                .query()
                .unwrap_or("")
                .split('&')
                .filter(|kv| !kv.is_empty() && !kv.starts_with("token="))
                .collect();
            let to = if rest.is_empty() {
                req.uri().path().to_owned()
            } else {
                format!("{}?{}", req.uri().path(), rest.join("&"))
            };
            let cookie = format!("{name}={}; HttpOnly; SameSite=Strict; Path=/", app.token);
            let mut resp = (StatusCode::SEE_OTHER, [(header::LOCATION, to)]).into_response();
            if let Ok(v) = HeaderValue::from_str(&cookie) {
                resp.headers_mut().insert(header::SET_COOKIE, v);
            }
            secure(resp.headers_mut());
            resp
        }
        _ => refuse(
            StatusCode::UNAUTHORIZED,
            "refused: this dashboard needs the token in the URL that `loopx serve` printed",
        ),
    }
}

/// Headers every answer carries.
fn secure(h: &mut HeaderMap) {
    let set = [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
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
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, HeaderValue::from_static("a=1; loopx_token_80=tok"));
        assert_eq!(cookie_value(&h, "loopx_token_80"), Some("tok"));
        assert_eq!(cookie_value(&h, "loopx_token_8"), None);
    }

    #[test]
    fn a_token_is_128_random_bits() {
        let (a, b) = (new_token().unwrap_or_default(), new_token().unwrap_or_default());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }
}
