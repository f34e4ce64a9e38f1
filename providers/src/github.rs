//! GitHub's REST API, read-only: a pull request, and the check runs and commit statuses of its
//! head commit. A token is given by the caller (the CLI reads `GITHUB_TOKEN` or `GH_TOKEN`); it
//! is sent as a header and appears in no error, no output and no file.
//!
//! Failures: 401, 403 (not a rate limit) and 404 are clear and not retried, naming what the
//! token lacks; 429, a rate-limited 403, 5xx and network errors are retried with backoff
//! inside the deadline (honouring `Retry-After`), then reported as an error the gate records
//! as "unknown, will retry" — never as an approval.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderMap, HeaderValue, LINK, RETRY_AFTER, USER_AGENT};
use serde_json::Value;

use loopx_core::traits::{CheckResult, Observation, ObservationRequest, Provider};
use loopx_core::{Error, Result};

/// GitHub's API, or a GitHub Enterprise one (or a test's).
pub const DEFAULT_BASE: &str = "https://api.github.com";
/// Pages followed at most for one list.
const MAX_PAGES: usize = 10;

/// The GitHub provider.
pub struct GitHub {
    base: String,
    token: Option<String>,
    /// Made on first use: most commands never ask GitHub, and a TLS client costs start-up time.
    client: std::sync::OnceLock<reqwest::Client>,
    deadline: Duration,
}

impl std::fmt::Debug for GitHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("GitHub").field("base", &self.base).field("token", &self.token.is_some()).finish()
    }
}

/// Refuses a URL that carries credentials (`https://user:secret@host`).
pub fn check_base(base: &str) -> Result<()> {
    let rest = base.strip_prefix("https://").or_else(|| base.strip_prefix("http://")).ok_or_else(|| {
        Error::usage("the GitHub API address is an http(s) URL").with_hint("e.g. https://api.github.com")
    })?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.is_empty() || authority.contains('@') {
        return Err(Error::usage("the GitHub API address names no host, or holds credentials")
            .with_hint("give the token in GITHUB_TOKEN (or GH_TOKEN), never in the URL"));
    }
    Ok(())
}

impl GitHub {
    /// `base` without a trailing slash; every call of one observation finishes within `deadline`.
    pub fn new(base: &str, token: Option<String>, deadline: Duration) -> Result<Self> {
        check_base(base)?;
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            token,
            client: std::sync::OnceLock::new(),
            deadline,
        })
    }

    fn client(&self) -> Result<&reqwest::Client> {
        if let Some(c) = self.client.get() {
            return Ok(c);
        }
        let c = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::limited(5))
            .build()
            .map_err(|e| Error::internal(format!("cannot start an HTTP client: {e}")))?;
        Ok(self.client.get_or_init(|| c))
    }

    fn headers(&self) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(ACCEPT, HeaderValue::from_static("application/vnd.github+json"));
        h.insert(USER_AGENT, HeaderValue::from_static("loopx"));
        h.insert("X-GitHub-Api-Version", HeaderValue::from_static("2022-11-28"));
        if let Some(t) = &self.token
            && let Ok(mut v) = HeaderValue::from_str(&format!("Bearer {t}"))
        {
            v.set_sensitive(true);
            h.insert(AUTHORIZATION, v);
        }
        h
    }

    /// GETs `url` (absolute) as JSON, retrying what may pass inside the deadline. Returns the
    /// document and the next page's address, if any.
    async fn get(&self, url: &str, what: &str, deadline: Instant) -> Result<(Value, Option<String>)> {
        let mut attempt = 0u32;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(unavailable(what, "no answer within the deadline"));
            }
            let sent = self.client()?.get(url).headers(self.headers()).timeout(left).send().await;
            let retry_in = match sent {
                Err(e) if e.is_timeout() => return Err(unavailable(what, "no answer within the deadline")),
                Err(e) => {
                    // Connection refused, reset, DNS: may pass. The error's text may name the
                    // URL, never a header.
                    let _ = e;
                    backoff(attempt)
                }
                Ok(resp) => {
                    let status = resp.status();
                    let rate_limited = status == StatusCode::TOO_MANY_REQUESTS
                        || (status == StatusCode::FORBIDDEN
                            && resp.headers().get("x-ratelimit-remaining").is_some_and(|v| v == "0"));
                    if status.is_success() {
                        let next = next_link(resp.headers());
                        let body =
                            resp.bytes().await.map_err(|_| unavailable(what, "the answer broke off"))?;
                        let doc: Value = serde_json::from_slice(&body).map_err(|_| {
                            Error::refused(format!("GitHub answered {what} with something that is not JSON"))
                                .with_hint("check the API address (LOOPX_GITHUB_API)")
                        })?;
                        return Ok((doc, next));
                    }
                    if rate_limited || status.is_server_error() {
                        retry_after(resp.headers()).unwrap_or_else(|| backoff(attempt))
                    } else {
                        return Err(refusal(status, what, self.token.is_some()));
                    }
                }
            };
            attempt += 1;
            if Instant::now() + retry_in >= deadline {
                return Err(unavailable(what, "GitHub kept failing until the deadline"));
            }
            tokio::time::sleep(retry_in).await;
        }
    }

    /// Every page of a list under `key`, following `Link: rel="next"`.
    async fn list(
        &self,
        url: String,
        key: Option<&str>,
        what: &str,
        deadline: Instant,
    ) -> Result<Vec<Value>> {
        let mut out = Vec::new();
        let mut next = Some(url);
        for _ in 0..MAX_PAGES {
            let Some(url) = next.take() else { break };
            let (doc, n) = self.get(&url, what, deadline).await?;
            let items = match key {
                Some(k) => doc.get(k).cloned(),
                None => Some(doc),
            };
            let Some(Value::Array(items)) = items else {
                return Err(Error::refused(format!("GitHub's answer to {what} has no list")));
            };
            out.extend(items);
            next = n;
        }
        Ok(out)
    }

    async fn pull_request(&self, owner: &str, repo: &str, number: u64) -> Result<Observation> {
        let deadline = Instant::now() + self.deadline;
        let what = format!("{owner}/{repo}#{number}");
        let base = format!("{}/repos/{owner}/{repo}", self.base);
        let (pr, _) = self.get(&format!("{base}/pulls/{number}"), &what, deadline).await?;
        let text = |v: &Value| v.as_str().map(str::to_owned);
        let head_sha = text(&pr["head"]["sha"])
            .ok_or_else(|| Error::refused(format!("GitHub's answer for {what} names no head commit")))?;
        let state = text(&pr["state"]).unwrap_or_else(|| "open".to_owned());
        let merged = pr["merged"].as_bool().unwrap_or(false) || pr["merged_at"].is_string();
        let url = text(&pr["html_url"])
            .unwrap_or_else(|| format!("https://github.com/{owner}/{repo}/pull/{number}"));
        let mut checks = Vec::new();
        let runs = self
            .list(
                format!("{base}/commits/{head_sha}/check-runs?per_page=100"),
                Some("check_runs"),
                &what,
                deadline,
            )
            .await?;
        for r in runs {
            if let Some(name) = text(&r["name"]) {
                checks.push(CheckResult {
                    name,
                    status: text(&r["status"]).unwrap_or_else(|| "queued".to_owned()),
                    conclusion: text(&r["conclusion"]),
                });
            }
        }
        let (combined, _) = self.get(&format!("{base}/commits/{head_sha}/status"), &what, deadline).await?;
        for s in combined["statuses"].as_array().into_iter().flatten() {
            if let (Some(name), Some(state)) = (text(&s["context"]), text(&s["state"])) {
                let status = if state == "pending" { "in_progress" } else { "completed" };
                checks.push(CheckResult { name, status: status.to_owned(), conclusion: Some(state) });
            }
        }
        Ok(Observation::PullRequestObserved { state, merged, head_sha, url, checks })
    }
}

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(200u64 << attempt.min(5))
}

