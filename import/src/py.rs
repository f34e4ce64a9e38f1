//! Reading a LoopX (Python, 0.4.x) project: its registry (`.loopx/registry.json`: goals,
//! agents, thread bindings, quota policy), each goal's state file (a Markdown file with
//! checkbox todos and `<!-- loopx:todo … -->` metadata comments: todos, gates, claims,
//! evidence) and its run records (`<runtime>/goals/<id>/runs/`). Nothing here writes.
//!
//! Every item keeps the file and line it came from, so what cannot be mapped is reported
//! where it is, and a file that cannot be read is refused naming the file and the line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use loopx_core::{Error, Result, Timestamp};
use serde_json::Value;

/// A LoopX (Python) project as read.
#[derive(Debug)]
pub struct Project {
    /// The directory holding `.loopx/registry.json`.
    pub root: PathBuf,
    pub registry: PathBuf,
    pub goals: Vec<Goal>,
}

/// One goal of the registry, with its state file and run records read.
#[derive(Debug)]
pub struct Goal {
    pub id: String,
    pub status: String,
    pub objective: String,
    pub agents: Vec<String>,
    /// Host threads bound to agents: (thread, host surface, agent).
    pub bindings: Vec<(String, String, String)>,
    pub quota: Option<Quota>,
    pub state_file: PathBuf,
    pub todos: Vec<Todo>,
    pub runs: Vec<Run>,
    /// The state file's `updated_at`.
    pub updated_at: Option<Timestamp>,
    /// BLAKE3 of what was read for this goal (its registry entry, state file and run records).
    pub digest: String,
    /// What the source holds for the goal beyond its todos and runs that loopx has no place
    /// for: file, line, what.
    pub extras: Vec<(PathBuf, usize, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quota {
    pub compute: f64,
    pub window_hours: f64,
    pub slot_minutes: Option<f64>,
}

/// Which section of the state file a todo is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Agent,
    User,
    /// `## Completed Work Archive`: closed work, either role.
    Archive,
}

/// A checkbox line of the state file and the lines that belong to it.
#[derive(Debug, Clone)]
pub struct Todo {
    pub line: usize,
    pub section: Section,
    /// The checkbox: ' ' open or blocked, 'x' done, '-' deferred.
    pub mark: char,
    /// The text without its `[Pn]` prefix.
    pub text: String,
    pub priority: Option<u8>,
    /// The metadata comment's fields, percent-decoded.
    pub meta: BTreeMap<String, String>,
}

impl Todo {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.meta.get(key).map(String::as_str).filter(|v| !v.is_empty())
    }
    pub fn id(&self) -> Option<&str> {
        self.get("todo_id")
    }
    /// `open`, `blocked`, `deferred` or `done`: the metadata's, else the checkbox's.
    pub fn status(&self) -> &str {
        self.get("status").unwrap_or(match self.mark {
            'x' | 'X' => "done",
            '-' => "deferred",
            _ => "open",
        })
    }
    pub fn class(&self) -> &str {
        self.get("task_class").unwrap_or("advancement_task")
    }
    pub fn list(&self, key: &str) -> Vec<&str> {
        self.get(key).map(|v| v.split(',').filter(|s| !s.is_empty()).collect()).unwrap_or_default()
    }
    pub fn time(&self, key: &str) -> Option<Timestamp> {
        self.get(key).and_then(parse_time)
    }
}

/// One run record of `runs/index.jsonl`.
#[derive(Debug, Clone)]
pub struct Run {
    pub file: PathBuf,
    pub line: usize,
    pub at: Timestamp,
    pub classification: String,
    pub agent: Option<String>,
    /// For a spend (`quota_slot_spent`): the todo and slots, from the run's own record.
    pub spend: Option<(String, u32, Option<String>)>,
    pub next_action: Option<String>,
}

fn bad(path: &Path, line: usize, what: impl std::fmt::Display) -> Error {
    Error::integrity(format!("{}:{line}: {what}", path.display()))
        .with_hint("the LoopX (Python) state was not changed and nothing was imported; mend the file (or restore it) and run the import again")
}

/// The largest file the import reads.
pub const MAX_FILE: u64 = 64 << 20;

