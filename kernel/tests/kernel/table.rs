#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of a test file
//! The todo table's stored form: a state encodes and decodes back to the same bytes and the
//! same decisions, and bytes damaged anywhere are refused (by the decoder, or by a todo's hash
//! or key when it is read) without a panic.

use std::sync::Arc;

use loopx_core::event::Event;
use loopx_core::kernel::AddTodo;
use loopx_core::model::{Priority, ResumeWhen, Role, TodoClass};
use loopx_core::{AgentId, AgentType, GoalId, Timestamp};
use loopx_kernel::codec;
use loopx_kernel::log::{EventLine, GENESIS};
use loopx_kernel::rules::{self, Actor};
use loopx_kernel::state::GoalState;
use loopx_kernel::table::Bodies;

fn line(seq: u64, actor: &str, event: Event) -> EventLine {
    EventLine {
        seq,
        at: Timestamp::from_unix_millis(1_800_000_000_000 + seq as i64 * 1000),
        actor: actor.into(),
        event,
        turn: None,
        receipt: None,
        root: None,
        prev: GENESIS.into(),
        signature: None,
    }
}

/// Applies `e` by `actor` as the next event of `s`.
fn apply(s: &mut GoalState, actor: &str, e: Event) {
    let l = line(s.seq + 1, actor, e);
    s.apply(&l).unwrap();
}

/// A goal with an agent, eight todos of mixed priority and role, one claimed, one deferred
/// until another is done.
fn goal() -> GoalState {
    let first = line(1, "user", Event::GoalCreated { objective: "table".into(), title: None });
    let mut s = GoalState::genesis(&GoalId::new("g").unwrap(), &first).unwrap();
    let a = AgentId::new("a").unwrap();
    apply(
        &mut s,
        "user",
        Event::AgentRegistered { agent: a.clone(), agent_type: AgentType::from_static("codex-app") },
    );
    for i in 0..8 {
        let req = AddTodo {
            text: format!("todo {i} with\ttab, \"quotes\" and ünïcode"),
            priority: [Priority::P2, Priority::P0, Priority::P3][i % 3],
            role: if i == 7 { Role::User } else { Role::Agent },
            class: TodoClass::Advance,
            scopes: vec![],
            after_gate: None,
            validation: None,
        };
        let e = rules::add_todo(&s, &req).unwrap();
        apply(&mut s, "user", e);
    }
    let t2 = s.todos.keys().nth(1).unwrap().id;
    let e = rules::claim(&s, &Actor::Agent(a.clone()), t2, Timestamp::from_unix_millis(1_900_000_000_000));
    apply(&mut s, "a", e.unwrap().unwrap());
    let t3 = s.todos.keys().nth(2).unwrap().id;
    let t4 = s.todos.keys().nth(3).unwrap().id;
    let req = loopx_core::kernel::UpdateTodo {
        todo: t4,
        text: None,
        priority: None,
        status: Some(loopx_core::model::TodoStatus::Deferred),
        resume_when: Some(ResumeWhen::TodoDone(t3)),
        clear_claim: false,
        note: Some("after the third".into()),
        evidence: None,
        claimed_by: None,
        takeover_reason: None,
    };
    let e = rules::update(&s, &Actor::User, &req, Timestamp::from_unix_millis(1_900_000_000_000));
    apply(&mut s, "user", e.unwrap().unwrap());
    s
}

fn decode(bytes: &[u8]) -> Result<GoalState, String> {
    let src = Arc::new(bytes.to_vec());
    codec::decode(&src, 0, src.len(), Bodies::Inline).map(|(s, _)| s)
}

#[test]
fn a_state_encodes_and_decodes_back_to_the_same_bytes_and_decisions() {
    let s = goal();
    let bytes = codec::encode_state(&s).unwrap();
    let back = decode(&bytes).unwrap();
    back.todos.check().unwrap();
    assert_eq!(codec::encode_state(&back).unwrap(), bytes);
    assert_eq!(back, s);
    let a = AgentId::new("a").unwrap();
    let now = Timestamp::from_unix_millis(1_900_000_000_000);
    assert_eq!(back.pick(Some(&a), now).map(|t| t.id), s.pick(Some(&a), now).map(|t| t.id));
    assert_eq!(back.counts(), s.counts());
    // The hashed form is the whole form's beginning: the todos' JSON follows it.
    let keys = codec::encode_keys(&s, 0).unwrap();
    assert!(bytes.starts_with(&keys) && bytes.len() > keys.len());
}

