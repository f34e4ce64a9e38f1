//! The only module that writes durable files. Atomic write = temp file in the same directory
//! → write → fsync → rename → fsync the directory; views derived from the log skip the fsyncs.
//!
//! A path inside `.loopx/` is written only through real directories: every component from
//! `.loopx` down is checked not to be a symbolic link before anything is written
//! ([`refuse_links`]), so a link planted there (`.loopx/goals/g2 -> /elsewhere`, or `.loopx`
//! itself) never sends a write outside the project. Host files an install edits are outside
//! `.loopx/` and keep their links by design. Within one transaction ([`RealDirs`]) a directory
//! found real is not looked at again; every file is, each time.

use std::cell::RefCell;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use loopx_core::{Error, Result};

thread_local! {
    /// The directories found real (directories, not links) on this thread since its
    /// [`RealDirs`] began; `None` outside one.
    static REAL_DIRS: RefCell<Option<Vec<PathBuf>>> = const { RefCell::new(None) };
}

/// One transaction's checks of the directories on the way to its files: while it lives, a
/// directory of `.loopx/` found real on this thread is not looked at again (a commit writes five
/// files in one goal's directory, and each write checked `.loopx`, `goals` and the goal's
/// directory anew). The checks were never atomic with the writes that follow them: they refuse
/// a link planted in `.loopx/`, which one check in a transaction, under the goal's lock, refuses
/// as surely as five. Files are checked each time. Begun while one lives, it is that one.
#[derive(Debug)]
pub(crate) struct RealDirs {
    /// Whether this one began the thread's memory (and forgets it when dropped).
    began: bool,
    /// The memory is this thread's: the scope must end on the thread it began on.
    _thread: std::marker::PhantomData<*const ()>,
}

impl RealDirs {
    pub fn begin() -> RealDirs {
        let began = REAL_DIRS.with(|r| {
            let mut r = r.borrow_mut();
            let began = r.is_none();
            if began {
                *r = Some(Vec::new());
            }
            began
        });
        RealDirs { began, _thread: std::marker::PhantomData }
    }

    fn known(dir: &Path) -> bool {
        REAL_DIRS.with(|r| r.borrow().as_ref().is_some_and(|dirs| dirs.iter().any(|d| d == dir)))
    }

    fn found(dir: &Path) {
        REAL_DIRS.with(|r| {
            if let Some(dirs) = r.borrow_mut().as_mut()
                && !dirs.iter().any(|d| d == dir)
            {
                dirs.push(dir.to_owned());
            }
        });
    }
}

impl Drop for RealDirs {
    fn drop(&mut self) {
        if self.began {
            REAL_DIRS.with(|r| r.borrow_mut().take());
        }
    }
}

/// Refuses `path` when a component of it from `.loopx` down (the file itself included) is a
/// symbolic link or, for a directory on the way, not a directory. A path with no `.loopx`
/// component is not loopx's state and is not checked.
pub(crate) fn refuse_links(path: &Path) -> Result<()> {
    refuse_links_from(path, 0)
}

/// [`refuse_links`] from the `skip`th component up: `path`'s directories alone when `skip` is 1.
fn refuse_links_from(path: &Path, skip: usize) -> Result<()> {
    let Some(top) = path.ancestors().position(|a| a.file_name().is_some_and(|n| n == ".loopx")) else {
        return Ok(());
    };
    for (i, a) in path.ancestors().take(top + 1).enumerate().skip(skip) {
        if i > 0 && RealDirs::known(a) {
            continue;
        }
        match fs::symlink_metadata(a) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(Error::integrity(format!(
                    "{} is a symbolic link; loopx keeps its state only in real files and directories inside .loopx/ and will not write through it",
                    a.display()
                ))
                .with_hint("replace the link with the directory or file it points to (or remove it), then run `loopx doctor`"));
            }
            Ok(m) if i > 0 && !m.is_dir() => {
                return Err(Error::integrity(format!("{} is not a directory", a.display())));
            }
            Ok(m) if m.is_dir() => RealDirs::found(a),
            _ => {}
        }
    }
    Ok(())
}

