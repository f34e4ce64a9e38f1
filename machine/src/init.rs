//! Starting work: where a project may be made, and a goal found or made in it. `loopx init`
//! and a host's `/loopx` entry both start a goal here, so the two never disagree about what
//! starting means.

use std::path::Path;

use loopx_core::kernel::{CreateGoal, GoalBody, Kernel as _};
use loopx_core::{Error, GoalId, Result};
use loopx_kernel::{DynKernel, find_root};

/// Refuses a project at `root` inside another loopx project, unless `nested` says it is meant:
/// a second `.loopx/` there would split the outer project's state.
pub fn check_place(root: &Path, nested: bool) -> Result<()> {
    match find_root(root).filter(|r| r != root) {
        Some(outer) if !nested => Err(Error::usage(format!(
            "{} is inside the loopx project at {}; a second .loopx/ here would split its state",
            root.display(),
            outer.display()
        ))
        .with_hint(format!(
            "run loopx from there (or with --project {}), or pass --nested to start a separate project here",
            outer.display()
        ))),
        _ => Ok(()),
    }
}

/// The goal a start found or made.
#[derive(Clone, Debug)]
pub struct Started {
    pub goal: GoalBody,
    /// Made now (rather than found).
    pub created: bool,
    /// Found with another objective than the one asked for, which was kept.
    pub other_objective: bool,
}

/// The goal `id` in the project `k` opens: found as it is, or made with `objective` (and
/// `title`; the project's default goal with `make_default`). A goal that does not exist yet
/// needs an objective.
pub async fn goal(
    k: &DynKernel,
    id: GoalId,
    objective: Option<&str>,
    title: Option<&str>,
    make_default: bool,
) -> Result<Started> {
    if k.list_goals().await?.goals.iter().any(|g| g.id == id) {
        let detail = k.show_goal(Some(&id)).await?;
        let other_objective = objective.is_some_and(|o| o != detail.goal.objective);
        let goal = GoalBody { goal: detail.goal, is_default: detail.is_default };
        return Ok(Started { goal, created: false, other_objective });
    }
    let objective = objective.ok_or_else(|| {
        Error::usage(format!("goal {id} does not exist yet; --objective is needed to create it"))
            .with_hint(format!("loopx init --goal-id {id} --objective \"what this goal achieves\""))
    })?;
    let req =
        CreateGoal { id, objective: objective.to_owned(), title: title.map(str::to_owned), make_default };
    Ok(Started { goal: k.create_goal(req).await?.body, created: true, other_objective: false })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use loopx_kernel::{FileStore, Silent, StoreOptions, SystemClock};

    use super::*;

    /// The kernel's calls need no runtime: polled until ready.
    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        loop {
            if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
        }
    }

    #[test]
    fn a_goal_is_made_once_and_found_after() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let (store, _) =
            FileStore::init(root, Arc::new(SystemClock), Arc::new(Silent), StoreOptions::default()).unwrap();
        let k = DynKernel::over(Box::new(store));
        let main = GoalId::new("main").unwrap();
        let e = block_on(goal(&k, main.clone(), None, None, false)).unwrap_err();
        assert!(e.message.contains("--objective is needed"), "{e:?}");
        let made = block_on(goal(&k, main.clone(), Some("ship it"), None, false)).unwrap();
        assert!(made.created && made.goal.is_default, "the first goal is the default");
        let found = block_on(goal(&k, main.clone(), Some("something else"), None, false)).unwrap();
        assert!(!found.created && found.other_objective);
        assert_eq!(found.goal.goal.objective, "ship it", "the goal's objective is kept");
        // A project inside this one is refused unless meant.
        let inner = root.join("sub");
        std::fs::create_dir(&inner).unwrap();
        assert!(check_place(&inner, false).unwrap_err().message.contains("would split its state"));
        assert!(check_place(&inner, true).is_ok() && check_place(root, false).is_ok());
    }
}
