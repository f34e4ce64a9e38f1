//! `loopx doctor`: verifies what the fast path trusts. Reads only; changes nothing.

use std::fs;

use loopx_core::event::Event;
use loopx_core::kernel::{DoctorCheck, DoctorGoal, DoctorReport};
use loopx_core::{GoalId, Result};

use crate::fs::read_optional;
use crate::log::{self, EventLine};
use crate::project::ProjectFile;
use crate::render;
use crate::state::GoalState;
use crate::store::{Doctor, FileStore, Snapshot, Store, replay};

fn check(name: &str, ok: bool, detail: impl Into<String>) -> DoctorCheck {
    DoctorCheck { name: name.to_owned(), ok, detail: detail.into(), note: false }
}

/// A check that found nothing wrong but something to say.
fn note(name: &str, detail: impl Into<String>) -> DoctorCheck {
    DoctorCheck { note: true, ..check(name, true, detail) }
}

fn run(store: &FileStore, only: Option<&GoalId>) -> Result<DoctorReport> {
    let layout = store.layout();
    let mut project_checks = Vec::new();
    let project = match store.project() {
        Ok(p) => {
            project_checks.push(check("project.json", true, format!("{} goal(s)", p.goals.len())));
            Some(p)
        }
        Err(e) => {
            project_checks.push(check("project.json", false, e.message));
            None
        }
    };
    let listed: Vec<GoalId> =
        project.as_ref().map(|p| p.goals.iter().map(|g| g.id.clone()).collect()).unwrap_or_default();
    if only.is_none()
        && let Ok(entries) = fs::read_dir(layout.goals_dir())
    {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !listed.iter().any(|g| g.as_str() == name) {
                project_checks.push(check(
                    "goal directories",
                    false,
                    format!(
                        "goals/{name} is not listed in project.json (a goal creation that did not finish?)"
                    ),
                ));
            }
        }
    }
    let goals: Vec<GoalId> = match only {
        Some(g) => vec![g.clone()],
        None => listed,
    };
    let stale = stale_temp_files(store, &goals);
    if !stale.is_empty() {
        let names: Vec<String> = stale.iter().map(|p| shown(store, p)).collect();
        project_checks.push(check(
            "temporary files",
            false,
            format!(
                "{} left by a process that stopped mid-write (never state; loopx doctor --repair removes them)",
                names.join(", ")
            ),
        ));
    }
    // Each goal is read under its lock: a commit in flight is never mistaken for damage.
    let mut reports = Vec::new();
    for g in &goals {
        let _guard = match store.lock_goal(g) {
            Ok(guard) => Some(guard),
            // A lock that cannot even be opened (a link, a missing directory) is what the
            // report is about.
            Err(e) if matches!(e.kind, loopx_core::ErrorKind::Integrity | loopx_core::ErrorKind::Io) => None,
            Err(e) => return Err(e),
        };
        reports.push(goal_report(store, g));
    }
    let healthy =
        project_checks.iter().all(|c| c.ok) && reports.iter().all(|g| g.checks.iter().all(|c| c.ok));
    Ok(DoctorReport { healthy, project: project_checks, goals: reports })
}

/// Leftover temporary files in `.loopx/` and the goals' directories.
fn stale_temp_files(store: &FileStore, goals: &[GoalId]) -> Vec<std::path::PathBuf> {
    let layout = store.layout();
    let mut v = crate::fs::stale_temp_files(&layout.state_dir());
    for g in goals {
        v.extend(crate::fs::stale_temp_files(&layout.goal_dir(g)));
    }
    v
}

fn shown(store: &FileStore, p: &std::path::Path) -> String {
    p.strip_prefix(store.layout().state_dir()).unwrap_or(p).display().to_string()
}