/// Writes `bytes` to `path` atomically: readers see the old file or the new one, never a mix.
/// Keeps the existing file's permissions.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    atomic_write_with(path, bytes, Sync::Durable, &|| {})
}

/// Whether an atomic write waits for the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sync {
    /// fsync the file before the rename and the directory after it: the write survives a
    /// power loss.
    Durable,
    /// A view derived from the log (snapshot, GOAL.md): atomic for every reader, but not
    /// waited for. After a power loss it may be old, empty, torn or missing, which the next command
    /// notices (it is checked against the log) and rebuilds; a process killed at any point
    /// loses nothing, as the page cache outlives it.
    View,
}

/// [`atomic_write`], calling `before_rename` once the new content is in its temporary file (a
/// seam for crash tests); with [`Sync::View`], nothing is fsynced.
pub(crate) fn atomic_write_with(
    path: &Path,
    bytes: &[u8],
    sync: Sync,
    before_rename: &dyn Fn(),
) -> Result<()> {
    atomic_write_parts(path, &[bytes], sync, before_rename)
}

/// [`atomic_write_with`] of `parts` one after the other, without joining them first.
pub(crate) fn atomic_write_parts(
    path: &Path,
    parts: &[&[u8]],
    sync: Sync,
    before_rename: &dyn Fn(),
) -> Result<()> {
    refuse_links(path)?;
    let dir = parent(path)?;
    let mut tmp = tempfile_in(dir, path)?;
    let (file, tmp_path) = (&mut tmp.0, tmp.1.clone());
    let result = (|| {
        for bytes in parts {
            file.write_all(bytes).map_err(|e| Error::io("write", &tmp_path, &e))?;
        }
        if let Ok(meta) = fs::metadata(path) {
            let _ = file.set_permissions(meta.permissions());
        }
        if sync == Sync::Durable {
            file.sync_all().map_err(|e| Error::io("sync", &tmp_path, &e))?;
        }
        before_rename();
        fs::rename(&tmp_path, path).map_err(|e| Error::io("replace", path, &e))?;
        if sync == Sync::Durable {
            sync_dir(dir)?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp_path);
    }
    result
}

/// Writes a view ([`swap_in_view`]) unless the file already holds `bytes`: `existing`, what the
/// caller read of it (`None`: missing or unreadable). Returns whether it wrote.
pub(crate) fn write_view_if_changed(path: &Path, bytes: &[u8], existing: Option<&[u8]>) -> Result<bool> {
    if existing == Some(bytes) {
        return Ok(false);
    }
    swap_in_view(path, &[bytes], &|| {}).map(|()| true)
}

/// Writes a view ([`Sync::View`]) of `parts` atomically, for a caller that holds the goal's
/// lock: into the view's spare copy (`.<name>.spare`, the version before the current one),
/// which is then exchanged with the view in one step. Readers see the old view or the new one.
///
/// Replacing a file by renaming over it costs a filesystem more than the write: the replaced
/// file is freed (ext4 mounted with `discard` trims its blocks before the rename returns), and
/// ext4 starts writing the new one out first (`auto_da_alloc`); together about 100 µs against
/// 5 µs for an exchange (BENCHMARKS.md, "Views swapped in"). Nothing is freed here: the spare
/// is written over in place, so a lock-free reader still reading the view two writes back may
/// read it torn. Such a reader's checks against the log fail (its hash cannot match the root the log
/// records), and it reads again under the lock, where no one writes.
///
/// A spare that another name shares (a backup's hard link) is left to it and a new one made.
/// Where the filesystem cannot exchange, the spare is renamed over the view instead.
pub(crate) fn swap_in_view(path: &Path, parts: &[&[u8]], before_swap: &dyn Fn()) -> Result<()> {
    if !cfg!(any(target_os = "linux", target_os = "android", target_vendor = "apple")) {
        return atomic_write_parts(path, parts, Sync::View, before_swap);
    }
    refuse_links(path)?;
    let spare = spare_path(path)?;
    let result = (|| {
        let mut file = open_spare(&spare)?;
        let len: usize = parts.iter().map(|p| p.len()).sum();
        for bytes in parts {
            file.write_all(bytes).map_err(|e| Error::io("write", &spare, &e))?;
        }
        let meta = file.metadata().map_err(|e| Error::io("read", &spare, &e))?;
        if meta.len() > len as u64 {
            file.set_len(len as u64).map_err(|e| Error::io("truncate", &spare, &e))?;
        }
        if let Ok(target) = fs::metadata(path)
            && target.permissions() != meta.permissions()
        {
            let _ = file.set_permissions(target.permissions());
        }
        drop(file);
        before_swap();
        exchange(&spare, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&spare);
    }
    result
}

/// Where [`swap_in_view`] keeps the spare copy of view `path`.
fn spare_path(path: &Path) -> Result<std::path::PathBuf> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("view");
    Ok(parent(path)?.join(format!(".{name}.spare")))
}

/// The spare at `spare`, opened for writing over from its start; made anew when it is missing
/// or another name shares it. A spare that is a symbolic link is refused.
fn open_spare(spare: &Path) -> Result<File> {
    let file = no_follow(OpenOptions::new().write(true).create(true))
        .open(spare)
        .map_err(|e| Error::io("open", spare, &e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let meta = file.metadata().map_err(|e| Error::io("read", spare, &e))?;
        if meta.nlink() > 1 || !meta.is_file() {
            drop(file);
            fs::remove_file(spare).map_err(|e| Error::io("remove", spare, &e))?;
            return no_follow(OpenOptions::new().write(true).create_new(true))
                .open(spare)
                .map_err(|e| Error::io("create", spare, &e));
        }
    }
    Ok(file)
}

/// Exchanges `spare` and `path` in one step; renames `spare` to `path` where `path` does not
/// exist yet or the filesystem cannot exchange.
#[cfg(any(target_os = "linux", target_os = "android", target_vendor = "apple"))]
fn exchange(spare: &Path, path: &Path) -> Result<()> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    exchange_or_rename(spare, path, &|| renameat_with(CWD, spare, CWD, path, RenameFlags::EXCHANGE))
}

#[cfg(not(any(target_os = "linux", target_os = "android", target_vendor = "apple")))]
fn exchange(spare: &Path, path: &Path) -> Result<()> {
    fs::rename(spare, path).map_err(|e| Error::io("replace", path, &e))
}

/// [`exchange`] with the exchange itself given: the errors that say it cannot be done here
/// (nothing at `path`; a filesystem, or a kernel, without it) fall back to a rename.
#[cfg(any(target_os = "linux", target_os = "android", target_vendor = "apple"))]
fn exchange_or_rename(
    spare: &Path,
    path: &Path,
    exchange: &dyn Fn() -> rustix::io::Result<()>,
) -> Result<()> {
    use rustix::io::Errno;
    match exchange() {
        Ok(()) => Ok(()),
        Err(Errno::NOENT | Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => {
            fs::rename(spare, path).map_err(|e| Error::io("replace", path, &e))
        }
        Err(e) => Err(Error::io("replace", path, &e.into())),
    }
}

/// Opening without following a symbolic link: a state file that is a link is refused (the
/// open fails with `ELOOP`) instead of writing through it to wherever it points.
pub fn no_follow(o: &mut OpenOptions) -> &mut OpenOptions {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32);
    }
    o
}

