//! Opening a project's store, creating `.loopx/`, and reading and writing `project.json`.

use std::fs;
use std::path::Path;
use std::sync::{Arc, Mutex};

use loopx_core::{Clock, Error, Result};

use crate::Reporter;
use crate::fs as kfs;
use crate::project::{Layout, ProjectFile, STORE_SCHEMA_VERSION, StoreRef};

use super::file::FileStore;
use super::mark::FileMark;
use super::options::StoreOptions;
use super::traits::Store;

/// Opens the store of the project at a directory: the command line's opener knows every kind
/// of store; [`open_file_store`] knows the file store only.
pub type StoreOpener = Arc<
    dyn Fn(&Path, Arc<dyn Clock>, Arc<dyn Reporter>, &StoreOptions) -> Result<Box<dyn Store>> + Send + Sync,
>;

/// The opener of file stores (a project whose state is elsewhere is refused, naming it).
pub fn open_file_store(
    root: &Path,
    clock: Arc<dyn Clock>,
    reporter: Arc<dyn Reporter>,
    options: &StoreOptions,
) -> Result<Box<dyn Store>> {
    Ok(Box::new(FileStore::open(root, clock, reporter, options.clone())?))
}

/// What `init` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitOutcome {
    pub created_project: bool,
}

/// What a project keeps its state in, as its `.loopx/project.json` says: this directory's files,
/// or another store (which only the command line opens).
#[derive(Debug)]
pub enum Opened {
    Files(Box<FileStore>),
    Elsewhere(StoreRef),
}

impl FileStore {
    /// Opens the project at `root`, which must hold `.loopx/project.json` and keep its state in
    /// `.loopx/`.
    pub fn open(
        root: &Path,
        clock: Arc<dyn Clock>,
        reporter: Arc<dyn Reporter>,
        options: StoreOptions,
    ) -> Result<Self> {
        match Self::open_or_elsewhere(root, clock, reporter, options)? {
            Opened::Files(store) => Ok(*store),
            Opened::Elsewhere(s) => Err(kept_elsewhere(root, &s)),
        }
    }

    /// Opens the project at `root` if it keeps its state in `.loopx/`, or says which store it
    /// keeps it in, reading `project.json` once either way.
    pub fn open_or_elsewhere(
        root: &Path,
        clock: Arc<dyn Clock>,
        reporter: Arc<dyn Reporter>,
        options: StoreOptions,
    ) -> Result<Opened> {
        let layout = Layout::new(root);
        kfs::check_state_file(&layout.state_dir())?;
        kfs::check_state_file(&layout.project_file())?;
        if !layout.project_file().is_file() {
            return Err(Error::not_found(format!(
                "{} is not a loopx project (no .loopx/project.json)",
                root.display()
            ))
            .with_hint("create one with: loopx init --goal-id main --objective \"…\""));
        }
        let project = match read_project_marked(&layout) {
            Ok((ProjectFile { store: Some(s), .. }, _)) => return Ok(Opened::Elsewhere(s)),
            Ok((p, mark)) => Some((mark, p)),
            // A damaged project.json is the file store's to report, and `doctor --repair`'s to
            // mend.
            Err(_) => None,
        };
        Ok(Opened::Files(Box::new(Self::new(layout, clock, reporter, options, project))))
    }

    /// A store on `layout` that has read `project` (with its file's mark) already, if anything.
    fn new(
        layout: Layout,
        clock: Arc<dyn Clock>,
        reporter: Arc<dyn Reporter>,
        options: StoreOptions,
        project: Option<(FileMark, ProjectFile)>,
    ) -> Self {
        Self {
            layout,
            clock,
            reporter,
            options,
            kept: Mutex::default(),
            wrote: Mutex::default(),
            project: Mutex::new(project),
            glanced: Mutex::default(),
        }
    }

