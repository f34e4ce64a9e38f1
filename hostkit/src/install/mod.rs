//! The installer: applies an adapter's [`InstallSpec`] to a host's files, and takes it away
//! again. Adapters declare what they want; this module alone reads the host's files, works out
//! the plan, and writes.
//!
//! Three kinds of managed file: whole text files carrying [`MARKER`] (a file of that name
//! without it is the user's and is skipped), and our entries in a host's JSON or TOML file
//! (the user's entries, order and — for TOML — comments are kept).
//!
//! Every install keeps a manifest, `<base>/.loopx/installs/<adapter>.json` (the project for
//! project scope, home for user scope), with paths relative to the project or home, each
//! file's original bytes, a hash of what loopx wrote, and the entries that are ours. Uninstall
//! gives a file's original bytes back when nobody touched it since, or takes out only our
//! entries when someone did, and removes the directories the install created once they are
//! empty. A moved project uninstalls the same way.
//!
//! Crash safety: the manifest, with the whole plan as `pending` (each write's before-hash and
//! after-content), is written before the first host file changes, and rewritten without it
//! after the last. A plan interrupted half-way is finished by the next install or uninstall
//! ([`recover`]); `host doctor` only says so.
//!
//! A manifest is a file in the project (or the home), which anyone who can write there can
//! write: a repository can ship one, an agent that may write only the workspace can put one
//! there. So what a manifest may make loopx do is bounded outside it ([`Ours`]): it names only
//! the files its adapter writes in its scope (else it is refused, nothing written), and a
//! pending plan is carried out only when this machine started it: before the journal is
//! written, its digest is recorded in the user's own configuration (the witness, kept outside
//! every project as the command approvals are), and a plan whose bytes this machine did not
//! record is refused with nothing changed.

pub mod doc;
pub mod doctor;
mod span;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use loopx_core::host::{
    Entry, EntryOp, FileOp, Format, HostFile, HostPath, InstallOptions, InstallScope, InstallSpec, MARKER,
    ManagedFile, PlannedFile,
};
use loopx_core::{Error, Result};
use sha2::{Digest, Sha256};

use doc::Doc;
use loopx_kernel::fs as kfs;
use loopx_kernel::log::line_hash;

/// The manifests' directory, under the scope's base.
pub const MANIFEST_DIR: &str = ".loopx/installs";
const MANIFEST_SCHEMA: u32 = 1;

pub use loopx_core::host::Roots;

/// Where an adapter's manifest lives for a scope.
pub fn manifest_path(adapter: &str, scope: InstallScope) -> Result<HostPath> {
    HostPath::in_scope(scope, &format!("{MANIFEST_DIR}/{adapter}.json"))
}

/// What one adapter's install in one scope may touch, and where this machine keeps its word for
/// the plans it starts. A manifest naming anything else, or a pending plan this machine did not
/// record, is not loopx's: it is refused, and nothing is written.
#[derive(Clone, Debug)]
pub struct Ours {
    /// Every file the adapter writes in the scope (its whole spec, every option on).
    files: BTreeSet<HostPath>,
    /// The directories on their way (and the manifest's), and the scope's bases.
    dirs: BTreeSet<HostPath>,
    /// What the host writes by itself into a directory loopx created.
    host_files: &'static [HostFile],
    /// The directory, outside every project, where this machine records the plans it starts.
    witness: PathBuf,
}

impl Ours {
    /// `everything`: what the adapter could install in `scope` (every option on); `witness`: a
    /// directory in the user's own configuration.
    pub fn new(
        adapter: &str,
        scope: InstallScope,
        everything: &InstallSpec,
        host_files: &'static [HostFile],
        witness: PathBuf,
    ) -> Result<Self> {
        let files: BTreeSet<HostPath> = everything.files.iter().map(|f| f.path().clone()).collect();
        let manifest = manifest_path(adapter, scope)?;
        let mut dirs = BTreeSet::new();
        for p in files.iter().chain(std::iter::once(&manifest)) {
            dirs.insert(HostPath::root(p.base));
            dirs.extend(p.ancestors());
        }
        Ok(Self { files, dirs, host_files, witness })
    }

    fn file(&self, p: &HostPath) -> bool {
        if self.files.contains(p) {
            return true;
        }
        let (dir, name) = p.rel.rsplit_once('/').unwrap_or(("", p.rel.as_str()));
        self.host_files.iter().any(|f| f.name == name)
            && self.dirs.contains(&HostPath { base: p.base, rel: dir.to_owned() })
    }

    /// Refuses a manifest that names a file or directory this adapter never writes in this
    /// scope: whatever wrote it, it was not loopx.
    fn check(&self, m: &Manifest, at: &HostPath) -> Result<()> {
        let files = m.files.iter().map(|f| &f.path);
        let pending = m.pending.iter().flat_map(|p| p.writes.iter().map(|w| &w.path));
        let dirs = m.created_dirs.iter().chain(m.pending.iter().flat_map(|p| p.prune_dirs.iter()));
        let stray = files
            .chain(pending)
            .find(|p| !self.file(p))
            .or_else(|| dirs.into_iter().find(|d| !self.dirs.contains(d)));
        if let Some(p) = stray {
            return Err(Error::integrity(format!(
                "{at} names {p}, which is not a file loopx installs for {}; loopx did not write this manifest and will not act on it",
                m.adapter
            ))
            .with_hint(format!(
                "nothing was changed; if you did not put {at} there (a repository or an agent may have), delete it"
            )));
        }
        if let Some(then) = m.pending.as_ref().and_then(|p| p.then.as_deref()) {
            self.check(then, at)?;
        }
        Ok(())
    }

    /// The record of the plan journaled at `manifest`.
    fn witness_file(&self, manifest: &Path) -> PathBuf {
        self.witness.join(format!("{}.json", &sha256(manifest.as_os_str().as_encoded_bytes())[..32]))
    }