fn goal_report(store: &FileStore, id: &GoalId) -> DoctorGoal {
    let layout = store.layout();
    let mut checks = Vec::new();
    let links: Vec<String> = store
        .state_paths(Some(id))
        .iter()
        .filter_map(|p| crate::fs::check_state_file(p).err())
        .map(|e| e.message)
        .collect();
    if !links.is_empty() {
        checks.push(check("state files", false, links.join("; ")));
        return DoctorGoal { goal_id: id.clone(), events: 0, checks };
    }
    let events_path = layout.events(id);
    let bytes = match fs::read(&events_path) {
        Ok(b) => b,
        Err(e) => {
            checks.push(check("event log", false, format!("cannot read {}: {e}", events_path.display())));
            return DoctorGoal { goal_id: id.clone(), events: 0, checks };
        }
    };
    let (scan, replayed, archive) = match verify_log(id, &bytes, &mut checks) {
        Ok(verified) => verified,
        Err(events) => return DoctorGoal { goal_id: id.clone(), events, checks },
    };
    let events = scan.lines.len() as u64;
    if let Some(Err(e)) = store.witness(id).map(|w| w.check(id, replayed.seq, scan.head())) {
        checks.push(check("head", false, format!("{} ({})", e.message, e.hint.unwrap_or_default())));
    }
    let bytes = read_optional(&layout.snapshot(id)).ok().flatten().map(std::sync::Arc::new);
    let snap = bytes.as_ref().map(|b| Snapshot::decode(b, layout, id).ok_or(b));
    let archived = archive_check(&layout.archive(id), &archive, &replayed);
    // A store from before the archive (snapshot version 1) has none yet: its upgrade, on the
    // next command, writes it.
    let before_archive = matches!(&snap, Some(Err(b)) if crate::store::older_snapshot(b) == Some(1));
    checks.push(if before_archive && !archived.ok {
        note("archive", "the store is from before the archive; the next command's upgrade writes it")
    } else {
        archived
    });
    match snap {
        None => {
            checks.push(check("snapshot", false, "snapshot.json is missing (the next command rebuilds it)"))
        }
        // A snapshot an older loopx wrote is what an upgrade leaves: the next command
        // rebuilds it from the log, which verified above, so it is a note, not a failure.
        Some(Err(b)) => checks.push(match crate::store::older_snapshot(b) {
            Some(1) => note(
                "snapshot",
                "written by an older loopx (the whole state in one file); the next command upgrades the store",
            ),
            Some(_) => note("snapshot", "written by an older loopx; the next command rebuilds it from the log"),
            None => check("snapshot", false, "snapshot.json is unreadable; the next command rebuilds it"),
        }),
        Some(Ok(snap)) => {
            // The todos' JSON is checked against the hashes the snapshot records first.
            let todos = snap.state.todos.check();
            let same_state = todos.is_ok()
                && serde_json::to_value(&*snap.state).ok() == serde_json::to_value(&replayed).ok();
            if let Err(e) = todos {
                checks.push(check("snapshot", false, format!("{e}; the next command rebuilds it")));
            } else if snap.seq == replayed.seq && snap.head == scan.head() && same_state {
                checks.push(check("snapshot", true, format!("matches a full replay at event {}", snap.seq)));
            } else if snap.seq < replayed.seq {
                checks.push(check(
                    "snapshot",
                    false,
                    format!(
                        "at event {} while the log has {}; the next command rebuilds it",
                        snap.seq, replayed.seq
                    ),
                ));
            } else {
                checks.push(check(
                    "snapshot",
                    false,
                    format!(
                        "at event {} does not match a replay of the log ({} events)",
                        snap.seq, replayed.seq
                    ),
                ));
            }
            let md = read_optional(&layout.goal_md(id)).ok().flatten();
            let expected = render::goal_md(&replayed);
            match md {
                None => checks.push(check("GOAL.md", false, "missing (the next change regenerates it)")),
                Some(b) if b == expected.as_bytes() => checks.push(check("GOAL.md", true, "matches the state")),
                Some(b) if log::line_hash(&b) != snap.goal_md_digest => checks.push(check(
                    "GOAL.md",
                    false,
                    "was edited by hand: it is a projection and is overwritten on the next change. If an agent edited it, it tried to change its own governing state; use loopx commands",
                )),
                Some(_) => checks.push(check("GOAL.md", false, "is stale (the next change regenerates it)")),
            }
        }
    }
    DoctorGoal { goal_id: id.clone(), events, checks }
}

