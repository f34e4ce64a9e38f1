//! The file store: `.loopx/` on disk, and the commit protocol.
//!
//! One mutation: take the goal lock → load the snapshot (replaying the log when the snapshot
//! is not current) → validate → append one event line and fsync → write the snapshot
//! atomically → re-render GOAL.md → release. A crash at any step leaves a state equal to a
//! committed prefix of the log; the next command notices and recovers.
//!
//! Its parts: the [`Store`] trait and what a commit hands it (`traits`), the options a store
//! is opened with (`options`), opening a project and its `project.json` (`open`), the
//! [`FileStore`] itself (`file`), a transaction ([`Txn`], `txn`), `snapshot.json`'s format
//! (`snapshot`), loading and recovering a goal's state (`load`), the states kept between
//! commands (`kept`), writing the views (`views`), replaying and verifying a log (`replay`),
//! reading it as a stream (`stream`), the archive (`archive`), `doctor --repair` (`repair`),
//! and what tells one version of a file from another (`mark`).

mod archive;
mod file;
mod kept;
mod load;
mod mark;
mod open;
mod options;
mod repair;
mod replay;
mod snapshot;
mod stream;
mod traits;
mod txn;
mod views;

pub use archive::{archive_text, read_archive};
pub use file::FileStore;
pub use open::write_project_file;
pub use open::{InitOutcome, Opened, StoreOpener, init_pointer, open_file_store, read_project};
pub use options::{FAULT_POINTS, InjectedCrash, StoreOptions};
pub use replay::{
    chain_error, check_root, encode_state, events_missing, genesis, lines_of, replay, root_matches, root_of,
    verify_lines,
};
pub use snapshot::Snapshot;
pub(crate) use snapshot::older_snapshot;
pub use traits::{Commit, Doctor, Store};
pub use txn::Txn;
pub(crate) use txn::stored_receipt;

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::Path;
    use std::sync::Arc;

    use loopx_core::GoalId;
    use loopx_core::event::Event;

    use crate::project::StoreRef;
    use crate::table;

    use super::kept::KEPT_GOALS;
    use super::snapshot::Loaded;
    use super::*;

    /// A store read across many goals keeps no more than `KEPT_GOALS` of their states, the
    /// last one read among them; what it keeps is what a new store reads.
    #[test]
    fn a_store_keeps_a_bounded_number_of_goals_states() {
        let dir = tempfile::tempdir().unwrap();
        let store = init_at(dir.path());
        let ids: Vec<GoalId> = (0..KEPT_GOALS + 3).map(|i| GoalId::new(&format!("g{i}")).unwrap()).collect();
        for id in &ids {
            let first = Event::GoalCreated { objective: format!("goal {id}"), title: None };
            store.create_goal(id, first, false).unwrap();
        }
        for id in &ids {
            assert_eq!(store.read(id).unwrap().goal.id, *id);
            assert!(store.kept().len() <= KEPT_GOALS, "{} states kept", store.kept().len());
            assert!(store.kept().contains_key(id), "the goal just read is kept");
        }
        let last = ids.last().unwrap();
        assert_eq!(*store.read(last).unwrap(), *open_at(dir.path()).read(last).unwrap());
    }

    /// A project whose `project.json` names another store opens as that store's name (read
    /// once), and the file store refuses it, naming it; one that keeps its state here opens as
    /// the file store.
    #[test]
    fn a_project_kept_elsewhere_is_named_not_opened() {
        let (clock, reporter) = (Arc::new(crate::SystemClock), Arc::new(crate::Silent));
        let open = |root: &Path| {
            FileStore::open_or_elsewhere(root, clock.clone(), reporter.clone(), StoreOptions::default())
        };
        let here = tempfile::tempdir().unwrap();
        init_at(here.path());
        assert!(matches!(open(here.path()), Ok(Opened::Files(_))));

        let there = tempfile::tempdir().unwrap();
        let named = StoreRef {
            kind: "postgres".into(),
            url: "postgres://loopx@127.0.0.1:5432/loopx".into(),
            project: "shared".into(),
        };
        init_pointer(there.path(), &named).unwrap();
        match open(there.path()) {
            Ok(Opened::Elsewhere(s)) => assert_eq!(s, named),
            other => panic!("not named: {other:?}"),
        }
        let e = FileStore::open(there.path(), clock.clone(), reporter.clone(), StoreOptions::default())
            .unwrap_err();
        assert!(
            e.message.contains(
                "keeps its state in postgres at postgres://loopx@127.0.0.1:5432/loopx (project shared)"
            ),
            "{}",
            e.message
        );
        let e = FileStore::init(there.path(), clock.clone(), reporter.clone(), StoreOptions::default())
            .unwrap_err();
        assert!(e.message.contains("not in .loopx/"), "{}", e.message);

        let none = tempfile::tempdir().unwrap();
        let e = open(none.path()).unwrap_err();
        assert!(e.message.contains("is not a loopx project"), "{}", e.message);
    }

    fn init_at(root: &Path) -> FileStore {
        let (clock, reporter) = (Arc::new(crate::SystemClock), Arc::new(crate::Silent));
        FileStore::init(root, clock, reporter, StoreOptions::default()).unwrap().0
    }

    fn open_at(root: &Path) -> FileStore {
        let (clock, reporter) = (Arc::new(crate::SystemClock), Arc::new(crate::Silent));
        FileStore::open(root, clock, reporter, StoreOptions::default()).unwrap()
    }

    /// A project with goal `main` in a temporary directory, and a second store on it (as
    /// another process would open it).
    fn two_stores() -> (tempfile::TempDir, FileStore, FileStore, GoalId) {
        let dir = tempfile::tempdir().unwrap();
        let a = init_at(dir.path());
        let id = GoalId::new("main").unwrap();
        a.create_goal(&id, Event::GoalCreated { objective: "o".into(), title: None }, true).unwrap();
        let b = open_at(dir.path());
        (dir, a, b, id)
    }

    fn add_todo(store: &FileStore, id: &GoalId, text: &str) {
        use loopx_core::kernel::AddTodo;
        use loopx_core::model::{Priority, Role, TodoClass};
        let req = AddTodo {
            text: text.into(),
            priority: Priority::P1,
            role: Role::Agent,
            class: TodoClass::Advance,
            scopes: vec![],
            after_gate: None,
            validation: None,
        };
        store
            .transact(id, &mut |txn| {
                let event = crate::rules::add_todo(txn.state(), &req)?;
                txn.commit("user", event, None, false, |_| Ok(())).map(|_| ())
            })
            .unwrap();
    }

    /// Writes `bytes` over `path` in place and sets its modification time back to `meta`'s, as
    /// a careful hand edit might; again until the inode's change time has moved on (its clock
    /// ticks coarsely), which nothing sets back.
    #[cfg(unix)]
    fn edit_in_place(path: &Path, bytes: &str, meta: &fs::Metadata) {
        use std::os::unix::fs::MetadataExt;
        let changed = |m: fs::Metadata| (m.ctime(), m.ctime_nsec());
        let before = changed(fs::metadata(path).unwrap());
        loop {
            fs::write(path, bytes).unwrap();
            fs::OpenOptions::new()
                .write(true)
                .open(path)
                .unwrap()
                .set_modified(meta.modified().unwrap())
                .unwrap();
            if changed(fs::metadata(path).unwrap()) != before {
                return;
            }
        }
    }

    /// A glance at a goal of 20 todos: the snapshot read as far as its glance (the 16 best
    /// todos) and checked against the log, the same head and todos as a read, and a decision
    /// taken from it; after another store's commit, the new state.
    #[test]
    fn a_glance_reads_the_snapshot_as_far_as_its_glance() {
        let (_dir, a, b, id) = two_stores();
        for i in 0..20 {
            add_todo(&a, &id, &format!("todo {i}"));
        }
        let (g, counts) = b.glance(&id).unwrap().expect("a glance at a current snapshot");
        assert_eq!((counts.free, counts.held, counts.user), (20, 0, 0));
        let whole = open_at(a.root()).read(&id).unwrap();
        assert_eq!((g.seq, &g.goal, &g.agents), (whole.seq, &whole.goal, &whole.agents));
        let held: Vec<_> = g.todos.iter().cloned().collect();
        assert_eq!(held, whole.todos.iter().take(table::GLANCE_FREE).cloned().collect::<Vec<_>>());
        add_todo(&a, &id, "one more");
        let (g, counts) = open_at(a.root()).glance(&id).unwrap().unwrap();
        assert_eq!((g.seq, counts.free), (whole.seq + 1, 21));
        // A store that glanced once, or holds the state it read, takes it whole instead.
        assert!(b.glance(&id).unwrap().is_none());
        let c = open_at(a.root());
        c.read(&id).unwrap();
        assert!(c.glance(&id).unwrap().is_none());
    }

    /// A glance is taken only from a snapshot a whole load would trust: its glance edited, the
    /// key lines' hash it records changed, an older snapshot, or a log that moved, and there is
    /// none (the whole load then finds out what). A key line beyond the glance is neither read
    /// nor hashed: the glance stands, and the next whole load finds the edit.
    #[cfg(unix)]
    #[test]
    fn a_glance_is_taken_only_from_a_snapshot_a_load_would_trust() {
        let (dir, a, _, id) = two_stores();
        for i in 0..20 {
            add_todo(&a, &id, &format!("todo {i}"));
        }
        let path = a.layout.snapshot(&id);
        let meta = fs::metadata(&path).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        let glance = |edit: &dyn Fn(&str) -> String| {
            edit_in_place(&path, &edit(&text), &meta);
            let taken = open_at(dir.path()).glance(&id).unwrap().is_some();
            edit_in_place(&path, &text, &meta);
            taken
        };
        assert!(glance(&|t| t.to_owned()));
        assert!(!glance(&|t| t.replacen("t5\topen\tP1", "t5\topen\tP0", 1)), "its glance edited");
        let keys = text.split("\"keys\":\"").nth(1).unwrap()[..64].to_owned();
        assert!(!glance(&|t| t.replacen(&keys, &"0".repeat(64), 1)), "the key lines' hash changed");
        assert!(!glance(&|t| t.replacen("\"schema_version\":4", "\"schema_version\":3", 1)), "older");
        // The 20th todo's key line is the last, past the glance.
        let last = "t20\topen\tP1";
        assert!(text.matches(last).count() == 1, "t20 is outside the glance");
        assert!(glance(&|t| t.replacen(last, "t20\topen\tP0", 1)));
        edit_in_place(&path, &text.replacen(last, "t20\topen\tP0", 1), &meta);
        assert!(matches!(open_at(dir.path()).load_snapshot(&id, false).unwrap(), Loaded::Tampered(_)));
        edit_in_place(&path, &text, &meta);
        let events = a.layout.events(&id);
        fs::OpenOptions::new()
            .append(true)
            .open(&events)
            .unwrap()
            .set_modified(std::time::SystemTime::now())
            .unwrap();
        assert!(open_at(dir.path()).glance(&id).unwrap().is_none(), "the log moved");
    }

    /// A second read of a goal whose log has not changed takes the state the first read
    /// found, without reading the snapshot again; a commit by another store (another process)
    /// is seen by the next read.
    #[test]
    fn a_read_takes_the_state_it_found_until_the_log_changes() {
        let (dir, a, b, id) = two_stores();
        let first = a.read(&id).unwrap();
        let snapshot = dir.path().join(".loopx/goals/main/snapshot.json");
        fs::write(&snapshot, b"not a snapshot").unwrap();
        let again = a.read(&id).unwrap();
        assert!(Arc::ptr_eq(&first, &again), "the state the first read found");
        assert_eq!(fs::read(&snapshot).unwrap(), b"not a snapshot", "the snapshot was not read");
        add_todo(&b, &id, "added elsewhere");
        let after = a.read(&id).unwrap();
        assert_eq!(after.seq, first.seq + 1, "the other store's commit is read");
        assert_eq!(*after, *b.read(&id).unwrap());
    }

    /// What a store warned of.
    #[derive(Debug, Default)]
    struct Heard(std::sync::Mutex<Vec<String>>);

    impl crate::Reporter for Heard {
        fn warn(&self, message: &str) {
            self.0.lock().unwrap().push(message.to_owned());
        }
        fn waiting_for_lock(&self, _: &str, _: &str) {}
    }

    /// A transaction after a read, the log as the read found it, takes the state the read
    /// found without reading the snapshot again (under the goal's lock no one commits); after
    /// another store's commit it reads the snapshot, and commits after that commit.
    #[test]
    fn a_transaction_after_a_read_takes_its_state_until_the_log_changes() {
        let (dir, _, b, id) = two_stores();
        let heard = Arc::new(Heard::default());
        let a =
            FileStore::open(dir.path(), Arc::new(crate::SystemClock), heard.clone(), StoreOptions::default())
                .unwrap();
        let seq = a.read(&id).unwrap().seq;
        let snapshot = dir.path().join(".loopx/goals/main/snapshot.json");
        fs::write(&snapshot, b"not a snapshot").unwrap();
        add_todo(&a, &id, "first");
        assert_eq!(*heard.0.lock().unwrap(), Vec::<String>::new(), "the snapshot was not read");
        let after = open_at(dir.path()).read(&id).unwrap();
        assert_eq!(after.seq, seq + 1);
        assert_eq!(*after, *a.read(&id).unwrap());

        let c = open_at(dir.path());
        c.read(&id).unwrap();
        add_todo(&b, &id, "added elsewhere");
        add_todo(&c, &id, "second");
        let texts: Vec<String> = c.read(&id).unwrap().todos.iter().map(|t| t.text.clone()).collect();
        assert_eq!(texts, ["first", "added elsewhere", "second"], "the other store's commit is read");
        assert_eq!(*c.read(&id).unwrap(), *open_at(dir.path()).read(&id).unwrap());
        assert!(c.scan(&id).is_ok(), "the log's chain holds");
    }

    /// A commit appends the todos it changed to the body file its state's other todos are in,
    /// by this store or another: the goal keeps one body file, which only grows, and every
    /// store reads the same todos from it.
    #[test]
    fn commits_append_to_the_body_file_the_todos_are_in() {
        let (dir, a, b, id) = two_stores();
        let goal = dir.path().join(".loopx/goals/main");
        let bodies = || -> Vec<(String, u64)> {
            let mut v: Vec<(String, u64)> = fs::read_dir(&goal)
                .unwrap()
                .flatten()
                .map(|e| (e.file_name().to_string_lossy().into_owned(), e.metadata().unwrap().len()))
                .filter(|(n, _)| n.starts_with("todos-"))
                .collect();
            v.sort();
            v
        };
        add_todo(&a, &id, "first");
        let [(name, first)] = &bodies()[..] else { panic!("one body file: {:?}", bodies()) };
        let (name, first) = (name.clone(), *first);
        add_todo(&a, &id, "second");
        add_todo(&b, &id, "third");
        let [(after, len)] = &bodies()[..] else { panic!("one body file: {:?}", bodies()) };
        assert_eq!(after, &name, "the same file");
        assert!(*len > first, "grown: {first} then {len}");
        let texts: Vec<String> =
            open_at(dir.path()).read(&id).unwrap().todos.iter().map(|t| t.text.clone()).collect();
        assert_eq!(texts, ["first", "second", "third"]);
    }

    /// A read after this store's own commit takes the state the commit left without reading
    /// the snapshot again; another store's commit after it is seen by the next read.
    #[test]
    fn a_read_after_its_own_commit_reads_nothing_else() {
        let (dir, a, b, id) = two_stores();
        add_todo(&a, &id, "first");
        let snapshot = dir.path().join(".loopx/goals/main/snapshot.json");
        let written = fs::read(&snapshot).unwrap();
        fs::write(&snapshot, b"not a snapshot").unwrap();
        let after = a.read(&id).unwrap();
        assert_eq!(fs::read(&snapshot).unwrap(), b"not a snapshot", "the snapshot was not read");
        assert_eq!(after.todos.iter().map(|t| t.text.clone()).collect::<Vec<_>>(), ["first"]);
        fs::write(&snapshot, &written).unwrap();
        add_todo(&b, &id, "added elsewhere");
        let seen = a.read(&id).unwrap();
        assert_eq!(seen.seq, after.seq + 1, "the other store's commit is read");
        assert_eq!(*seen, *b.read(&id).unwrap());
    }

    /// A read after a commit takes the state the commit left, its unchanged rows still reading
    /// from the snapshot before, and finds what a new store decodes, even when the log's mark
    /// has moved since (its inode changed, not its bytes) and the snapshot is checked; the next
    /// transaction re-bases it and commits from it as from any other.
    #[cfg(unix)]
    #[test]
    fn a_read_after_a_commit_takes_its_state_and_a_transaction_rebases_it() {
        use std::os::unix::fs::MetadataExt;
        let (dir, a, b, id) = two_stores();
        add_todo(&a, &id, "first");
        add_todo(&a, &id, "second");
        let c = open_at(dir.path());
        c.read(&id).unwrap();
        add_todo(&c, &id, "third");
        let events = dir.path().join(".loopx/goals/main/events.jsonl");
        let changed = |m: fs::Metadata| (m.ctime(), m.ctime_nsec());
        let before = changed(fs::metadata(&events).unwrap());
        while changed(fs::metadata(&events).unwrap()) == before {
            let mode = fs::metadata(&events).unwrap().permissions();
            fs::set_permissions(&events, mode).unwrap();
        }
        let after = c.read(&id).unwrap();
        {
            let kept = c.kept();
            let k = &kept[&id];
            assert!(k.unbased, "a read leaves the rows where the commit left them");
            assert!(Arc::ptr_eq(&k.state, &after), "the state the commit left");
        }
        assert_eq!(*after, *b.read(&id).unwrap(), "what a new store decodes");
        let texts: Vec<String> = after.todos.iter().map(|t| t.text.clone()).collect();
        assert_eq!(texts, ["first", "second", "third"]);
        add_todo(&c, &id, "fourth");
        assert_eq!(*c.read(&id).unwrap(), *open_at(dir.path()).read(&id).unwrap());
        assert_eq!(c.read(&id).unwrap().todos.iter().count(), 4);
    }

    /// An edit of the log that keeps its length and sets its modification time back still
    /// changes its mark (the inode's change time): the next read checks the log again.
    #[cfg(unix)]
    #[test]
    fn a_hand_edit_that_keeps_the_logs_length_and_time_is_read_again() {
        let (dir, a, _b, id) = two_stores();
        add_todo(&a, &id, "first");
        a.read(&id).unwrap();
        let kept = a.read(&id).unwrap();
        let events = dir.path().join(".loopx/goals/main/events.jsonl");
        let (bytes, meta) = (fs::read(&events).unwrap(), fs::metadata(&events).unwrap());
        let text = String::from_utf8(bytes).unwrap().replacen("\"o\"", "\"x\"", 1);
        assert_eq!(text.len(), usize::try_from(meta.len()).unwrap());
        edit_in_place(&events, &text, &meta);
        assert_eq!(fs::metadata(&events).unwrap().len(), meta.len());
        assert_eq!(fs::metadata(&events).unwrap().modified().unwrap(), meta.modified().unwrap());
        fs::remove_file(dir.path().join(".loopx/goals/main/snapshot.json")).unwrap();
        let e = a.read(&id).map(|s| Arc::ptr_eq(&s, &kept)).unwrap_err();
        assert_eq!(e.kind, loopx_core::ErrorKind::Integrity, "{e:?}");
    }

    /// `project.json` is read again once it changes: replaced whole, edited in place with its
    /// length and time kept, or broken.
    #[cfg(unix)]
    #[test]
    fn project_json_is_read_again_when_it_changes() {
        let (dir, a, b, _) = two_stores();
        let path = dir.path().join(".loopx/project.json");
        assert_eq!(a.project().unwrap().goals.len(), 1);
        let other = GoalId::new("other").unwrap();
        b.create_goal(&other, Event::GoalCreated { objective: "o".into(), title: None }, false).unwrap();
        assert_eq!(a.project().unwrap().goals.len(), 2, "replaced by another store");
        let (text, meta) = (fs::read_to_string(&path).unwrap(), fs::metadata(&path).unwrap());
        let edited = text.replacen("\"other\"", "\"otter\"", 1);
        assert_ne!(edited, text);
        edit_in_place(&path, &edited, &meta);
        assert!(a.project().unwrap().has_goal(&GoalId::new("otter").unwrap()), "edited in place");
        fs::write(&path, b"{").unwrap();
        assert_eq!(a.project().unwrap_err().kind, loopx_core::ErrorKind::Integrity);
    }
}