    /// Records, before the journal is written, that this machine starts the plan `journal`
    /// at `manifest`. Returns the directories it had to make.
    fn vouch(&self, manifest: &Path, journal: &str) -> Result<Vec<PathBuf>> {
        let made: Vec<PathBuf> =
            self.witness.ancestors().take_while(|d| !d.exists()).map(Path::to_path_buf).collect();
        kfs::create_dir_all(&self.witness)?;
        let record = Witnessed { manifest: manifest.to_path_buf(), journal: sha256(journal.as_bytes()) };
        let text = serde_json::to_string(&record)
            .map_err(|e| Error::internal(format!("cannot encode an install's witness: {e}")))?;
        kfs::atomic_write(&self.witness_file(manifest), text.as_bytes())?;
        Ok(made)
    }

    /// Whether this machine recorded starting the plan `journal` at `manifest`.
    fn vouched(&self, manifest: &Path, journal: &str) -> bool {
        let Ok(Some(bytes)) = kfs::read_optional(&self.witness_file(manifest)) else { return false };
        serde_json::from_slice::<Witnessed>(&bytes)
            .is_ok_and(|w| w.manifest == manifest && w.journal == sha256(journal.as_bytes()))
    }

    /// Forgets the plan at `manifest` (done or given back), and the directories `made` for it
    /// once empty.
    fn unvouch(&self, manifest: &Path, made: &[PathBuf]) -> Result<()> {
        kfs::remove_file(&self.witness_file(manifest))?;
        kfs::remove_dir_if_empty(&self.witness)?;
        for d in made {
            kfs::remove_dir_if_empty(d)?;
        }
        Ok(())
    }
}

/// A witness: the manifest a plan was journaled at, and the SHA-256 of the journal's bytes.
#[derive(Serialize, Deserialize)]
struct Witnessed {
    manifest: PathBuf,
    journal: String,
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// An install's record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub schema_version: u32,
    pub adapter: String,
    /// What was asked for (so `host doctor` can check the wiring is still all there).
    pub options: InstallOptions,
    /// Directories the install created, removed again by uninstall once empty.
    #[serde(default)]
    pub created_dirs: Vec<HostPath>,
    pub files: Vec<OwnedFile>,
    /// A plan being applied; present only between its first and last write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<Pending>,
}

/// One file loopx wrote.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnedFile {
    pub path: HostPath,
    /// `None` for a whole text file; the format for a file loopx keeps entries in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<Format>,
    /// The entries loopx keeps in it (`ours: false`: the user had it already).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<OwnedEntry>,
    /// Its bytes before loopx first changed it; `None` when loopx created it.
    pub original: Option<String>,
    /// Hash of what loopx last wrote.
    pub written: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnedEntry {
    pub entry: Entry,
    pub ours: bool,
}

/// A plan in flight: enough to finish it after a crash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    pub writes: Vec<PendingWrite>,
    /// The manifest once the writes are done; `None` after an uninstall.
    pub then: Option<Box<Manifest>>,
    /// Directories to remove, if empty, once done (deepest first).
    #[serde(default)]
    pub prune_dirs: Vec<HostPath>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingWrite {
    pub path: HostPath,
    /// Hash of the file before the plan; `None` when it did not exist.
    pub before: Option<String>,
    /// The content after the plan; `None` to remove the file.
    pub after: Option<String>,
}

/// What an install or uninstall will do.
#[derive(Clone, Debug)]
pub struct Plan {
    pub adapter: String,
    pub scope: InstallScope,
    /// One line per file, the manifest last.
    pub files: Vec<PlannedFile>,
    /// Things worth telling the person (a missing manifest, say).
    pub notes: Vec<String>,
    manifest: HostPath,
    writes: Vec<PendingWrite>,
    then: Option<Manifest>,
    prune_dirs: Vec<HostPath>,
    manifest_changes: bool,
}

impl Plan {
    /// Whether applying it changes anything on disk.
    pub fn changes(&self) -> bool {
        !self.writes.is_empty() || self.manifest_changes
    }
}

fn hash(text: &str) -> String {
    line_hash(text.as_bytes())
}

fn read_text(path: &Path, shown: &HostPath) -> Result<Option<String>> {
    match kfs::read_optional(path)? {
        None => Ok(None),
        Some(b) => String::from_utf8(b).map(Some).map_err(|_| {
            Error::refused(format!("{shown} is not UTF-8 text; loopx leaves it alone"))
                .with_hint("fix or move the file, then run the command again")
        }),
    }
}

/// The manifest, if there is one. An unreadable manifest, or one naming a file its adapter
/// does not write in its scope, is refused (nothing is guessed).
pub fn load_manifest(
    roots: &Roots,
    adapter: &str,
    scope: InstallScope,
    ours: &Ours,
) -> Result<Option<Manifest>> {
    Ok(load_manifest_text(roots, adapter, scope, ours)?.map(|(m, _)| m))
}

/// [`load_manifest`], with the manifest's bytes.
fn load_manifest_text(
    roots: &Roots,
    adapter: &str,
    scope: InstallScope,
    ours: &Ours,
) -> Result<Option<(Manifest, String)>> {
    let at = manifest_path(adapter, scope)?;
    let Some(text) = read_text(&roots.abs(&at), &at)? else { return Ok(None) };
    let m: Manifest = serde_json::from_str(&text).map_err(|e| {
        Error::integrity(format!("{at} is not a loopx install manifest ({e})"))
            .with_hint("restore it from a backup, or move it aside and remove loopx's entries by hand")
    })?;
    if m.schema_version != MANIFEST_SCHEMA || m.adapter != adapter {
        return Err(Error::integrity(format!(
            "{at} is a manifest of schema {} for {}; this loopx reads schema {MANIFEST_SCHEMA} for {adapter}",
            m.schema_version, m.adapter
        )));
    }
    ours.check(&m, &at)?;
    Ok(Some((m, text)))
}

