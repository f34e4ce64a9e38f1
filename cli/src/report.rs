//! `loopx report`: the goal's trajectory (`loopx-report`) as text, Markdown or JSON, and its
//! picture as SVG or PNG.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use loopx_core::{Error, GoalId, Result, Timestamp};
use loopx_kernel::DynKernel;
use loopx_kernel::fs as kfs;
use loopx_report::output::Target;
use loopx_report::{Window, svg, text};

use crate::args::ReportArgs;
use crate::output::Rendered;

pub fn run(k: &DynKernel, goal: Option<&GoalId>, a: &ReportArgs, json: bool) -> Result<Rendered> {
    if a.markdown && json {
        return Err(Error::usage("--markdown and --json each print the whole report: choose one")
            .with_hint("loopx report --markdown, or loopx report --json"));
    }
    let now = k.now();
    let window = Window {
        since: a.since.as_deref().map(|s| when(s, now)).transpose()?,
        until: a.until.as_deref().map(|s| when(s, now)).transpose()?,
    };
    if let (Some(s), Some(u)) = (window.since, window.until)
        && s > u
    {
        return Err(
            Error::usage(format!("--since {s} is after --until {u}")).with_hint("give an earlier --since")
        );
    }
    let svg_to = a.svg.as_deref().map(|p| Target::of("--svg", p)).transpose()?;
    let png_to = a.png.as_deref().map(|p| Target::of("--png", p)).transpose()?;
    let to_stdout = [("--svg", &svg_to), ("--png", &png_to)]
        .into_iter()
        .filter(|(_, t)| matches!(t, Some(Target::Stdout)))
        .map(|(flag, _)| flag)
        .collect::<Vec<_>>();
    match (to_stdout.as_slice(), json, a.markdown) {
        ([_, _], ..) => {
            return Err(Error::usage("--svg - and --png - would both print on stdout: choose one")
                .with_hint("write one of them to a file: --svg report.svg --png -"));
        }
        ([flag], true, _) | ([flag], _, true) => {
            let other = if json { "--json" } else { "--markdown" };
            return Err(Error::usage(format!(
                "{flag} - prints the picture on stdout, where {other} would print the report: choose one"
            ))
            .with_hint(format!("write the picture to a file ({flag} FILE), or leave out {other}")));
        }
        _ => {}
    }
    let rasteriser = a.png.as_ref().map(|_| rasteriser()).transpose()?;
    let id = k.resolve_goal(goal)?;
    let t = loopx_report::build(k.store(), &id, window)?;
    let mut printed = None;
    if a.svg.is_some() || a.png.is_some() {
        let title = format!("goal {} — {}", id, t.report.title.as_deref().unwrap_or(&t.report.objective));
        let drawing = svg::both(&t.picture, title.lines().next().unwrap_or_default());
        if let Some(to) = &svg_to {
            printed = written(to, "--svg", drawing.svg.as_bytes())?.or(printed);
        }
        if let (Some(to), Some(r)) = (&png_to, rasteriser) {
            printed = written(to, "--png", &rasterise(&r, &drawing)?)?.or(printed);
        }
    }
    if let Some(picture) = printed {
        return Ok(Rendered::raw(picture));
    }
    let text = if a.markdown { text::markdown(&t.report) } else { text::text(&t.report) };
    Rendered::new(&t.report, text)
}

/// Writes the picture to `to`, saying where it went, or gives it back to print.
fn written(to: &Target, flag: &str, bytes: &[u8]) -> Result<Option<Vec<u8>>> {
    let printed = to.write(flag, bytes)?;
    if let Target::File(path) = to {
        eprintln!("loopx: the picture is in {}", path.display());
    }
    Ok(printed)
}

/// RFC 3339, or a duration (`7d`, `12h`) before `now`.
fn when(s: &str, now: Timestamp) -> Result<Timestamp> {
    if let Ok(d) = loopx_core::time::parse_duration(s) {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        return Ok(Timestamp::from_unix_millis(now.unix_millis().saturating_sub(ms)));
    }
    Timestamp::parse_rfc3339(s)
        .map_err(|e| e.with_hint("use RFC 3339 (2026-11-29T18:00:00Z) or a duration ago (7d, 12h)"))
}

/// A program that turns SVG into PNG.
#[derive(Clone, Debug)]
enum Rasteriser {
    Rsvg(PathBuf),
    Chromium(PathBuf),
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(name)).find(|p| p.is_file())
}

fn rasteriser() -> Result<Rasteriser> {
    if let Some(p) = on_path("rsvg-convert") {
        return Ok(Rasteriser::Rsvg(p));
    }
    for name in ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"] {
        if let Some(p) = on_path(name) {
            return Ok(Rasteriser::Chromium(p));
        }
    }
    Err(Error::refused("--png needs rsvg-convert or Chromium on PATH, and neither is there")
        .with_hint("install librsvg (rsvg-convert) or Chromium, or write the picture with --svg FILE"))
}

/// The PNG of `d`, made by `r`.
fn rasterise(r: &Rasteriser, d: &svg::Drawing) -> Result<Vec<u8>> {
    let dir = std::env::temp_dir().join(format!("loopx-report-{}", std::process::id()));
    kfs::create_dir_all(&dir)?;
    let src = dir.join("picture.svg");
    let result = (|| {
        kfs::atomic_write(&src, d.svg.as_bytes())?;
        let png = dir.join("picture.png");
        let mut cmd = match r {
            Rasteriser::Rsvg(p) => {
                let mut c = Command::new(p);
                c.arg("-f").arg("png").arg("-o").arg(&png).arg(&src);
                c
            }
            Rasteriser::Chromium(p) => {
                let mut c = Command::new(p);
                c.args(["--headless", "--disable-gpu", "--hide-scrollbars", "--no-first-run"])
                    .arg(format!("--user-data-dir={}", dir.join("profile").display()))
                    .arg(format!("--window-size={},{}", d.width, d.height))
                    .arg(format!("--screenshot={}", png.display()))
                    .arg(format!("file://{}", src.display()));
                if running_as_root() {
                    c.arg("--no-sandbox");
                }
                c
            }
        };
        let (Rasteriser::Rsvg(prog) | Rasteriser::Chromium(prog)) = r;
        let failed = |why: &str| {
            Error::refused(format!("{} did not make the PNG: {why}", prog.display()))
                .with_hint("write the picture with --svg FILE and convert it yourself")
        };
        let output = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| failed(&format!("cannot run it: {e}")))?;
        let bytes = std::fs::read(&png).ok().filter(|b| b.starts_with(b"\x89PNG"));
        bytes.filter(|_| output.status.success()).ok_or_else(|| {
            failed(&loopx_core::untrusted::printable(&String::from_utf8_lossy(&output.stderr)))
        })
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Chromium refuses to run as root with its sandbox on.
fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}