/// Refuses a state path that is a symbolic link or not a regular file (a missing one is fine):
/// loopx keeps its state only in regular files inside `.loopx/`, and writes nowhere else.
/// Returns what it found there, `None` for nothing.
pub(crate) fn check_state_file(path: &Path) -> Result<Option<fs::Metadata>> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => Err(Error::integrity(format!(
            "{} is a symbolic link; loopx keeps its state only in regular files inside .loopx/ and will not follow it",
            path.display()
        ))
        .with_hint("replace the link with the file it points to (or remove it), then run `loopx doctor`")),
        Ok(m) if !m.is_file() && !m.is_dir() => Err(Error::integrity(format!(
            "{} is not a regular file; loopx will not read or write it",
            path.display()
        ))),
        Ok(m) => {
            if m.is_dir() {
                RealDirs::found(path);
            }
            Ok(Some(m))
        }
        Err(_) => Ok(None),
    }
}

/// [`check_state_file`] and [`refuse_links`] at once, the path itself looked at once: what a
/// file about to be opened for writing passes.
pub(crate) fn check_state_path(path: &Path) -> Result<()> {
    check_state_file(path)?;
    refuse_links_from(path, 1)
}

/// Appends one line and makes it durable before returning.
pub(crate) fn append_durable(file: &mut File, path: &Path, line: &[u8]) -> Result<()> {
    file.write_all(line).map_err(|e| Error::io("append to", path, &e))?;
    file.sync_data().map_err(|e| Error::io("sync", path, &e))
}