/// A plan a manifest holds that did not finish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unfinished {
    /// This machine started it (a crash cut it short): the next install or uninstall finishes it.
    Ours,
    /// This machine never recorded starting it (a repository shipped it, something else wrote
    /// it): it is never carried out.
    Foreign,
}

/// Whether `adapter`'s manifest in `scope` holds a plan that did not finish, and whose it is.
/// Reads only.
pub fn unfinished(
    roots: &Roots,
    adapter: &str,
    scope: InstallScope,
    ours: &Ours,
) -> Result<Option<Unfinished>> {
    let at = manifest_path(adapter, scope)?;
    let Some((m, text)) = load_manifest_text(roots, adapter, scope, ours)? else { return Ok(None) };
    Ok(m.pending
        .is_some()
        .then(|| if ours.vouched(&roots.abs(&at), &text) { Unfinished::Ours } else { Unfinished::Foreign }))
}

/// The refusal of a plan this machine did not start.
fn foreign(adapter: &str, at: &HostPath) -> Error {
    Error::refused(format!(
        "{at} holds an unfinished install plan for {adapter} that loopx on this machine did not start; loopx will not carry it out"
    ))
    .with_hint(format!(
        "nothing was changed; if you did not put {at} there (a repository or an agent may have), delete it, then run the command again"
    ))
}

fn op_for(current: Option<&String>, content: &str) -> FileOp {
    match current {
        Some(c) if c == content => FileOp::Unchanged,
        Some(_) => FileOp::Update,
        None => FileOp::Create,
    }
}

fn planned(op: FileOp, path: &HostPath, reason: Option<&str>) -> PlannedFile {
    PlannedFile { op, path: path.clone(), reason: reason.map(str::to_owned) }
}

fn is_empty_container(v: &Value) -> bool {
    matches!(v, Value::Object(m) if m.is_empty()) || matches!(v, Value::Array(a) if a.is_empty())
}

/// Takes `entry` out of `doc`, then every container on its path that is left empty and was not
/// in the user's original.
fn strip(doc: &mut Doc, entry: &Entry, original: Option<&Doc>) {
    match &entry.op {
        EntryOp::Set(_) => doc.remove(&entry.at),
        EntryOp::Push(v) | EntryOp::Ensure(v) => {
            doc.remove_element(&entry.at, v);
        }
    }
    for k in (1..=entry.at.len()).rev() {
        let p = &entry.at[..k];
        match doc.get(p) {
            None => continue,
            Some(v) if is_empty_container(&v) && original.and_then(|o| o.get(p)).is_none() => doc.remove(p),
            Some(_) => break,
        }
    }
}

fn contains(doc: &Doc, at: &[String], v: &Value) -> bool {
    doc.get(at).and_then(|a| a.as_array().map(|a| a.contains(v))).unwrap_or(false)
}

/// Our entries on top of the user's. `prior` is what the last install recorded for the file.
fn merge(
    doc: &mut Doc,
    entries: &[Entry],
    prior: &[OwnedEntry],
    original: Option<&Doc>,
    shown: &HostPath,
) -> Result<Vec<OwnedEntry>> {
    for p in prior.iter().filter(|p| p.ours && !entries.contains(&p.entry)) {
        // Keep a key we own in place when it is only getting a new value.
        let same_key = matches!(p.entry.op, EntryOp::Set(_))
            && entries.iter().any(|e| e.at == p.entry.at && matches!(e.op, EntryOp::Set(_)));
        if !same_key {
            strip(doc, &p.entry, original);
        }
    }
    let mut out = Vec::new();
    for e in entries {
        let was_ours = |pred: &dyn Fn(&Entry) -> bool| prior.iter().any(|p| p.ours && pred(&p.entry));
        let ours = match &e.op {
            EntryOp::Set(v) => {
                let existing = doc.get(&e.at);
                let key_ours = was_ours(&|p| p.at == e.at && matches!(p.op, EntryOp::Set(_)));
                if existing.as_ref().is_some_and(|x| x != v) && !key_ours {
                    return Err(Error::refused(format!(
                        "{shown}: {} already holds a value loopx did not write; loopx will not replace it",
                        e.at.join(".")
                    ))
                    .with_hint("remove that entry yourself, or install without the option that needs it"));
                }
                doc.set(&e.at, v)?;
                existing.is_none() || key_ours
            }
            // A string where a list is ensured is a list of one (Gemini CLI's
            // `context.fileName`): the same string is there; another makes it a list.
            EntryOp::Ensure(v) if doc.get(&e.at).is_some_and(|x| x == *v) => was_ours(&|p| p == e),
            EntryOp::Ensure(v) if matches!(doc.get(&e.at), Some(Value::String(_))) => {
                let one = doc.get(&e.at).into_iter().collect();
                doc.set(&e.at, &Value::Array(one))?;
                doc.push(&e.at, v)?;
                true
            }
            EntryOp::Push(v) | EntryOp::Ensure(v) => {
                if contains(doc, &e.at, v) {
                    was_ours(&|p| p == e)
                } else {
                    doc.push(&e.at, v)?;
                    true
                }
            }
        };
        out.push(OwnedEntry { entry: e.clone(), ours });
    }
    Ok(out)
}

/// An entry loopx can tell from a user's without a manifest: an object, an array or a string
/// that names loopx (not `"loopx"` alone, nor a number or a flag such as `"version": 1`).
fn distinctive(v: &Value) -> bool {
    match v {
        Value::Object(_) | Value::Array(_) => v.to_string().contains("loopx"),
        Value::String(s) => s.contains("loopx") && s != "loopx",
        _ => false,
    }
}