/// The report of a store that keeps no files of its own (memory, a database): one line for the
/// project (`place` says where it is), and `goal_report` for each goal asked about.
pub fn report(
    project: &ProjectFile,
    only: Option<&GoalId>,
    place: &str,
    mut goal_report: impl FnMut(&GoalId) -> Result<DoctorGoal>,
) -> Result<DoctorReport> {
    let goals = project.goals_or(only);
    let reports = goals.iter().map(&mut goal_report).collect::<Result<Vec<_>>>()?;
    let healthy = reports.iter().all(|g| g.checks.iter().all(|c| c.ok));
    let listed = format!("{} goal(s), {place}", project.goals.len());
    Ok(DoctorReport { healthy, project: vec![check("project", true, listed)], goals: reports })
}

/// The checks every store makes of a goal's log: its hash chain (`event log`), and that its
/// events fold into a state (`replay`). Returns the scan, the replayed state and the archive
/// lines it made; or, when a check failed, how many events verified.
pub fn verify_log(
    id: &GoalId,
    bytes: &[u8],
    checks: &mut Vec<DoctorCheck>,
) -> std::result::Result<(log::Scan, GoalState, Vec<String>), u64> {
    let scan = match log::scan(bytes) {
        Ok(scan) => scan,
        Err((partial, b)) => {
            checks.push(check(
                "event log",
                false,
                format!(
                    "line {} (byte {}): {}; the {} line(s) before it verify. Commands refuse this goal until it is repaired",
                    b.line,
                    b.offset,
                    b.reason,
                    partial.lines.len()
                ),
            ));
            return Err(partial.lines.len() as u64);
        }
    };
    let events = scan.lines.len() as u64;
    if scan.torn_bytes > 0 {
        checks.push(check(
            "event log",
            false,
            format!(
                "{events} events verify; then an incomplete final line of {} bytes that was never committed (the next command cuts it off)",
                scan.torn_bytes
            ),
        ));
    } else {
        checks.push(check("event log", true, format!("{events} events, hash chain verified")));
    }
    let (replayed, archive) = match replay(id, &scan) {
        Ok(s) => s,
        Err(e) => {
            checks.push(check("replay", false, e.message));
            return Err(events);
        }
    };
    if let Some(c) = signatures_check(id, &scan.lines) {
        checks.push(c);
    }
    Ok((scan, replayed, archive))
}

/// In strict mode, every person's decision from the first key on must carry the signature of
/// the key in force at its place in the log (a line edited in, or a signature copied from
/// another line, fails). `None` for a goal never in strict mode.
fn signatures_check(id: &GoalId, lines: &[EventLine]) -> Option<DoctorCheck> {
    let mut key: Option<&str> = None;
    let mut signed = 0;
    for l in lines {
        let needs = l.actor == "user" && l.event.is_persons_decision();
        let expected = match (&key, &l.event) {
            (Some(k), _) => Some(*k),
            (None, Event::PersonKeySet { public_key }) => Some(public_key.as_str()),
            (None, _) => None,
        };
        if let (true, Some(k)) = (needs, expected) {
            let ok = crate::person::message(id, l.seq, &l.prev, &l.event)
                .is_ok_and(|m| l.signature.as_deref().is_some_and(|s| crate::person::verify(k, &m, s)));
            if !ok {
                return Some(check(
                    "person decisions",
                    false,
                    format!(
                        "event {} ({}) is a person's decision without the signature of the goal's person key {}",
                        l.seq,
                        l.event.kind(),
                        loopx_core::event::key_short(k)
                    ),
                ));
            }
            signed += 1;
        }
        if let Event::PersonKeySet { public_key } = &l.event
            && l.actor == "user"
        {
            key = Some(public_key);
        }
    }
    key.map(|k| {
        check(
            "person decisions",
            true,
            format!("{signed} signed by the person's key ({})", loopx_core::event::key_short(k)),
        )
    })
}