/// Appends without waiting for the disk, for a view derived from the log (see [`Sync::View`]).
pub(crate) fn append_view(file: &mut File, path: &Path, bytes: &[u8]) -> Result<()> {
    file.write_all(bytes).map_err(|e| Error::io("append to", path, &e))
}

/// Opens a file for appending, creating it.
pub(crate) fn open_append(path: &Path) -> Result<File> {
    check_state_path(path)?;
    no_follow(OpenOptions::new().create(true).append(true))
        .open(path)
        .map_err(|e| Error::io("open", path, &e))
}

/// Cuts `path` to `len` bytes durably (used to drop a torn final line).
pub(crate) fn truncate_durable(path: &Path, len: u64) -> Result<()> {
    check_state_path(path)?;
    let file =
        no_follow(OpenOptions::new().write(true)).open(path).map_err(|e| Error::io("open", path, &e))?;
    file.set_len(len).map_err(|e| Error::io("truncate", path, &e))?;
    file.sync_all().map_err(|e| Error::io("sync", path, &e))
}

/// How much of a log's end one read takes while looking for where its last line ends.
pub(crate) const TAIL_WINDOW: usize = 64 * 1024;

/// The bytes after the last newline of the `len` bytes `r` holds (a torn final line, never
/// committed), found by reading back from the end a window ([`TAIL_WINDOW`]) at a time: a
/// gigabyte appended after the last line costs one window of memory, not a gigabyte.
pub(crate) fn torn_tail_len<R: Read + Seek>(r: &mut R, len: u64) -> std::io::Result<u64> {
    let mut buf = vec![0u8; TAIL_WINDOW];
    let mut end = len;
    while end > 0 {
        let start = end.saturating_sub(TAIL_WINDOW as u64);
        let n = usize::try_from(end - start).unwrap_or(TAIL_WINDOW);
        r.seek(SeekFrom::Start(start))?;
        r.read_exact(&mut buf[..n])?;
        if let Some(i) = memchr::memrchr(b'\n', &buf[..n]) {
            return Ok(len - (start + i as u64 + 1));
        }
        end = start;
    }
    Ok(len)
}

/// Cuts the torn final line ([`torn_tail_len`]) off the log at `path`, durably, before anyone
/// reads the log whole; returns how many bytes it cut.
pub(crate) fn cut_torn_tail(path: &Path) -> Result<u64> {
    check_state_path(path)?;
    let mut file = no_follow(OpenOptions::new().read(true).write(true))
        .open(path)
        .map_err(|e| Error::io("open", path, &e))?;
    let len = file.metadata().map_err(|e| Error::io("read", path, &e))?.len();
    let torn = torn_tail_len(&mut file, len).map_err(|e| Error::io("read", path, &e))?;
    if torn > 0 {
        file.set_len(len - torn).map_err(|e| Error::io("truncate", path, &e))?;
        file.sync_all().map_err(|e| Error::io("sync", path, &e))?;
    }
    Ok(torn)
}

pub fn create_dir_all(path: &Path) -> Result<()> {
    refuse_links(path)?;
    fs::create_dir_all(path).map_err(|e| Error::io("create directory", path, &e))?;
    // What was made is checked again: a link put there meanwhile is refused before any write.
    refuse_links(path)
}

/// Removes a file (a missing one is fine) and makes the removal durable.
pub fn remove_file(path: &Path) -> Result<()> {
    refuse_links(path.parent().unwrap_or(path))?;
    match fs::remove_file(path) {
        Ok(()) => sync_dir(parent(path)?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("remove", path, &e)),
    }
}

