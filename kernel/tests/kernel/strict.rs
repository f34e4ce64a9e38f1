#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of a test file
//! Strict mode in the kernel: a person's decision on a goal under a person key is committed only
//! signed by that key, over the message that binds the goal, the event and its place in the
//! log. Without a signer, with another key, with a signature replayed from an earlier decision,
//! or to put the goal under a forged key: refused, nothing written.

use std::path::Path;
use std::sync::{Arc, Mutex};

use loopx_core::kernel::*;
use loopx_core::{ErrorKind, GoalId};
use loopx_kernel::person;
use loopx_kernel::{MemKernel, MemStore, Silent, SystemClock};

use crate::support::block_on;

/// Signs with a key, and keeps every signature it made.
struct Recording {
    key: person::PersonKey,
    made: Mutex<Vec<String>>,
}

impl Signer for Recording {
    fn public_key(&self) -> String {
        self.key.public_key()
    }
    fn sign(&self, message: &[u8]) -> String {
        let s = self.key.sign(message);
        self.made.lock().unwrap().push(s.clone());
        s
    }
}

/// Hands out a signature made before, whatever it is asked to sign.
struct Replaying {
    public_key: String,
    signature: String,
}

impl Signer for Replaying {
    fn public_key(&self) -> String {
        self.public_key.clone()
    }
    fn sign(&self, _: &[u8]) -> String {
        self.signature.clone()
    }
}

fn ctx(goal: &GoalId, signer: Option<Arc<dyn Signer>>) -> CommandContext {
    CommandContext { goal: Some(goal.clone()), signer: signer.map(SignerRef), ..CommandContext::default() }
}

#[test]
fn only_the_persons_key_signs_a_persons_decision_and_each_signature_once() {
    let k = MemKernel::over(MemStore::new(
        Path::new("/nonexistent/strict"),
        Arc::new(SystemClock),
        Arc::new(Silent),
    ));
    let goal = GoalId::new("g").unwrap();
    block_on(k.create_goal(CreateGoal {
        id: goal.clone(),
        objective: "o".into(),
        title: None,
        make_default: true,
    }))
    .unwrap();
    let key = person::PersonKey::generate().unwrap();
    let mine = Arc::new(Recording { key, made: Mutex::new(Vec::new()) });
    let public = mine.public_key();
    let seq = |k: &MemKernel| block_on(k.show_goal(Some(&goal))).unwrap().events;

    // Putting the goal under a key is signed by that key.
    let r = block_on(k.set_person_key(&ctx(&goal, None), public.clone()));
    assert_eq!(r.unwrap_err().kind, ErrorKind::Refused, "unsigned");
    block_on(k.set_person_key(&ctx(&goal, Some(mine.clone())), public.clone())).unwrap();
    block_on(k.stop_goal(&ctx(&goal, Some(mine.clone())), None, false)).unwrap();
    let stopped_sig = mine.made.lock().unwrap().last().cloned().unwrap();
    let at = seq(&k);

    let other = person::PersonKey::generate().unwrap();
    let forged_public = other.public_key();
    let other: Arc<dyn Signer> = Arc::new(other);
    let replay: Arc<dyn Signer> = Arc::new(Replaying { public_key: public.clone(), signature: stopped_sig });
    for (what, signer) in
        [("no signer", None), ("another key", Some(other.clone())), ("a replayed signature", Some(replay))]
    {
        let e = block_on(k.resume_goal(&ctx(&goal, signer))).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Refused, "{what}: {}", e.message);
        assert_eq!(seq(&k), at, "{what}: nothing written");
    }
    // A forged key, signed by itself, does not replace the person's.
    let e = block_on(k.set_person_key(&ctx(&goal, Some(other)), forged_public)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Refused, "{}", e.message);
    assert_eq!(block_on(k.show_goal(Some(&goal))).unwrap().goal.person_key, Some(public));
    // The person's own key, again: taken.
    block_on(k.resume_goal(&ctx(&goal, Some(mine)))).unwrap();
    assert_eq!(seq(&k), at + 1);
}