/// `text` without loopx's `entries`, cut out by their bytes (every other byte kept), and the
/// containers they leave empty that the user's `original` did not have. With `exact` (no
/// manifest says what is loopx's), only an entry that is exactly loopx's and [`distinctive`]
/// goes.
fn strip_json(
    text: &str,
    format: Format,
    entries: &[OwnedEntry],
    original: Option<&Doc>,
    exact: bool,
) -> String {
    let mut text = text.to_owned();
    for e in entries.iter().filter(|e| e.ours) {
        let at = &e.entry.at;
        let cut = match &e.entry.op {
            EntryOp::Set(v) if exact && !distinctive(v) => None,
            EntryOp::Set(v) => span::remove_member(&text, at, exact.then_some(v)),
            EntryOp::Push(v) | EntryOp::Ensure(v) if exact && !distinctive(v) => None,
            EntryOp::Push(v) | EntryOp::Ensure(v) => span::remove_element(&text, at, v),
        };
        let Some(cut) = cut else { continue };
        text = cut;
        // A string the install made a list of (an ensured entry beside it) is a string again.
        if let (EntryOp::Ensure(_), Some(Value::String(o))) = (&e.entry.op, original.and_then(|o| o.get(at)))
            && span::get(&text, at) == Some(Value::Array(vec![Value::String(o.clone())]))
            && let Ok(t) = span::set_member(&text, at, &Value::String(o), "  ")
        {
            text = t;
        }
        for k in (1..=at.len()).rev() {
            let p = &at[..k];
            if !span::is_empty_container(&text, p) {
                if Doc::parse(format, Some(&text), "").ok().and_then(|d| d.get(p)).is_some() {
                    break;
                }
                continue;
            }
            if original.and_then(|o| o.get(p)).is_some() {
                break;
            }
            match span::remove_member(&text, p, None) {
                Some(t) => text = t,
                None => break,
            }
        }
    }
    text
}

/// What undoing one owned file means now. `exact`: no manifest recorded the install, so only
/// what is exactly and unmistakably loopx's is taken out.
fn undo(roots: &Roots, f: &OwnedFile, exact: bool) -> Result<(PlannedFile, Option<PendingWrite>)> {
    let current = read_text(&roots.abs(&f.path), &f.path)?;
    let Some(now) = current else {
        return Ok((planned(FileOp::Skipped, &f.path, Some("no longer there")), None));
    };
    let write =
        |after: Option<String>| PendingWrite { path: f.path.clone(), before: Some(hash(&now)), after };
    let untouched = hash(&now) == f.written;
    let Some(format) = f.format else {
        return Ok(if untouched {
            (planned(FileOp::Remove, &f.path, None), Some(write(None)))
        } else if now.contains(MARKER) {
            let why = "changed since loopx wrote it; left in place (delete it if you do not need it)";
            (planned(FileOp::Skipped, &f.path, Some(why)), None)
        } else {
            (planned(FileOp::Skipped, &f.path, Some("not loopx's; left as it is")), None)
        });
    };
    if untouched {
        // Nobody touched it since: the original bytes come back exactly.
        return Ok(match &f.original {
            Some(o) if *o == now => (planned(FileOp::Unchanged, &f.path, None), None),
            Some(o) => (planned(FileOp::Update, &f.path, None), Some(write(Some(o.clone())))),
            None => (planned(FileOp::Remove, &f.path, None), Some(write(None))),
        });
    }
    // Changed since: take out only loopx's entries.
    let mut doc = Doc::parse(format, Some(&now), &f.path.to_string())?;
    let original = f.original.as_deref().map(|o| Doc::parse(format, Some(o), "")).transpose().ok().flatten();
    let after = if matches!(format, Format::Json | Format::Jsonc) {
        // By the bytes: the user's formatting stays as it was around what is taken out.
        let after = strip_json(&now, format, &f.entries, original.as_ref(), exact);
        if span::is_empty_object(&after) && f.original.is_none() {
            return Ok((planned(FileOp::Remove, &f.path, None), Some(write(None))));
        }
        after
    } else {
        for e in f.entries.iter().filter(|e| e.ours) {
            let exactly_ours = match &e.entry.op {
                EntryOp::Set(v) => distinctive(v) && doc.get(&e.entry.at).as_ref() == Some(v),
                // Taken out only where an element equals it.
                EntryOp::Push(v) | EntryOp::Ensure(v) => distinctive(v),
            };
            if exact && !exactly_ours {
                continue;
            }
            strip(&mut doc, &e.entry, original.as_ref());
        }
        if doc.is_empty() && f.original.is_none() {
            return Ok((planned(FileOp::Remove, &f.path, None), Some(write(None))));
        }
        doc.render()?
    };
    let op = op_for(Some(&now), &after);
    let w = (op != FileOp::Unchanged).then(|| write(Some(after)));
    Ok((planned(op, &f.path, None), w))
}

/// Directories on the way to `path` that do not exist yet, outermost first.
fn missing_dirs(roots: &Roots, path: &HostPath) -> Vec<HostPath> {
    // A host's own directory may be missing too (a Codex never started); the project and the
    // home always exist.
    let base = HostPath::root(path.base);
    let base = (path.base == loopx_core::host::Base::HostHome && !roots.abs(&base).exists()).then_some(base);
    base.into_iter().chain(path.ancestors()).filter(|d| !roots.abs(d).exists()).collect()
}

fn by_depth(dirs: BTreeSet<HostPath>) -> Vec<HostPath> {
    let mut v: Vec<HostPath> = dirs.into_iter().collect();
    v.sort_by_key(|d| (d.base, !d.rel.is_empty(), d.rel.matches('/').count(), d.rel.clone()));
    v
}