/// Removes a directory if it is empty; leaves it (and says nothing) otherwise.
pub fn remove_dir_if_empty(path: &Path) -> Result<()> {
    let empty = fs::read_dir(path).is_ok_and(|mut entries| entries.next().is_none());
    if !empty {
        return Ok(());
    }
    match fs::remove_dir(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("remove directory", path, &e)),
    }
}

/// Makes a rename or a new file in `dir` durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        let d = File::open(dir).map_err(|e| Error::io("open directory", dir, &e))?;
        d.sync_all().map_err(|e| Error::io("sync directory", dir, &e))?;
    }
    let _ = dir;
    Ok(())
}

/// One of the JSON files loopx keeps in the person's configuration, or `None` when it does not
/// exist. A file that is not `what` (damaged) or of another `schema_version` than `version` is
/// refused, with `hint` saying how to get a good one.
pub fn read_config<T: serde::de::DeserializeOwned>(
    path: &Path,
    what: &str,
    hint: &str,
    version: u32,
) -> Result<Option<T>> {
    #[derive(serde::Deserialize)]
    struct Head {
        schema_version: u32,
    }
    let Some(bytes) = read_optional(path)? else { return Ok(None) };
    let damaged = |e: serde_json::Error| {
        Error::integrity(format!("{} is not {what}: {e}", path.display())).with_hint(hint.to_owned())
    };
    let head: Head = serde_json::from_slice(&bytes).map_err(damaged)?;
    if head.schema_version != version {
        return Err(Error::integrity(format!(
            "{} has schema_version {}; this loopx reads version {version}",
            path.display(),
            head.schema_version
        )));
    }
    serde_json::from_slice(&bytes).map(Some).map_err(damaged)
}

/// Reads a file, or `None` when it does not exist. A large file's buffer is mapped in before it
/// is read into ([`crate::prefault`]).
pub fn read_optional(path: &Path) -> Result<Option<Vec<u8>>> {
    let read = || -> std::io::Result<Vec<u8>> {
        let file = File::open(path)?;
        let len = file.metadata().map_or(0, |m| m.len());
        read_whole(&file, len)
    };
    match read() {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("read", path, &e)),
    }
}

/// Reads regular file `file` from where it stands to its end, given the size it had when
/// opened: into a buffer a byte larger, mapped in at once when large, so that the one read
/// that fills it short says it has reached the end (a regular file reads short only there).
/// `read_to_end` would ask for the size and the position again, and read once more to find
/// the end.
pub(crate) fn read_whole(file: &File, len: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    bytes.try_reserve_exact(usize::try_from(len).unwrap_or(0).saturating_add(1))?;
    crate::prefault::spare(&mut bytes);
    #[cfg(unix)]
    loop {
        let room = bytes.capacity() - bytes.len();
        match rustix::io::read(file, rustix::buffer::spare_capacity(&mut bytes)) {
            Ok(n) if n < room => return Ok(bytes),
            // It grew since: read on.
            Ok(_) => bytes.try_reserve(bytes.capacity().max(32))?,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    #[cfg(not(unix))]
    {
        std::io::Read::read_to_end(&mut &*file, &mut bytes)?;
        Ok(bytes)
    }
}

/// Reads `file` from `at` into `buf` until it is full or the file ends, without moving the
/// file's position (one call where the system reads at an offset); how much it read.
pub(crate) fn read_at_most(file: &File, at: u64, buf: &mut [u8]) -> std::io::Result<usize> {
    #[cfg(unix)]
    let read = |buf: &mut [u8], at: u64| std::os::unix::fs::FileExt::read_at(file, buf, at);
    #[cfg(not(unix))]
    let read = |buf: &mut [u8], at: u64| {
        use std::io::{Read, Seek};
        let mut f = file;
        f.seek(std::io::SeekFrom::Start(at))?;
        f.read(buf)
    };
    let mut n = 0;
    while n < buf.len() {
        match read(&mut buf[n..], at + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The directory `path` is in: `.` for a bare file name.
fn parent(path: &Path) -> Result<&Path> {
    match path.parent() {
        Some(p) if p.as_os_str().is_empty() => Ok(Path::new(".")),
        Some(p) => Ok(p),
        None => Err(Error::internal(format!("{} has no parent directory", path.display()))),
    }
}

/// Temporary files of [`atomic_write`] in `dir` that no running process is writing: what a
/// crash mid-write leaves behind. They never became state, so they are safe to remove.
pub(crate) fn stale_temp_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<std::path::PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            // `.<name>.<pid>.<attempt>.tmp`
            let parts: Vec<&str> = name.rsplitn(4, '.').collect();
            let [ext, attempt, pid, rest] = parts.as_slice() else { return false };
            *ext == "tmp"
                && rest.starts_with('.')
                && attempt.parse::<u32>().is_ok()
                && pid.parse::<u32>().is_ok_and(|pid| !writer_alive(pid, p))
        })
        .collect();
    out.sort();
    out
}

/// Whether process `pid` may still be writing `tmp`: it runs (a zombie, killed and not yet
/// reaped, writes nothing). Where processes cannot be looked up, a temporary file younger than
/// a minute is given the benefit of the doubt.
fn writer_alive(pid: u32, tmp: &Path) -> bool {
    if cfg!(target_os = "linux") {
        let Ok(stat) = fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat")) else {
            return false;
        };
        // The state is the first field after the name, which may hold spaces and parentheses.
        let state = stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next());
        return !matches!(state, Some("Z" | "X"));
    }
    fs::metadata(tmp)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_none_or(|age| age.as_secs() < 60)
}