/// Whether `path` is a regular file inside `root`, reached without a symbolic link, and why
/// not. Only such files are read: a registry cannot send the import to `/etc`, to a link out
/// of the project, to a device or a FIFO.
fn inside(root: &Path, path: &Path) -> std::result::Result<(), &'static str> {
    let rel = path.strip_prefix(root).map_err(|_| "outside the directory being imported")?;
    let parts: Vec<_> = rel.components().collect();
    let mut at = root.to_path_buf();
    for (i, c) in parts.iter().enumerate() {
        let std::path::Component::Normal(name) = c else { return Err("a path that climbs out with `..`") };
        at.push(name);
        let m = std::fs::symlink_metadata(&at).map_err(|_| "missing")?;
        if m.file_type().is_symlink() {
            return Err("reached through a symbolic link");
        }
        if i + 1 == parts.len() && !m.is_file() {
            return Err("not a regular file");
        }
        if i + 1 < parts.len() && !m.is_dir() {
            return Err("not under a directory");
        }
    }
    if parts.is_empty() { Err("not a file") } else { Ok(()) }
}

/// Reads `path`, a regular file inside `root` ([`inside`]) of at most [`MAX_FILE`] bytes.
fn read(root: &Path, path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let refuse = |why: &str| {
        Error::refused(format!("{} is {why}: the import reads only regular files inside the project", path.display()))
            .with_hint("nothing was imported; fix the path in the LoopX (Python) registry, or copy the file into the project")
    };
    inside(root, path).map_err(refuse)?;
    let file = loopx_kernel::fs::no_follow(std::fs::OpenOptions::new().read(true))
        .open(path)
        .map_err(|e| Error::io("read", path, &e))?;
    if !file.metadata().map_err(|e| Error::io("read", path, &e))?.is_file() {
        return Err(refuse("not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE + 1).read_to_end(&mut bytes).map_err(|e| Error::io("read", path, &e))?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(refuse("larger than 64 MiB"));
    }
    Ok(bytes)
}

/// Times as LoopX (Python) writes them: RFC 3339 with an offset or `Z`, or a bare date.
pub fn parse_time(s: &str) -> Option<Timestamp> {
    let s = s.trim();
    if s.len() == 10 {
        return Timestamp::parse_rfc3339(&format!("{s}T00:00:00Z")).ok();
    }
    // The reader takes an offset away itself, and refuses one out of range.
    Timestamp::parse_rfc3339(s).ok()
}

/// Reads the project whose registry is `dir/.loopx/registry.json`.
pub fn read_project(dir: &Path) -> Result<Project> {
    let registry = dir.join(".loopx").join("registry.json");
    if !registry.exists() {
        return Err(Error::usage(format!(
            "no LoopX (Python) project in {} (no .loopx/registry.json)",
            dir.display()
        ))
        .with_hint("run the import in the directory you ran the Python `loopx bootstrap` in, or name it: loopx import loopx-py DIR"));
    }
    let bytes = read(dir, &registry)?;
    let doc: Value = serde_json::from_slice(&bytes).map_err(|e| bad(&registry, e.line(), e))?;
    let goals =
        doc.get("goals").and_then(Value::as_array).ok_or_else(|| bad(&registry, 1, "no \"goals\" list"))?;
    let runtime = doc.get("common_runtime_root").and_then(Value::as_str).map(|r| dir.join(r));
    let mut out = Vec::new();
    for g in goals {
        out.push(read_goal(dir, &registry, &bytes, g, runtime.as_deref())?);
    }
    Ok(Project { root: dir.to_owned(), registry, goals: out })
}

/// The line of `bytes` where the registry entry of goal `id` begins (for messages).
fn line_of(bytes: &[u8], needle: &str) -> usize {
    let text = String::from_utf8_lossy(bytes);
    text.find(needle).map_or(1, |at| text[..at].matches('\n').count() + 1)
}

fn read_goal(dir: &Path, registry: &Path, bytes: &[u8], g: &Value, runtime: Option<&Path>) -> Result<Goal> {
    let str_of = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    let id = str_of(g, "id").ok_or_else(|| bad(registry, 1, "a goal without an \"id\""))?;
    let at = line_of(bytes, &format!("\"id\": \"{id}\"")).max(line_of(bytes, &format!("\"id\":\"{id}\"")));
    let state_rel = str_of(g, "state_file")
        .ok_or_else(|| bad(registry, at, format!("goal {id} has no \"state_file\"")))?;
    // Paths are recorded where the project was when they were written; a project copied or
    // moved since has them under the directory being imported.
    let repo = str_of(g, "repo").map(PathBuf::from);
    let state_file = locate(&repo.as_deref().unwrap_or(dir).join(&state_rel), repo.as_deref(), dir);
    let coordination = g.get("coordination").cloned().unwrap_or(Value::Null);
    let agents = coordination
        .get("registered_agents")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default();
    let bindings = coordination
        .get("thread_agent_bindings")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|b| {
                    Some((str_of(b, "thread_id")?, str_of(b, "host_surface")?, str_of(b, "agent_id")?))
                })
                .collect()
        })
        .unwrap_or_default();
    let quota = g.get("quota").map(|q| Quota {
        compute: q.get("compute").and_then(Value::as_f64).unwrap_or(1.0).clamp(0.0, 1.0),
        window_hours: q.get("window_hours").and_then(Value::as_f64).unwrap_or(24.0),
        slot_minutes: q.get("slot_minutes").and_then(Value::as_f64),
    });
    let mut hasher = blake3::Hasher::new();
    hasher.update(g.to_string().as_bytes());
    let state_bytes = read(dir, &state_file)?;
    hasher.update(&state_bytes);
    let (front, todos) = parse_state(&state_file, &state_bytes)?;
    let runtime = locate(runtime.unwrap_or(&dir.join(".codex").join("loopx")), repo.as_deref(), dir);
    let runs = read_runs(dir, &runtime.join("goals").join(&id).join("runs"), &mut hasher)?;
    let mut extras = Vec::new();
    for key in ["agent_profiles", "agent_work_modes", "write_scope"] {
        match coordination.get(key) {
            Some(Value::Object(m)) if !m.is_empty() => {
                extras.push((
                    registry.to_owned(),
                    at,
                    format!("{key} of {}", m.keys().cloned().collect::<Vec<_>>().join(", ")),
                ));
            }
            Some(Value::Array(a)) if !a.is_empty() => {
                extras.push((registry.to_owned(), at, format!("{key} {a:?}")))
            }
            _ => {}
        }
    }
    let leases = runtime.join("goals").join(&id).join("task-leases");
    let mut lease_files: Vec<PathBuf> = std::fs::read_dir(&leases)
        .map(|d| {
            d.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "json")).collect()
        })
        .unwrap_or_default();
    lease_files.sort();
    for path in lease_files {
        extras.push((path, 1, "a task lease (leases are taken again by whoever works the todo)".to_owned()));
    }
    Ok(Goal {
        objective: front.get("objective").cloned().unwrap_or_default(),
        status: front
            .get("status")
            .cloned()
            .or_else(|| str_of(g, "status"))
            .unwrap_or_else(|| "active".into()),
        updated_at: front.get("updated_at").and_then(|t| parse_time(t)),
        id,
        agents,
        bindings,
        quota,
        state_file,
        todos,
        runs,
        digest: hasher.finalize().to_hex()[..32].to_owned(),
        extras,
    })
}