#[test]
fn damaged_bytes_are_refused_never_trusted() {
    let bytes = codec::encode_state(&goal()).unwrap();
    let keys = codec::encode_keys(&goal(), 0).unwrap().len();
    let mut refused = 0;
    for i in 0..bytes.len() {
        for damage in [Damage::Cut, Damage::Flip] {
            let mut b = bytes.clone();
            match damage {
                Damage::Cut => b.truncate(i),
                Damage::Flip => b[i] ^= 0x04,
            }
            let Ok(state) = decode(&b) else {
                refused += 1;
                continue;
            };
            if state.todos.check().is_err() {
                refused += 1;
                continue;
            }
            // What decodes and checks re-encodes to a form that decodes to itself; a change in
            // a todo's record never gets this far.
            assert!(i < keys, "byte {i} ({damage:?}) of the todos' JSON was trusted");
            let again = codec::encode_state(&state).unwrap();
            assert_eq!(codec::encode_state(&decode(&again).unwrap()).unwrap(), again);
        }
    }
    assert!(refused > bytes.len(), "{refused} of {} damaged copies refused", 2 * bytes.len());
}

#[derive(Clone, Copy, Debug)]
enum Damage {
    Cut,
    Flip,
}

#[test]
fn a_read_table_changed_here_and_there_encodes_as_one_never_stored() {
    let mut s = goal();
    let mut back = decode(&codec::encode_state(&s).unwrap()).unwrap();
    let ids: Vec<_> = s.todos.keys().map(|k| k.id).collect();
    // Stored rows around a removed one, a changed one and the last one removed: the runs of
    // stored key lines a commit copies must end where the table changed.
    for state in [&mut s, &mut back] {
        state.todos.remove(ids[2]).unwrap();
        state.todos.get_mut(ids[5]).unwrap().text = "changed".into();
        state.todos.remove(ids[7]).unwrap();
    }
    assert_eq!(codec::encode_state(&back).unwrap(), codec::encode_state(&s).unwrap());
    assert_eq!(back, s);
    let kept: Vec<_> = back.todos.keys().map(|k| k.id).collect();
    assert_eq!(kept, [ids[0], ids[1], ids[3], ids[4], ids[5], ids[6]]);
}

/// A state written before the table form, one JSON document (an old snapshot, an old database
/// row), still decodes, whole, and is told from the table form by its first bytes.
#[test]
fn a_state_in_the_older_json_form_still_decodes() {
    let s = goal();
    let json = serde_json::to_vec(&s).unwrap();
    assert!(!codec::is_table_form(&json));
    assert!(codec::is_table_form(&codec::encode_keys(&s, 0).unwrap()));
    let src = Arc::new(json);
    let (back, end) = codec::decode(&src, 0, src.len(), Bodies::Inline).unwrap();
    assert_eq!(end, src.len(), "all of it is hashed");
    assert_eq!(back, s);
}

/// Where the key lines begin and how many there are, read from the marker line alone: after
/// it, the head's JSON line and the glance (its line, then its todos' key lines), one line per
/// todo.
#[test]
fn the_key_lines_follow_the_marker_the_head_and_the_glance() {
    let s = goal();
    let keys = codec::encode_keys(&s, 0).unwrap();
    let (at, n) = codec::key_lines(&keys).unwrap();
    assert_eq!((n, s.todos.len()), (8, 8));
    assert_eq!(codec::glance_end(&keys), Some(at), "the glance ends where the key lines begin");
    let line = |from: usize| from + keys[from..].iter().position(|b| *b == b'\n').unwrap() + 1;
    let head_at = line(0);
    let glance_at = line(head_at);
    let head: serde_json::Value = serde_json::from_slice(&keys[head_at..glance_at - 1]).unwrap();
    assert_eq!(head["todos"], serde_json::json!([]), "the head lists no todos");
    let glance: Vec<&[u8]> = keys[glance_at..at].split(|b| *b == b'\n').filter(|l| !l.is_empty()).collect();
    // Six agent todos nobody holds, one the agent claimed, one of the person's: all of them.
    assert_eq!(glance[0], b"glance 6 1 1 8");
    let lines: Vec<&[u8]> = keys[at..].split(|b| *b == b'\n').filter(|l| !l.is_empty()).collect();
    assert_eq!(lines.len(), n);
    assert_eq!(glance[1..], lines[..], "a glance holding every todo holds each as its key line");
    for (line, key) in lines.iter().zip(s.todos.keys()) {
        assert!(line.starts_with(format!("{}\t", key.id).as_bytes()), "{}", String::from_utf8_lossy(line));
    }
    assert_eq!(codec::key_lines(&serde_json::to_vec(&s).unwrap()), None, "the older form has none");
}