fn tempfile_in(dir: &Path, target: &Path) -> Result<(File, std::path::PathBuf)> {
    let name = target.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    for attempt in 0..100u32 {
        let tmp = dir.join(format!(".{name}.{}.{attempt}.tmp", std::process::id()));
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(f) => return Ok((f, tmp)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::io("create", &tmp, &e)),
        }
    }
    Err(Error::internal(format!("cannot create a temporary file in {}", dir.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log in memory that remembers the largest read it was asked for.
    struct Counted {
        inner: std::io::Cursor<Vec<u8>>,
        largest: usize,
    }

    impl Read for Counted {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.largest = self.largest.max(buf.len());
            self.inner.read(buf)
        }
    }

    impl Seek for Counted {
        fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
            self.inner.seek(to)
        }
    }

    /// The torn tail is what follows the last newline, found reading back a window at a time:
    /// no read is ever larger than a window, however long the tail.
    #[test]
    fn a_torn_tail_is_found_a_window_at_a_time() {
        let committed = b"{\"seq\":1}\n{\"seq\":2}\n".to_vec();
        let cases: [(Vec<u8>, u64); 6] = [
            (Vec::new(), 0),
            (committed.clone(), 0),
            ([committed.clone(), b"{\"seq\":3,".to_vec()].concat(), 9),
            ([committed.clone(), vec![b'x'; TAIL_WINDOW]].concat(), TAIL_WINDOW as u64),
            ([committed.clone(), vec![b'x'; 5 * TAIL_WINDOW + 17]].concat(), 5 * TAIL_WINDOW as u64 + 17),
            (vec![b'x'; 3 * TAIL_WINDOW + 1], 3 * TAIL_WINDOW as u64 + 1),
        ];
        for (bytes, torn) in cases {
            let len = bytes.len() as u64;
            let mut r = Counted { inner: std::io::Cursor::new(bytes), largest: 0 };
            assert_eq!(torn_tail_len(&mut r, len).unwrap(), torn, "{len} bytes");
            assert!(r.largest <= TAIL_WINDOW, "a read of {} bytes", r.largest);
        }
    }

    /// A file is read whole whatever size it is said to have: the size it had when opened, or
    /// a smaller one when it grew since (a read that fills the buffer reads on).
    #[test]
    fn a_file_is_read_whole_from_its_size() {
        let dir = tempfile::tempdir().unwrap();
        for len in [0usize, 1, 4095, 4096, 40_000, 100_000] {
            let p = dir.path().join(format!("f{len}"));
            let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            fs::write(&p, &bytes).unwrap();
            for said in [len as u64, (len / 2) as u64, 0] {
                let file = File::open(&p).unwrap();
                assert_eq!(read_whole(&file, said).unwrap(), bytes, "{len} bytes, {said} said");
            }
        }
        assert_eq!(read_optional(&dir.path().join("f40000")).unwrap().unwrap().len(), 40_000);
        assert_eq!(read_optional(&dir.path().join("missing")).unwrap(), None);
    }

    #[test]
    fn a_bare_file_name_is_written_in_the_working_directory() {
        assert_eq!(parent(Path::new("picture.svg")).unwrap(), Path::new("."));
        assert_eq!(parent(Path::new("a/picture.svg")).unwrap(), Path::new("a"));
        assert!(parent(Path::new("/")).is_err());
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_killed_writers_temp_file_is_stale_before_the_writer_is_reaped() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let tmp = dir.path().join(format!(".GOAL.md.{}.0.tmp", writer.id()));
        fs::write(&tmp, b"half a view").unwrap();
        assert!(stale_temp_files(dir.path()).is_empty(), "its writer still runs");
        writer.kill().unwrap();
        // Killed, not reaped: a zombie writes nothing. (The signal lands on its own time.)
        let t = std::time::Instant::now();
        while stale_temp_files(dir.path()).is_empty() && t.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::yield_now();
        }
        assert_eq!(stale_temp_files(dir.path()), vec![tmp]);
        writer.wait().unwrap();
    }

    /// In a transaction's scope each directory of `.loopx/` is looked at once, and each file
    /// every time; once the scope ends (or in another thread, which has none) a directory is
    /// looked at again.
    #[cfg(unix)]
    #[test]
    fn a_transaction_looks_at_each_directory_once_and_each_file_every_time() {
        let root = tempfile::tempdir().unwrap();
        let goal = root.path().join(".loopx/goals/g");
        fs::create_dir_all(&goal).unwrap();
        let file = goal.join("events.jsonl");
        fs::write(&file, b"").unwrap();
        let elsewhere = root.path().join("elsewhere");
        fs::create_dir_all(&elsewhere).unwrap();
        let plant = |target: &Path, at: &Path| {
            let moved = at.with_extension("moved");
            fs::rename(at, &moved).unwrap();
            std::os::unix::fs::symlink(target, at).unwrap();
            moved
        };
        let unplant = |at: &Path, moved: &Path| {
            fs::remove_file(at).unwrap();
            fs::rename(moved, at).unwrap();
        };
        {
            let _dirs = RealDirs::begin();
            let _inner = RealDirs::begin();
            check_state_path(&file).unwrap();
            let moved = plant(&elsewhere, &goal);
            check_state_path(&file).unwrap();
            unplant(&goal, &moved);
            let moved = plant(&elsewhere.join("x"), &file);
            assert!(check_state_path(&file).is_err(), "the file itself, every time");
            assert!(refuse_links(&file).is_err(), "the file itself, every time");
            unplant(&file, &moved);
            drop(_inner);
            let moved = plant(&elsewhere, &goal);
            std::thread::scope(|s| {
                s.spawn(|| assert!(check_state_path(&file).is_err(), "another thread looks again"));
            });
            check_state_path(&file).unwrap();
            unplant(&goal, &moved);
        }
        let moved = plant(&elsewhere, &goal);
        assert!(check_state_path(&file).is_err(), "after the scope, every directory again");
        assert!(refuse_links(&file).is_err());
        unplant(&goal, &moved);
        check_state_path(&file).unwrap();
    }

    #[test]
    fn atomic_write_replaces_and_skips_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.json");
        atomic_write(&p, b"one").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"one");
        assert!(!write_view_if_changed(&p, b"one", Some(&fs::read(&p).unwrap())).unwrap());
        assert!(write_view_if_changed(&p, b"two", Some(&fs::read(&p).unwrap())).unwrap());
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(names(dir.path()), [".a.json.spare", "a.json"], "the view and its spare; no temp file");
        let new = dir.path().join("new.json");
        assert!(write_view_if_changed(&new, b"three", None).unwrap());
        assert_eq!(fs::read(&new).unwrap(), b"three");
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut n: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        n.sort();
        n
    }

    #[cfg(target_os = "linux")]
    fn inode(p: &Path) -> u64 {
        std::os::unix::fs::MetadataExt::ino(&fs::symlink_metadata(p).unwrap())
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_view_is_exchanged_with_its_spare_which_the_next_write_reuses() {
        let dir = tempfile::tempdir().unwrap();
        let (p, spare) = (dir.path().join("snapshot.json"), dir.path().join(".snapshot.json.spare"));
        swap_in_view(&p, &[b"first", b" view"], &|| {}).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"first view");
        assert_eq!(names(dir.path()), ["snapshot.json"], "a first view is renamed into place");
        let first = inode(&p);
        swap_in_view(&p, &[b"second"], &|| {}).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"second");
        assert_eq!(fs::read(&spare).unwrap(), b"first view", "the spare holds the view before");
        assert_eq!(inode(&spare), first);
        // The third is written over the first's file, cut to its own length.
        let seen = std::cell::Cell::new(None);
        swap_in_view(&p, &[b"3rd"], &|| seen.set(Some(fs::read(&p).unwrap()))).unwrap();
        assert_eq!(seen.take().unwrap(), b"second", "readers see the old view until the exchange");
        assert_eq!(fs::read(&p).unwrap(), b"3rd");
        assert_eq!(inode(&p), first, "no file was freed: the spare was reused");
        assert_eq!(names(dir.path()), [".snapshot.json.spare", "snapshot.json"]);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn where_views_cannot_be_exchanged_the_spare_is_renamed_over_the_view() {
        use rustix::io::Errno;
        let dir = tempfile::tempdir().unwrap();
        let (p, spare) = (dir.path().join("snapshot.json"), dir.path().join(".snapshot.json.spare"));
        // What a filesystem without the exchange (or a kernel before it) answers.
        for cannot in [Errno::INVAL, Errno::NOSYS, Errno::OPNOTSUPP] {
            fs::write(&p, b"the view").unwrap();
            fs::write(&spare, b"the next view").unwrap();
            exchange_or_rename(&spare, &p, &|| Err(cannot)).unwrap();
            assert_eq!(fs::read(&p).unwrap(), b"the next view", "{cannot:?}");
            assert_eq!(names(dir.path()), ["snapshot.json"], "{cannot:?}: the spare became the view");
        }
        // Any other failure is the write's, and leaves both files as they were.
        fs::write(&spare, b"a view not swapped in").unwrap();
        let e = exchange_or_rename(&spare, &p, &|| Err(Errno::ACCESS)).unwrap_err();
        assert!(e.message.contains("replace"), "{}", e.message);
        assert_eq!(fs::read(&p).unwrap(), b"the next view");
        assert_eq!(fs::read(&spare).unwrap(), b"a view not swapped in");
        assert_eq!(names(dir.path()), [".snapshot.json.spare", "snapshot.json"]);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_spare_another_name_shares_is_left_to_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (p, spare) = (dir.path().join("GOAL.md"), dir.path().join(".GOAL.md.spare"));
        swap_in_view(&p, &[b"one"], &|| {}).unwrap();
        swap_in_view(&p, &[b"two"], &|| {}).unwrap();
        // A backup made with hard links (`cp -al`) shares the spare's file.
        let backup = dir.path().join("backup-of-GOAL.md");
        fs::hard_link(&spare, &backup).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
        swap_in_view(&p, &[b"three"], &|| {}).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"three");
        assert_eq!(fs::read(&backup).unwrap(), b"one", "the backup's file is not written over");
        assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600, "the view keeps its mode");
        // A spare that is a symbolic link is refused, and nothing is written through it.
        let elsewhere = dir.path().join("elsewhere");
        fs::write(&elsewhere, b"not loopx's").unwrap();
        let _ = fs::remove_file(&spare);
        std::os::unix::fs::symlink(&elsewhere, &spare).unwrap();
        assert!(swap_in_view(&p, &[b"four"], &|| {}).is_err());
        assert_eq!(fs::read(&elsewhere).unwrap(), b"not loopx's");
        assert_eq!(fs::read(&p).unwrap(), b"three");
    }
}