/// Where `recorded` (a path written while the project was at `repo`) is now that it is at
/// `dir`: under `dir` when it was under `repo` and is there, else as recorded.
fn locate(recorded: &Path, repo: Option<&Path>, dir: &Path) -> PathBuf {
    let moved = repo.and_then(|r| recorded.strip_prefix(r).ok()).map(|rest| dir.join(rest));
    match moved {
        Some(p) if p.exists() => p,
        _ => recorded.to_owned(),
    }
}

/// Parses a state file: its front matter and its todos.
pub fn parse_state(path: &Path, bytes: &[u8]) -> Result<(BTreeMap<String, String>, Vec<Todo>)> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let line = bytes[..e.valid_up_to()].iter().filter(|b| **b == b'\n').count() + 1;
        bad(path, line, "not UTF-8 text")
    })?;
    let lines: Vec<&str> = text.lines().collect();
    let mut front = BTreeMap::new();
    let mut i = 0;
    if lines.first() == Some(&"---") {
        i = 1;
        loop {
            let Some(l) = lines.get(i) else {
                return Err(bad(path, i, "the front matter does not end (no closing ---)"));
            };
            i += 1;
            if *l == "---" {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                front.insert(k.trim().to_owned(), v.trim().trim_matches('"').to_owned());
            }
        }
    }
    let mut section = None;
    let mut todos: Vec<Todo> = Vec::new();
    // Whether the lines read since the last todo still belong to it (indented ones do).
    let mut in_todo = false;
    while i < lines.len() {
        let (n, l) = (i + 1, lines[i]);
        i += 1;
        if let Some(h) = l.strip_prefix("## ") {
            section = section_of(h);
            in_todo = false;
            continue;
        }
        if let Some(s) = section
            && let Some((mark, rest)) = checkbox(l)
        {
            let (priority, text) = priority_of(rest);
            todos.push(Todo { line: n, section: s, mark, text, priority, meta: BTreeMap::new() });
            in_todo = true;
            continue;
        }
        if l.trim().is_empty() {
            continue;
        }
        if !(l.starts_with(' ') || l.starts_with('\t')) {
            in_todo = false;
        }
        // Indented lines after a todo belong to it: its metadata comment, or more text.
        if in_todo && let Some(t) = todos.last_mut() {
            let body = l.trim();
            if let Some(c) = body.strip_prefix("<!--") {
                let c = c
                    .strip_suffix("-->")
                    .ok_or_else(|| bad(path, n, "a metadata comment does not end (no -->)"))?;
                let c = c.trim();
                let Some(fields) = c.strip_prefix("loopx:") else { continue };
                let fields = fields.strip_prefix("todo").unwrap_or(fields);
                for token in fields.split_whitespace() {
                    let (k, v) = token.split_once('=').ok_or_else(|| {
                        bad(path, n, format!("a metadata field without a value: {token:?}"))
                    })?;
                    let v = percent_decode(v)
                        .ok_or_else(|| bad(path, n, format!("a badly encoded value: {token:?}")))?;
                    t.meta.insert(k.to_owned(), v);
                }
            } else {
                t.text.push(' ');
                t.text.push_str(body);
            }
        }
    }
    Ok((front, todos))
}