/// Key lines naming two agents (a claimer each) decode to each todo's own: the agents a table's
/// rows name are kept once each and told apart.
#[test]
fn key_lines_naming_two_agents_decode_to_each_its_own() {
    let mut s = goal();
    let b = AgentId::new("b").unwrap();
    apply(
        &mut s,
        "user",
        Event::AgentRegistered { agent: b.clone(), agent_type: AgentType::from_static("cursor") },
    );
    let t5 = s.todos.keys().nth(4).unwrap().id;
    let e = rules::claim(&s, &Actor::Agent(b.clone()), t5, Timestamp::from_unix_millis(1_900_000_000_000));
    apply(&mut s, "b", e.unwrap().unwrap());
    let claimers = |s: &GoalState| s.todos.keys().map(|k| k.claimed_by.cloned()).collect::<Vec<_>>();
    let back = decode(&codec::encode_state(&s).unwrap()).unwrap();
    assert_eq!(claimers(&back), claimers(&s));
    assert!(claimers(&s).contains(&Some(AgentId::new("a").unwrap())) && claimers(&s).contains(&Some(b)));
}

/// A todo pushed with an id below the last takes its place by id: the table stays in id
/// order, and each todo is found by its id.
#[test]
fn a_todo_pushed_out_of_order_takes_its_place_by_id() {
    let s = goal();
    let mut table = s.todos.clone();
    let ids: Vec<_> = table.keys().map(|k| k.id).collect();
    let third = table.remove(ids[2]).unwrap();
    let first = table.remove(ids[0]).unwrap();
    table.push(third.clone());
    table.push(first.clone());
    assert_eq!(table.keys().map(|k| k.id).collect::<Vec<_>>(), ids);
    assert_eq!(table.get(ids[2]), Some(&third));
    assert_eq!(table.get(ids[0]), Some(&first));
    assert_eq!(table, s.todos);
}

/// Two tables are equal when they hold the same todos: one todo changed, or one fewer, and
/// they are not.
#[test]
fn tables_differing_in_one_todo_are_not_equal() {
    let s = goal();
    let id = s.todos.keys().nth(4).unwrap().id;
    let mut changed = s.todos.clone();
    changed.get_mut(id).unwrap().text = "changed".into();
    assert_ne!(changed, s.todos);
    let mut fewer = s.todos.clone();
    fewer.remove(id).unwrap();
    assert_ne!(fewer, s.todos);
    assert_eq!(s.todos.clone(), s.todos);
}

/// The form before the glance (`loopx-state 3`), which roots an older loopx recorded hash: the
/// marker with the number of todos alone, the head, the key lines. It decodes to the same
/// state; a `b` root over it is the state's root of that kind, and the `c` root over the form
/// with a glance hashes its two parts apart, each part counting.
#[test]
fn the_form_before_the_glance_is_still_encoded_decoded_and_checked() {
    use loopx_kernel::store::{root_matches, root_of};
    let s = goal();
    let now = codec::encode_keys(&s, 0).unwrap();
    let older = codec::encode_keys_3(&s).unwrap();
    let (at, n) = codec::key_lines(&now).unwrap();
    let head_at = now.iter().position(|b| *b == b'\n').unwrap() + 1;
    let head_end = head_at + now[head_at..].iter().position(|b| *b == b'\n').unwrap() + 1;
    let expected = [format!("loopx-state 3 {n}\n").as_bytes(), &now[head_at..head_end], &now[at..]].concat();
    assert_eq!(older, expected);
    let mut whole = older.clone();
    s.todos.append_bodies(&mut whole).unwrap();
    let src = Arc::new(whole);
    let (back, end) = codec::decode(&src, 0, src.len(), Bodies::Inline).unwrap();
    assert_eq!((end, &back), (older.len(), &s), "the hashed part ends where the todos' JSON begins");
    let b = codec::state_root(&older);
    assert!(b.starts_with('b') && root_matches(&b, &s).unwrap(), "{b}");
    let c = root_of(&s).unwrap();
    assert!(c.starts_with('c') && c == codec::state_root(&now) && root_matches(&c, &s).unwrap(), "{c}");
    assert!(!root_matches(&b.replacen('b', "c", 1), &s).unwrap());
    let glance_end = codec::glance_end(&now).unwrap();
    let (glance, keys) = (blake3::hash(&now[..glance_end]), blake3::hash(&now[glance_end..]));
    assert_eq!(codec::glance_root(glance.as_bytes(), keys.as_bytes()), c);
    assert_eq!(codec::state_root_parts(&now).1, Some(*keys.as_bytes()));
    assert_ne!(codec::glance_root(keys.as_bytes(), glance.as_bytes()), c, "each part in its place");
}