fn refuse_pending(roots: &Roots, adapter: &str, scope: InstallScope, ours: &Ours) -> Result<()> {
    let at = manifest_path(adapter, scope)?;
    match unfinished(roots, adapter, scope, ours)? {
        None => Ok(()),
        Some(Unfinished::Foreign) => Err(foreign(adapter, &at)),
        Some(Unfinished::Ours) => Err(Error::refused(format!(
            "an earlier install or uninstall of {adapter} did not finish ({at} records it)"
        ))
        .with_hint("run the command without --dry-run: it finishes that first")),
    }
}

/// The plan that makes the host's files match `spec`, for `opts`.
pub fn plan_install(
    roots: &Roots,
    adapter: &str,
    opts: &InstallOptions,
    spec: &InstallSpec,
    ours: &Ours,
) -> Result<Plan> {
    let at = manifest_path(adapter, opts.scope)?;
    refuse_pending(roots, adapter, opts.scope, ours)?;
    let prior = load_manifest(roots, adapter, opts.scope, ours)?;
    if let Some(f) = spec.files.iter().find(|f| !ours.file(f.path())) {
        return Err(Error::internal(format!("{adapter}: {} is not among the files it installs", f.path())));
    }
    let prior_files = prior.as_ref().map(|m| m.files.clone()).unwrap_or_default();
    let mut files = Vec::new();
    let mut writes = Vec::new();
    let mut owned = Vec::new();
    for f in &spec.files {
        let path = f.path();
        let current = read_text(&roots.abs(path), path)?;
        let before = current.as_deref().map(hash);
        let prior_f = prior_files.iter().find(|p| &p.path == path);
        match f {
            ManagedFile::Text { content, .. } => {
                if !content.contains(MARKER) {
                    return Err(Error::internal(format!(
                        "{path}: an adapter's text file without the marker"
                    )));
                }
                if current.as_ref().is_some_and(|c| !c.contains(MARKER)) {
                    let why = "a file of this name exists and is not loopx's; it was left as it is";
                    files.push(planned(FileOp::Skipped, path, Some(why)));
                    continue;
                }
                let op = op_for(current.as_ref(), content);
                if op != FileOp::Unchanged {
                    writes.push(PendingWrite { path: path.clone(), before, after: Some(content.clone()) });
                }
                files.push(planned(op, path, None));
                owned.push(OwnedFile {
                    path: path.clone(),
                    format: None,
                    entries: vec![],
                    original: None,
                    written: hash(content),
                });
            }
            ManagedFile::Entries { format, entries, .. } => {
                let prior_f = prior_f.filter(|p| p.format == Some(*format));
                let original = prior_f.map_or_else(|| current.clone(), |p| p.original.clone());
                let shown = path.to_string();
                let mut doc = Doc::parse(*format, current.as_deref(), &shown)?;
                let original_doc = original
                    .as_deref()
                    .map(|o| Doc::parse(*format, Some(o), &shown))
                    .transpose()
                    .ok()
                    .flatten();
                let prior_entries = prior_f.map(|p| p.entries.as_slice()).unwrap_or_default();
                let recorded = merge(&mut doc, entries, prior_entries, original_doc.as_ref(), path)?;
                let content = doc.render()?;
                let op = op_for(current.as_ref(), &content);
                if op != FileOp::Unchanged {
                    writes.push(PendingWrite { path: path.clone(), before, after: Some(content.clone()) });
                }
                files.push(PlannedFile { reason: link_note(roots, path), ..planned(op, path, None) });
                owned.push(OwnedFile {
                    path: path.clone(),
                    format: Some(*format),
                    entries: recorded,
                    original,
                    written: hash(&content),
                });
            }
        }
    }
    // Files the last install wrote that these options no longer want.
    for p in prior_files.iter().filter(|p| !spec.files.iter().any(|f| f.path() == &p.path)) {
        let (line, write) = undo(roots, p, false)?;
        files.push(line);
        writes.extend(write);
    }
    let mut dirs: BTreeSet<HostPath> =
        prior.as_ref().map(|m| m.created_dirs.iter().cloned().collect()).unwrap_or_default();
    for w in writes.iter().filter(|w| w.after.is_some()) {
        dirs.extend(missing_dirs(roots, &w.path));
    }
    dirs.extend(missing_dirs(roots, &at));
    let then = Manifest {
        schema_version: MANIFEST_SCHEMA,
        adapter: adapter.to_owned(),
        options: opts.clone(),
        created_dirs: by_depth(dirs),
        files: owned,
        pending: None,
    };
    let manifest_changes = prior.as_ref() != Some(&then);
    files.push(planned(
        match (&prior, manifest_changes) {
            (None, _) => FileOp::Create,
            (Some(_), true) => FileOp::Update,
            (Some(_), false) => FileOp::Unchanged,
        },
        &at,
        None,
    ));
    Ok(Plan {
        adapter: adapter.to_owned(),
        scope: opts.scope,
        files,
        notes: vec![],
        manifest: at,
        writes,
        then: Some(then),
        prune_dirs: vec![],
        manifest_changes,
    })
}