fn section_of(heading: &str) -> Option<Section> {
    let h = heading.to_lowercase();
    if ["todo archive", "work archive", "completed archive", "completed work"].iter().any(|k| h.contains(k)) {
        Some(Section::Archive)
    } else if ["user todo", "owner review reading queue", "owner reading queue"].iter().any(|k| h.contains(k))
    {
        Some(Section::User)
    } else if ["agent todo", "codex todo", "project agent todo"].iter().any(|k| h.contains(k)) {
        Some(Section::Agent)
    } else {
        None
    }
}

/// `- [x] text` → ('x', "text").
fn checkbox(line: &str) -> Option<(char, &str)> {
    let l = line.trim_start();
    let l = l.strip_prefix("- ").or_else(|| l.strip_prefix("* "))?;
    let l = l.trim_start();
    let mut c = l.chars();
    if c.next()? != '[' {
        return None;
    }
    let mark = c.next()?;
    if !matches!(mark, ' ' | 'x' | 'X' | '-') || c.next()? != ']' {
        return None;
    }
    Some((mark, c.as_str().trim()))
}

/// `[P1] text` → (Some(1), "text").
fn priority_of(text: &str) -> (Option<u8>, String) {
    if let Some(rest) = text.strip_prefix('[')
        && let Some((tag, after)) = rest.split_once(']')
        && let Some(d) =
            tag.strip_prefix(['P', 'p']).and_then(|d| d.chars().next()).and_then(|d| d.to_digit(10))
        && d <= 4
    {
        return (Some(d as u8), after.trim().to_owned());
    }
    (None, text.to_owned())
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The run records in `runs/index.jsonl` under `dir`, with each spend's todo and slots from
/// its own record.
fn read_runs(root: &Path, dir: &Path, hasher: &mut blake3::Hasher) -> Result<Vec<Run>> {
    let index = dir.join("index.jsonl");
    if !index.exists() {
        return Ok(Vec::new());
    }
    let bytes = read(root, &index)?;
    hasher.update(&bytes);
    let text = String::from_utf8_lossy(&bytes);
    let mut runs = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(l).map_err(|e| bad(&index, i + 1, e))?;
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        let at = s("generated_at")
            .and_then(|t| parse_time(&t))
            .ok_or_else(|| bad(&index, i + 1, "a run without a readable \"generated_at\""))?;
        let classification = s("classification").unwrap_or_default();
        let mut spend = None;
        if classification == "quota_slot_spent" {
            // The record itself, by file name (the index names it by an absolute path).
            let name = s("json_path").and_then(|p| Path::new(&p).file_name().map(|n| dir.join(n)));
            if let Some(path) = name.filter(|p| p.exists()) {
                let b = read(root, &path)?;
                hasher.update(&b);
                let r: Value = serde_json::from_slice(&b).map_err(|e| bad(&path, e.line(), e))?;
                let q = r.get("quota_event").cloned().unwrap_or(Value::Null);
                let todo = q.get("todo_id").and_then(Value::as_str).map(str::to_owned);
                let slots =
                    q.get("slots").and_then(Value::as_u64).and_then(|n| u32::try_from(n).ok()).unwrap_or(1);
                let turn = q.get("turn_instance_id").and_then(Value::as_str).map(str::to_owned);
                spend = todo.map(|t| (t, slots, turn));
            }
        }
        runs.push(Run {
            file: index.clone(),
            line: i + 1,
            at,
            classification,
            agent: s("agent_id"),
            spend,
            next_action: s("recommended_action"),
        });
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_in_every_form_loopx_python_writes() {
        let z = parse_time("2026-12-01T03:08:39Z").unwrap();
        assert_eq!(parse_time("2026-12-01T03:08:39+00:00"), Some(z));
        assert_eq!(parse_time("2026-12-01T11:08:39+08:00"), Some(z));
        assert_eq!(parse_time("2026-11-30T22:08:39-05:00"), Some(z));
        assert!(parse_time("2026-12-01T03:08:39.807969Z").is_some());
        assert!(parse_time("2026-12-01").is_some());
        assert_eq!(parse_time("yesterday"), None);
        // An offset out of range is refused, never a panic.
        assert_eq!(parse_time("2026-12-01T03:08:39+1000000:00"), None);
        assert_eq!(parse_time("2026-12-01T03:08:39+24:00"), None);
    }

    #[test]
    fn a_state_file_with_todos_metadata_and_sections() {
        let md = "---\nstatus: active\nobjective: \"Ship it\"\n---\n# S\n## Agent Todo\n\n- [x] [P0] Do a\n  <!-- loopx:todo todo_id=todo_1 status=done evidence=a%20test%20passed -->\n- [-] later\n## User Todo\n- [ ] [P1] Ask?\n  <!-- loopx:todo todo_id=todo_3 task_class=user_gate -->\n## Completed Work Archive\n- [x] old\n";
        let (front, todos) = parse_state(Path::new("s.md"), md.as_bytes()).unwrap();
        assert_eq!(front["objective"], "Ship it");
        assert_eq!(todos.len(), 4);
        assert_eq!((todos[0].line, todos[0].priority, todos[0].text.as_str()), (8, Some(0), "Do a"));
        assert_eq!(todos[0].get("evidence"), Some("a test passed"));
        assert_eq!((todos[1].status(), todos[1].section), ("deferred", Section::Agent));
        assert_eq!((todos[2].class(), todos[2].section), ("user_gate", Section::User));
        assert_eq!(todos[3].section, Section::Archive);
    }

    #[test]
    fn a_broken_state_file_is_refused_naming_its_line() {
        let cut =
            "---\nobjective: x\n---\n## Agent Todo\n- [ ] a\n  <!-- loopx:todo todo_id=todo_1 status=op";
        let e = parse_state(Path::new("s.md"), cut.as_bytes()).unwrap_err();
        assert!(e.message.contains("s.md:6"), "{}", e.message);
        let e = parse_state(Path::new("s.md"), b"---\nobjective: x\n").unwrap_err();
        assert!(e.message.contains("front matter"), "{}", e.message);
        let enc = "## Agent Todo\n- [ ] a\n  <!-- loopx:todo note=%G1 -->\n";
        assert!(parse_state(Path::new("s.md"), enc.as_bytes()).unwrap_err().message.contains("s.md:3"));
    }
}