    /// Creates `.loopx/` (with its `.gitignore` and `project.json`) at `root`, or reuses the
    /// one that is there. Never overwrites existing state.
    pub fn init(
        root: &Path,
        clock: Arc<dyn Clock>,
        reporter: Arc<dyn Reporter>,
        options: StoreOptions,
    ) -> Result<(Self, InitOutcome)> {
        let layout = Layout::new(root);
        if !root.is_dir() {
            return Err(Error::not_found(format!("{} is not a directory", root.display()))
                .with_hint("pass the project's directory with --project DIR"));
        }
        let store = Self::new(layout, clock, reporter, options, None);
        let created_project = !store.layout.project_file().exists();
        if !created_project {
            // Refuse to build on an unreadable project.json, or on one that points elsewhere.
            if let Some(s) = store.project()?.store {
                return Err(kept_elsewhere(root, &s));
            }
        }
        create_state_dir(&store.layout)?;
        if created_project {
            let _guard = store.lock_project()?;
            if !store.layout.project_file().exists() {
                store.write_project(&ProjectFile::new())?;
            }
        }
        Ok((store, InitOutcome { created_project }))
    }
}

/// Reads `.loopx/project.json`, refusing one that is damaged or of another version.
pub fn read_project(layout: &Layout) -> Result<ProjectFile> {
    read_project_marked(layout).map(|(p, _)| p)
}

/// [`read_project`], with the mark of the very file read.
pub(super) fn read_project_marked(layout: &Layout) -> Result<(ProjectFile, FileMark)> {
    let path = layout.project_file();
    let read = || -> std::io::Result<(Vec<u8>, FileMark)> {
        let file = fs::File::open(&path)?;
        let meta = file.metadata()?;
        Ok((kfs::read_whole(&file, meta.len())?, FileMark::from(&meta)))
    };
    let (bytes, mark) = read().map_err(|e| Error::io("read", &path, &e))?;
    let p: ProjectFile = serde_json::from_slice(&bytes)
        .map_err(|e| Error::integrity(format!("{} is not valid: {e}", path.display())))?;
    if p.schema_version != STORE_SCHEMA_VERSION {
        return Err(Error::integrity(format!(
            "{} has schema_version {}; this loopx reads version {STORE_SCHEMA_VERSION}",
            path.display(),
            p.schema_version
        ))
        .with_hint("use the loopx version that wrote this project"));
    }
    Ok((p, mark))
}

/// Creates `.loopx/` at `root` pointing at `store`, for a project whose state is kept there
/// (or reuses the one that already points there). A project that keeps its state in `.loopx/`
/// or in another store is refused: `loopx store migrate` moves state, `init` never does.
pub fn init_pointer(root: &Path, store: &StoreRef) -> Result<InitOutcome> {
    let layout = Layout::new(root);
    if !root.is_dir() {
        return Err(Error::not_found(format!("{} is not a directory", root.display()))
            .with_hint("pass the project's directory with --project DIR"));
    }
    if layout.project_file().exists() {
        let p = read_project(&layout)?;
        return match &p.store {
            Some(s) if s == store => Ok(InitOutcome { created_project: false }),
            Some(s) => Err(Error::refused(format!(
                "{} already keeps its state in {} at {} (project {})",
                root.display(),
                s.kind,
                s.url,
                s.project
            ))),
            None => Err(Error::refused(format!("{} already keeps its state in .loopx/", root.display()))
                .with_hint(format!("move it there with: loopx store migrate --to {}", store.url))),
        };
    }
    create_state_dir(&layout)?;
    let p = ProjectFile { store: Some(store.clone()), ..ProjectFile::new() };
    write_project_file(&layout, &p)?;
    Ok(InitOutcome { created_project: true })
}

/// Creates `.loopx/` with the `.gitignore` that keeps it out of the repository.
fn create_state_dir(layout: &Layout) -> Result<()> {
    kfs::create_dir_all(&layout.state_dir())?;
    if !layout.gitignore().exists() {
        kfs::atomic_write(&layout.gitignore(), b"# loopx state is local; see loopx doctor\n*\n")?;
    }
    Ok(())
}

/// Writes `.loopx/project.json` atomically.
pub fn write_project_file(layout: &Layout, p: &ProjectFile) -> Result<()> {
    let mut bytes = serde_json::to_vec_pretty(p)
        .map_err(|e| Error::internal(format!("cannot encode project.json: {e}")))?;
    bytes.push(b'\n');
    kfs::atomic_write(&layout.project_file(), &bytes)
}

/// The refusal to keep a project's state in `.loopx/` when its `project.json` names store `s`.
fn kept_elsewhere(root: &Path, s: &StoreRef) -> Error {
    Error::refused(format!(
        "{} keeps its state in {} at {} (project {}), not in .loopx/",
        root.display(),
        s.kind,
        s.url,
        s.project
    ))
    .with_hint("use the loopx command line, which opens that store (loopx status)")
}