/// The plan that removes what loopx installed. Without a manifest, `fallback` (everything the
/// adapter could have installed) is taken out where it matches exactly.
pub fn plan_uninstall(
    roots: &Roots,
    adapter: &str,
    scope: InstallScope,
    fallback: &InstallSpec,
    ours: &Ours,
) -> Result<Plan> {
    let at = manifest_path(adapter, scope)?;
    refuse_pending(roots, adapter, scope, ours)?;
    let manifest = load_manifest(roots, adapter, scope, ours)?;
    let host_files = ours.host_files;
    let mut files = Vec::new();
    let mut writes = Vec::new();
    let mut notes = Vec::new();
    let owned: Vec<OwnedFile> = match &manifest {
        Some(m) => m.files.clone(),
        None => {
            // No record: only what is exactly what loopx writes is loopx's. A file of ours
            // byte for byte goes; in the host's own files, an entry exactly as loopx writes it
            // goes, and one at loopx's key holding anything else is the user's, left and named.
            let mut v = Vec::new();
            for f in &fallback.files {
                let path = f.path();
                let Some(now) = read_text(&roots.abs(path), path)? else { continue };
                match f {
                    ManagedFile::Text { content, .. } if now == *content => v.push(OwnedFile {
                        path: path.clone(),
                        format: None,
                        entries: vec![],
                        original: None,
                        written: hash(&now),
                    }),
                    ManagedFile::Text { .. } if now.contains(MARKER) => notes.push(format!(
                        "{path} carries loopx's marker but is not what this loopx writes; left as it is"
                    )),
                    ManagedFile::Text { .. } => {}
                    ManagedFile::Entries { format, entries, .. } => {
                        let doc = Doc::parse(*format, Some(&now), &path.to_string())?;
                        for e in entries {
                            if let EntryOp::Set(want) = &e.op
                                && doc.get(&e.at).is_some_and(|have| have != *want)
                            {
                                notes.push(format!(
                                    "{path}: {} is not what loopx writes; left as it is",
                                    e.at.join(".")
                                ));
                            }
                        }
                        v.push(OwnedFile {
                            path: path.clone(),
                            format: Some(*format),
                            entries: entries
                                .iter()
                                .map(|e| OwnedEntry { entry: e.clone(), ours: true })
                                .collect(),
                            original: Some(now.clone()),
                            written: String::new(),
                        });
                    }
                }
            }
            v
        }
    };
    for f in &owned {
        let (line, write) = undo(roots, f, manifest.is_none())?;
        if manifest.is_none() && line.op == FileOp::Unchanged {
            continue;
        }
        files.push(line);
        writes.extend(write);
    }
    if manifest.is_none() && !writes.is_empty() {
        notes
            .insert(0, format!("no install manifest ({at}); removed only what is exactly what loopx writes"));
    }
    if manifest.is_some() {
        files.push(planned(FileOp::Remove, &at, None));
    }
    let mut prune: Vec<HostPath> = manifest.as_ref().map(|m| m.created_dirs.clone()).unwrap_or_default();
    prune.reverse(); // deepest first
    // What the host wrote by itself into a directory loopx created goes with it, if unchanged.
    for (dir, f) in prune.iter().flat_map(|d| host_files.iter().map(move |f| (d, f))) {
        let rel = if dir.rel.is_empty() { f.name.to_owned() } else { format!("{}/{}", dir.rel, f.name) };
        let path = HostPath { base: dir.base, rel };
        if let Some(now) = read_text(&roots.abs(&path), &path)?
            && now == f.content
        {
            files.insert(files.len() - 1, planned(FileOp::Remove, &path, Some("the host wrote it here")));
            writes.push(PendingWrite { path, before: Some(hash(&now)), after: None });
        }
    }
    Ok(Plan {
        adapter: adapter.to_owned(),
        scope,
        files,
        notes,
        manifest_changes: manifest.is_some(),
        manifest: at,
        writes,
        then: None,
        prune_dirs: prune,
    })
}

fn manifest_text(m: &Manifest) -> Result<String> {
    let mut text = serde_json::to_string_pretty(m)
        .map_err(|e| Error::internal(format!("cannot encode the manifest: {e}")))?;
    text.push('\n');
    Ok(text)
}

fn write_manifest(roots: &Roots, at: &HostPath, text: &str) -> Result<()> {
    let path = roots.abs(at);
    if let Some(dir) = path.parent() {
        kfs::create_dir_all(dir)?;
    }
    kfs::atomic_write(&path, text.as_bytes())
}

/// Where writing `path` really goes: a symbolic link (a dotfile manager's, say) stays a link,
/// and the file it points to is written.
fn write_target(path: &Path) -> Result<PathBuf> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(path).map_err(|e| {
            Error::refused(format!("{} is a link to a file that cannot be reached ({e})", path.display()))
                .with_hint("fix or remove the link, then run the command again")
        }),
        _ => Ok(path.to_path_buf()),
    }
}

/// Says so when `path` is a link whose target loopx edits.
fn link_note(roots: &Roots, path: &HostPath) -> Option<String> {
    let abs = roots.abs(path);
    let target = write_target(&abs).ok().filter(|t| *t != abs)?;
    Some(format!("a link: its target {} is edited, the link is kept", target.display()))
}

fn do_write(roots: &Roots, w: &PendingWrite) -> Result<()> {
    let path = write_target(&roots.abs(&w.path))?;
    match &w.after {
        Some(content) => {
            if let Some(dir) = path.parent() {
                kfs::create_dir_all(dir)?;
            }
            kfs::atomic_write(&path, content.as_bytes())
        }
        None => kfs::remove_file(&path),
    }
}

fn finish(roots: &Roots, at: &HostPath, then: Option<&Manifest>, prune: &[HostPath]) -> Result<()> {
    match then {
        Some(m) => write_manifest(roots, at, &manifest_text(m)?)?,
        None => kfs::remove_file(&roots.abs(at))?,
    }
    for d in prune {
        kfs::remove_dir_if_empty(&roots.abs(d))?;
    }
    Ok(())
}

/// Applies `plan`: this machine's witness of it and the manifest with the plan as pending
/// first, then each host file atomically, then the manifest as it ends up. `fault` names a
/// test-only crash point (`install-after-first-write`).
pub fn apply(roots: &Roots, plan: &Plan, fault: Option<&str>, ours: &Ours) -> Result<()> {
    apply_until(roots, plan, fault, ours, None)
}