/// `Retry-After` in seconds, bounded to a minute.
fn retry_after(h: &HeaderMap) -> Option<Duration> {
    let secs: u64 = h.get(RETRY_AFTER)?.to_str().ok()?.trim().parse().ok()?;
    Some(Duration::from_secs(secs.min(60)))
}

/// The `rel="next"` address of a `Link` header.
fn next_link(h: &HeaderMap) -> Option<String> {
    let link = h.get(LINK)?.to_str().ok()?;
    link.split(',').find(|part| part.contains("rel=\"next\"")).and_then(|part| {
        let start = part.find('<')? + 1;
        let end = part.find('>')?;
        (start < end).then(|| part[start..end].to_owned())
    })
}

fn unavailable(what: &str, why: &str) -> Error {
    Error::busy(format!("GitHub could not be read for {what}: {why}"))
        .with_hint("loopx looks again at the gate's next check")
}

/// 401, 403 and 404, said plainly: what the token lacks.
fn refusal(status: StatusCode, what: &str, has_token: bool) -> Error {
    let perms = "read access to the repository's pull requests, checks and commit statuses";
    match status.as_u16() {
        401 if has_token => {
            Error::refused(format!("GitHub refused the token for {what} (401): it is wrong or expired"))
                .with_hint(format!("set GITHUB_TOKEN (or GH_TOKEN) to a token with {perms}"))
        }
        401 => Error::refused(format!("GitHub wants a token for {what} (401)"))
            .with_hint(format!("set GITHUB_TOKEN (or GH_TOKEN) to a token with {perms}")),
        403 => Error::refused(format!("the token may not read {what} (403)")).with_hint(format!(
            "give the token {perms} (fine-grained: Pull requests, Checks, Commit statuses: read)"
        )),
        404 => Error::refused(format!("GitHub has no {what}, or the token cannot see it (404)"))
            .with_hint(format!("check the owner, repository and number, and that the token has {perms}")),
        other => Error::refused(format!("GitHub answered {other} for {what}")),
    }
}

#[async_trait]
impl Provider for GitHub {
    fn name(&self) -> &'static str {
        "github"
    }

    async fn observe(&self, request: &ObservationRequest) -> Result<Observation> {
        match request {
            ObservationRequest::PullRequest { owner, repo, number } => {
                self.pull_request(owner, repo, *number).await
            }
            other => Err(Error::usage(format!("the GitHub provider cannot serve {other:?}"))
                .with_hint("it reads pull requests and their checks")),
        }
    }
}