/// The archive against the lines a full replay makes: the same bytes, or a failed check.
fn archive_check(path: &std::path::Path, lines: &[String], state: &crate::state::GoalState) -> DoctorCheck {
    let expected = crate::store::archive_text(lines);
    let found = read_optional(path).ok().flatten().unwrap_or_default();
    // Bytes after the state's end belong to a commit that never finished.
    let committed = found.get(..expected.len()).unwrap_or(&found);
    if committed == expected.as_bytes() {
        let what = if lines.is_empty() {
            "empty: no closed todo has left the live state yet".to_owned()
        } else {
            format!(
                "{} closed todo(s) with {} evidence record(s), matches a full replay",
                state.archive.todos, state.archive.evidence
            )
        };
        return check("archive", true, what);
    }
    let what = if committed.len() < expected.len() {
        "is shorter than a replay of the log makes it (the next command rebuilds it)"
    } else {
        "does not match a replay of the log (edited by hand?); loopx doctor --repair rebuilds it from the log"
    };
    check("archive", false, what)
}

/// `doctor --repair`: mends what it can, then reports as `doctor` does, with one `repair`
/// check per action taken.
fn repair(store: &FileStore, only: Option<&GoalId>) -> Result<DoctorReport> {
    let mut actions = store.repair_project()?;
    let goals = store.project()?.goals_or(only);
    for p in stale_temp_files(store, &goals) {
        crate::fs::remove_file(&p)?;
        actions.push(format!("removed {}, a temporary file a crashed write left behind", shown(store, &p)));
    }
    for g in &goals {
        actions.extend(store.repair_goal(g)?);
    }
    Ok(with_repairs(run(store, only)?, actions))
}

/// `report` with one `repair` check per action taken, first (or one saying none was needed).
pub fn with_repairs(mut report: DoctorReport, mut actions: Vec<String>) -> DoctorReport {
    if actions.is_empty() {
        actions.push("nothing needed repair".to_owned());
    }
    let done: Vec<DoctorCheck> = actions.into_iter().map(|a| check("repair", true, a)).collect();
    report.project.splice(0..0, done);
    report
}

impl Doctor for FileStore {
    fn doctor(&self, only: Option<&GoalId>) -> Result<DoctorReport> {
        run(self, only)
    }

    fn repair_project(&self) -> Result<Vec<String>> {
        FileStore::repair_project(self)
    }

    fn repair(&self, only: Option<&GoalId>) -> Result<DoctorReport> {
        repair(self, only)
    }
}

#[cfg(test)]
mod tests {
    use loopx_core::Timestamp;
    use loopx_core::kernel::Signer as _;

    use super::*;

    #[test]
    fn a_persons_decision_must_carry_its_own_signature() {
        let id = GoalId::new("g").unwrap_or_else(|_| unreachable!());
        let key = crate::person::PersonKey::generate().unwrap_or_else(|_| unreachable!());
        let public = key.public_key();
        let line = |seq: u64, event: Event, signed: bool| {
            let prev = format!("h{}", seq - 1);
            let signature = signed.then(|| {
                key.sign(&crate::person::message(&id, seq, &prev, &event).unwrap_or_else(|_| unreachable!()))
            });
            EventLine {
                seq,
                at: Timestamp::from_unix_millis(0),
                actor: "user".to_owned(),
                event,
                turn: None,
                receipt: None,
                root: None,
                prev,
                signature,
            }
        };
        let unsigned_before = line(1, Event::GoalStopped { reason: None, now: false }, false);
        let set = line(2, Event::PersonKeySet { public_key: public.clone() }, true);
        let resumed = line(3, Event::GoalResumed {}, true);
        assert!(signatures_check(&id, std::slice::from_ref(&unsigned_before)).is_none(), "never strict");
        let good = [unsigned_before.clone(), set.clone(), resumed.clone()];
        assert!(signatures_check(&id, &good).is_some_and(|c| c.ok));
        // A signature copied from another decision, or none: named.
        let copied = EventLine { signature: set.signature.clone(), ..resumed.clone() };
        let missing = EventLine { signature: None, ..resumed.clone() };
        let moved = EventLine { seq: 4, ..resumed };
        for bad in [copied, missing, moved] {
            let c = signatures_check(&id, &[unsigned_before.clone(), set.clone(), bad]);
            assert!(c.is_some_and(|c| !c.ok && c.detail.contains("without the signature")));
        }
    }
}