/// [`apply`], stopping after `stop_after` host file writes as a crash would (for the
/// conformance suite's half-applied plans).
pub fn apply_until(
    roots: &Roots,
    plan: &Plan,
    fault: Option<&str>,
    ours: &Ours,
    stop_after: Option<usize>,
) -> Result<()> {
    if !plan.changes() {
        return Ok(());
    }
    let pending = Pending {
        writes: plan.writes.clone(),
        then: plan.then.clone().map(Box::new),
        prune_dirs: plan.prune_dirs.clone(),
    };
    // The journal: a manifest that says what is about to change, written before anything does.
    let journal = match &plan.then {
        Some(m) => Manifest { pending: Some(pending), ..m.clone() },
        None => match load_manifest(roots, &plan.adapter, plan.scope, ours)? {
            Some(m) => Manifest { pending: Some(pending), ..m },
            None if plan.writes.is_empty() => return Ok(()),
            None => Manifest {
                schema_version: MANIFEST_SCHEMA,
                adapter: plan.adapter.clone(),
                options: placeholder_options(plan.scope)?,
                created_dirs: missing_dirs(roots, &plan.manifest),
                files: vec![],
                pending: Some(Pending {
                    prune_dirs: missing_dirs(roots, &plan.manifest).into_iter().rev().collect(),
                    ..pending
                }),
            },
        },
    };
    // Everything the plan will touch is checked before anything is written.
    preflight(roots, plan)?;
    let manifest_abs = roots.abs(&plan.manifest);
    let manifest_before = kfs::read_optional(&manifest_abs)?;
    let manifest_dirs = missing_dirs(roots, &plan.manifest);
    let prune = journal.pending.as_ref().map(|p| p.prune_dirs.clone()).unwrap_or_default();
    let journal = manifest_text(&journal)?;
    // This machine's word that it starts this very plan, kept where the project cannot write.
    let witnessed = ours.vouch(&manifest_abs, &journal)?;
    write_manifest(roots, &plan.manifest, &journal)?;
    // What each write replaced, to give it back if a later one fails.
    let mut done: Vec<(PathBuf, Option<Vec<u8>>, Vec<HostPath>)> = Vec::new();
    for (i, w) in plan.writes.iter().enumerate() {
        if stop_after == Some(i) {
            return Ok(());
        }
        let target = write_target(&roots.abs(&w.path))?;
        let before = kfs::read_optional(&target)?;
        let made = missing_dirs(roots, &w.path);
        let wrote = if i == 1 && fault == Some("install-fail-at-second-write") {
            Err(Error::io("write", &target, &std::io::Error::other("no space left on device (injected)")))
        } else {
            do_write(roots, w)
        };
        if let Err(e) = wrote {
            // Give back what was written, then the manifest as it was: a refused install
            // leaves the tree as it found it. Should that fail too, the journal stays, and the
            // next install, uninstall or doctor finishes the plan.
            let undone = (|| -> Result<()> {
                for (path, bytes, dirs) in done.iter().rev() {
                    match bytes {
                        Some(b) => kfs::atomic_write(path, b)?,
                        None => kfs::remove_file(path)?,
                    }
                    for d in dirs.iter().rev() {
                        kfs::remove_dir_if_empty(&roots.abs(d))?;
                    }
                }
                for d in made.iter().rev() {
                    kfs::remove_dir_if_empty(&roots.abs(d))?;
                }
                match &manifest_before {
                    Some(b) => kfs::atomic_write(&manifest_abs, b)?,
                    None => {
                        kfs::remove_file(&manifest_abs)?;
                        for d in manifest_dirs.iter().rev() {
                            kfs::remove_dir_if_empty(&roots.abs(d))?;
                        }
                    }
                }
                ours.unvouch(&manifest_abs, &witnessed)
            })();
            return Err(match undone {
                Ok(()) => e.with_hint("nothing was changed: what was written is back as it was"),
                Err(_) => e,
            });
        }
        done.push((target, before, made));
        if i == 0 && fault == Some("install-after-first-write") {
            std::process::abort();
        }
    }
    finish(roots, &plan.manifest, plan.then.as_ref(), &prune)?;
    ours.unvouch(&manifest_abs, &witnessed)
}

/// Refuses a plan that cannot be carried out whole, before anything is written: a file behind
/// a link that leads nowhere, a file or directory marked read-only (a read-only file is not
/// replaced by a rename), something that is not a regular file.
fn preflight(roots: &Roots, plan: &Plan) -> Result<()> {
    let paths = plan.writes.iter().map(|w| &w.path).chain(std::iter::once(&plan.manifest));
    for p in paths {
        let target = write_target(&roots.abs(p))?;
        let refuse = |why: &str| {
            Error::refused(format!("{p}: {} {why}; nothing was changed", target.display()))
                .with_hint("fix its permissions (or the link), then run the command again")
        };
        match std::fs::metadata(&target) {
            Ok(m) if !m.is_file() => return Err(refuse("is not a regular file")),
            Ok(m) if m.permissions().readonly() => return Err(refuse("is read-only")),
            _ => {}
        }
        let dir = target.ancestors().skip(1).find(|d| d.exists());
        if let Some(d) = dir {
            match std::fs::metadata(d) {
                Ok(m) if !m.is_dir() => return Err(refuse("is under something that is not a directory")),
                Ok(m) if m.permissions().readonly() => {
                    return Err(Error::refused(format!(
                        "{p}: the directory {} is read-only; nothing was changed",
                        d.display()
                    ))
                    .with_hint("fix its permissions, then run the command again"));
                }
                _ => {}
            }
        }
    }
    Ok(())
}

fn placeholder_options(scope: InstallScope) -> Result<InstallOptions> {
    Ok(InstallOptions {
        scope,
        features: BTreeSet::new(),
        loopx: "loopx".to_owned(),
        goal: loopx_core::GoalId::new("main")?,
        agent: None,
    })
}

