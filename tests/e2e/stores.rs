//! The store conformance suite (`loopx_testkit::store_suite`) on every store: the file store,
//! the in-memory one and the PostgreSQL one. A new store adds a backend and one `store_conformance!` line.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use loopx_core::GoalId;
use loopx_kernel::{FileStore, MemStore, Silent, Store, StoreOptions, SystemClock};
use loopx_pgstore::PgStore;
use loopx_testkit::store_conformance;
use loopx_testkit::store_suite::Backend;

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
    fn from_env() -> Option<Self> {
        loopx_tests::pg::test_url("the PostgreSQL store's conformance").map(Self)
    }
}

impl Backend for Postgres {
    type S = PgStore;
    fn fresh(&self) -> PgStore {
        let ns = loopx_tests::pg::unique_project("suite");
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
