//! The store conformance suite (`loopx_kernel::store_suite`) on every store: the file store,
//! the in-memory one and the PostgreSQL one. A new store adds a backend and one `store_conformance!` line.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use loopx_core::GoalId;
use loopx_kernel::store_suite::Backend;
use loopx_kernel::{FileStore, MemStore, Silent, Store, StoreOptions, SystemClock, store_conformance};
use loopx_pgstore::PgStore;

/// File stores in temporary directories, kept until the backend is dropped.
#[derive(Default)]
struct Files(Mutex<Vec<tempfile::TempDir>>);

impl Backend for Files {
    type S = FileStore;
    fn fresh(&self) -> FileStore {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) =
            FileStore::init(dir.path(), Arc::new(SystemClock), Arc::new(Silent), StoreOptions::default())
                .unwrap();
        self.0.lock().unwrap().push(dir);
        store
    }
    fn reopen(&self, store: &FileStore) -> FileStore {
        FileStore::open(store.root(), Arc::new(SystemClock), Arc::new(Silent), StoreOptions::default())
            .unwrap()
    }
    fn edit_log(&self, store: &FileStore, goal: &GoalId, edit: &dyn Fn(&mut Vec<u8>)) {
        // A later modification time, as a hand edit has: the fast path trusts size and time.
        std::thread::sleep(Duration::from_millis(20));
        let path = store.layout().events(goal);
        let mut bytes = std::fs::read(&path).unwrap();
        edit(&mut bytes);
        std::fs::write(&path, bytes).unwrap();
    }
}

/// In-memory stores; a reopened one shares its data, as two processes share a directory.
struct Memory;

impl Backend for Memory {
    type S = MemStore;
    fn fresh(&self) -> MemStore {
        MemStore::new(Path::new("."), Arc::new(SystemClock), Arc::new(Silent))
    }
    fn reopen(&self, store: &MemStore) -> MemStore {
        store.clone()
    }
    fn edit_log(&self, store: &MemStore, goal: &GoalId, edit: &dyn Fn(&mut Vec<u8>)) {
        store.edit_log(goal, edit).unwrap();
    }
}

/// PostgreSQL stores, each a new project (namespace) in the database at `LOOPX_TEST_PG_URL`
/// (`cargo xtask ci` starts one and sets it).
struct Postgres(String);

impl Postgres {
    /// The database to test against; `None` only when `LOOPX_SKIP_PG=1` says to skip, loudly.
    fn from_env() -> Option<Self> {
        match std::env::var("LOOPX_TEST_PG_URL") {
            Ok(url) if !url.is_empty() => Some(Self(url)),
            _ if std::env::var("LOOPX_SKIP_PG").as_deref() == Ok("1") => {
                eprintln!("SKIPPED: the PostgreSQL store's conformance (LOOPX_SKIP_PG=1)");
                None
            }
            _ => panic!(
                "LOOPX_TEST_PG_URL is not set: run the suite with `cargo xtask ci` (which starts PostgreSQL), \
                 point it at a database, or set LOOPX_SKIP_PG=1 to skip these tests"
            ),
        }
    }
}

impl Backend for Postgres {
    type S = PgStore;
    fn fresh(&self) -> PgStore {
        static N: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let ns = format!("t{}-{}-{nanos}", std::process::id(), N.fetch_add(1, Ordering::Relaxed));
        let options = StoreOptions::default();
        PgStore::connect(&self.0, &ns, Path::new("."), Arc::new(SystemClock), Arc::new(Silent), &options)
            .unwrap()
    }
    fn reopen(&self, store: &PgStore) -> PgStore {
        store.reopen().unwrap()
    }
    fn edit_log(&self, store: &PgStore, goal: &GoalId, edit: &dyn Fn(&mut Vec<u8>)) {
        store.edit_log(goal, edit).unwrap();
    }
}

store_conformance!(file_store, Some(Files::default()));
store_conformance!(memory_store, Some(Memory));
store_conformance!(postgres_store, Postgres::from_env());