/// Finishes a plan a crash interrupted on this machine. Returns what it did, or `None` when
/// nothing was pending. A plan this machine did not record starting is refused, and so is one
/// whose files someone changed in the meantime; either way nothing is written.
pub fn recover(roots: &Roots, adapter: &str, scope: InstallScope, ours: &Ours) -> Result<Option<String>> {
    let at = manifest_path(adapter, scope)?;
    let Some((m, text)) = load_manifest_text(roots, adapter, scope, ours)? else { return Ok(None) };
    let Some(p) = m.pending else { return Ok(None) };
    let manifest_abs = roots.abs(&at);
    if !ours.vouched(&manifest_abs, &text) {
        return Err(foreign(adapter, &at));
    }
    let mut todo = Vec::new();
    for w in &p.writes {
        let now = read_text(&roots.abs(&w.path), &w.path)?;
        if now.as_ref() == w.after.as_ref() {
            continue;
        }
        if now.as_deref().map(hash) != w.before {
            return Err(Error::refused(format!(
                "{} changed while an install of {adapter} was interrupted; loopx will not overwrite it",
                w.path
            ))
            .with_hint(format!("compare it with the plan in {at}, fix it by hand, then remove {at}")));
        }
        todo.push(w);
    }
    for w in &todo {
        do_write(roots, w)?;
    }
    finish(roots, &at, p.then.as_deref(), &p.prune_dirs)?;
    ours.unvouch(&manifest_abs, &[])?;
    Ok(Some(format!(
        "finished an interrupted {} of {adapter} ({} file(s) written)",
        match p.then {
            Some(_) => "install",
            None => "uninstall",
        },
        todo.len()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn roots() -> (tempfile::TempDir, Roots) {
        let d = tempfile::tempdir().unwrap();
        let r = Roots { project: d.path().join("p"), home: d.path().join("h"), host_home: None };
        std::fs::create_dir_all(&r.project).unwrap();
        std::fs::create_dir_all(&r.home).unwrap();
        (d, r)
    }

    fn ours(d: &tempfile::TempDir) -> Ours {
        Ours::new("t", InstallScope::Project, &spec("x"), &[], d.path().join("witness")).unwrap()
    }

    fn opts() -> InstallOptions {
        placeholder_options(InstallScope::Project).unwrap()
    }

    fn spec(hook: &str) -> InstallSpec {
        InstallSpec {
            files: vec![
                ManagedFile::Text {
                    path: HostPath::project("a/cmd.md").unwrap(),
                    content: format!("<!-- {MARKER} -->\nhi\n"),
                },
                ManagedFile::Entries {
                    path: HostPath::project("a/settings.json").unwrap(),
                    format: Format::Json,
                    entries: vec![
                        Entry::push(&["hooks", "Stop"], json!({"command": hook})),
                        Entry::ensure(&["allow"], json!("mcp__loopx")),
                        Entry::set(&["servers", "loopx"], json!({"command": "loopx"})),
                    ],
                },
            ],
        }
    }

    fn tree(r: &Roots) -> Vec<(String, String)> {
        fn walk(dir: &Path, base: &Path, out: &mut Vec<(String, String)>) {
            for e in std::fs::read_dir(dir).unwrap().flatten() {
                let p = e.path();
                let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
                if p.is_dir() {
                    out.push((rel.clone() + "/", String::new()));
                    walk(&p, base, out);
                } else {
                    out.push((rel, std::fs::read_to_string(&p).unwrap()));
                }
            }
        }
        let mut v = Vec::new();
        walk(&r.project, &r.project, &mut v);
        v.sort();
        v
    }

    #[test]
    fn round_trip_with_a_users_entries_and_an_option_change() {
        let (d, r) = roots();
        let ours = &ours(&d);
        std::fs::create_dir_all(r.project.join("a")).unwrap();
        std::fs::write(
            r.project.join("a/settings.json"),
            "{\"allow\": [\"mcp__loopx\", \"Bash\"], \"x\": 1}\n",
        )
        .unwrap();
        let before = tree(&r);
        let plan = plan_install(&r, "t", &opts(), &spec("loopx hook t stop"), ours).unwrap();
        apply(&r, &plan, None, ours).unwrap();
        let again = plan_install(&r, "t", &opts(), &spec("loopx hook t stop"), ours).unwrap();
        assert!(!again.changes(), "{:?}", again.files);
        // Another hook command replaces ours, in place; the user's allow entry stays theirs.
        apply(
            &r,
            &plan_install(&r, "t", &opts(), &spec("/bin/loopx hook t stop"), ours).unwrap(),
            None,
            ours,
        )
        .unwrap();
        let s: Value =
            serde_json::from_str(&std::fs::read_to_string(r.project.join("a/settings.json")).unwrap())
                .unwrap();
        assert_eq!(s["hooks"]["Stop"], json!([{"command": "/bin/loopx hook t stop"}]));
        let un = plan_uninstall(&r, "t", InstallScope::Project, &spec("x"), ours).unwrap();
        apply(&r, &un, None, ours).unwrap();
        assert_eq!(tree(&r), before, "bytes and directories as they were");
    }

    #[test]
    fn a_users_value_under_our_key_is_refused() {
        let (d, r) = roots();
        std::fs::create_dir_all(r.project.join("a")).unwrap();
        std::fs::write(
            r.project.join("a/settings.json"),
            "{\"servers\": {\"loopx\": {\"command\": \"mine\"}}}",
        )
        .unwrap();
        let e = plan_install(&r, "t", &opts(), &spec("h"), &ours(&d)).unwrap_err();
        assert!(e.message.contains("servers.loopx already holds"), "{}", e.message);
    }
}
