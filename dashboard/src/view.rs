//! What the pages show, read through the kernel: plain data, no HTML.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use loopx_core::event::Event;
use loopx_core::kernel::{HistoryEntry, Kernel, QuotaStatus, StatusView};
use loopx_core::model::{Agent, Evidence, Gate, GateBlocks, GateStatus, Todo, TodoStatus};
use loopx_core::{GoalId, Result, Timestamp, TodoId};
use loopx_kernel::Board;
use loopx_kernel::log::EventLine;
use loopx_kernel::state::GoalState;
use loopx_machine::projects::{self, Inbox};

use crate::App;

/// Todos a kanban column shows per page.
pub(crate) const PER_PAGE: usize = 50;

/// Run-history entries a goal page shows.
const RUNS_SHOWN: usize = 40;

/// Evidence entries a goal page shows.
const EVIDENCE_SHOWN: usize = 30;

/// A goal as the inbox lists it.
pub(crate) struct GoalLine {
    pub id: GoalId,
    pub objective: String,
    pub open: usize,
    pub done: usize,
    pub needs: usize,
}

/// A project and its goals, or why it cannot be read.
pub(crate) struct ProjectLine {
    pub root: PathBuf,
    pub key: String,
    pub goals: std::result::Result<Vec<GoalLine>, String>,
}

pub(crate) struct InboxPage {
    pub inbox: Inbox,
    pub projects: Vec<ProjectLine>,
}

pub(crate) async fn inbox(app: &Arc<App>) -> Result<InboxPage> {
    let roots = app.projects()?;
    let now = app.cfg.clock.now();
    let inbox = projects::inbox(&roots, |r| app.kernel(r), now).await;
    let mut lines = Vec::new();
    for root in roots {
        let goals = async {
            let k = app.kernel(&root)?;
            let mut out = Vec::new();
            for g in k.store().project()?.goals {
                let s = k.status(Some(&g.id)).await?;
                out.push(GoalLine {
                    id: g.id,
                    objective: s.objective,
                    open: s.counts.open + s.counts.blocked + s.counts.deferred,
                    done: s.counts.done,
                    needs: s.needs_user.len(),
                });
            }
            Ok::<_, loopx_core::Error>(out)
        }
        .await;
        lines.push(ProjectLine { key: crate::project_key(&root), root, goals: goals.map_err(|e| e.message) });
    }
    Ok(InboxPage { inbox, projects: lines })
}

/// A kanban column.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Lane {
    Open,
    Claimed,
    Blocked,
    Done,
}

impl Lane {
    pub fn title(self) -> &'static str {
        match self {
            Lane::Open => "Open",
            Lane::Claimed => "Claimed",
            Lane::Blocked => "Blocked",
            Lane::Done => "Done",
        }
    }
}

/// A card on the kanban.
pub(crate) struct Card {
    pub id: TodoId,
    pub text: String,
    pub priority: String,
    pub role: String,
    pub status: TodoStatus,
    /// Who holds it, or whom it waits for.
    pub who: Option<String>,
    /// The open gate holding it back.
    pub gate: Option<String>,
}

/// One day of the goal's life.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Day {
    /// `YYYY-MM-DD` (UTC).
    pub date: String,
    pub slots: u64,
    pub closed: u64,
}

/// What only the log knows: the goal's days, its run history and each agent's last act.
#[derive(Debug)]
pub(crate) struct Activity {
    pub days: Vec<Day>,
    pub runs: Vec<HistoryEntry>,
    pub last_act: BTreeMap<String, Timestamp>,
    /// `loopx report` of the goal, read in the same pass.
    pub trajectory: loopx_report::Trajectory,
}

/// Activity per goal, kept while the goal's log has the same number of events.
#[derive(Default)]
pub(crate) struct ActivityCache(Mutex<HashMap<(PathBuf, GoalId), Counted>>);

/// Activity and the number of events it was read from.
type Counted = (u64, Arc<Activity>);

/// A kanban column, its cards on the page asked for, and how many it holds in all.
pub(crate) type LaneCards = (Lane, Vec<Card>, usize);

pub(crate) struct GoalPage {
    pub root: PathBuf,
    pub key: String,
    pub status: StatusView,
    pub gates: Vec<Gate>,
    /// The page's cards per lane, and each lane's size.
    pub lanes: Vec<LaneCards>,
    pub page: usize,
    pub pages: usize,
    pub quota: QuotaStatus,
    pub agents: Vec<(Agent, Option<Timestamp>)>,
    pub evidence: Vec<Evidence>,
    pub activity: Arc<Activity>,
    /// The latest ended turns of `loopx drive`, newest first.
    pub turns: Vec<loopx_core::drive::TurnEnd>,
    /// Strict mode: an answer needs the person key's passphrase.
    pub strict: bool,
}

/// The day of `at`, `YYYY-MM-DD`.
fn day_of(at: Timestamp) -> String {
    at.to_string().chars().take(10).collect()
}

fn day_entry<'a>(days: &'a mut BTreeMap<String, Day>, day: &str) -> &'a mut Day {
    days.entry(day.to_owned()).or_insert_with(|| Day { date: day.to_owned(), ..Day::default() })
}

/// Activity read line by line: the runs kept are the latest [`RUNS_SHOWN`], so memory does
/// not grow with the log.
#[derive(Default)]
struct ActivityFold {
    days: BTreeMap<String, Day>,
    spends: HashMap<String, (String, u64)>,
    runs: std::collections::VecDeque<HistoryEntry>,
    last_act: BTreeMap<String, Timestamp>,
}

impl ActivityFold {
    fn count(&mut self, e: &Event, day: &str) {
        match e {
            Event::TodoCompleted { .. } | Event::TodoSuperseded { .. } => {
                day_entry(&mut self.days, day).closed += 1;
            }
            Event::SlotSpent { spend } => {
                day_entry(&mut self.days, day).slots += u64::from(spend.slots);
                self.spends.insert(spend.id.to_string(), (day.to_owned(), u64::from(spend.slots)));
            }
            Event::SlotVoided { spend, .. } => {
                if let Some((d, n)) = self.spends.get(&spend.to_string())
                    && let Some(day) = self.days.get_mut(d)
                {
                    day.slots = day.slots.saturating_sub(*n);
                }
            }
            Event::TurnSettled { steps } => {
                for s in steps {
                    self.count(s, day);
                }
            }
            _ => {}
        }
    }

    fn line(&mut self, l: &EventLine) {
        let day = day_of(l.at);
        self.count(&l.event, &day);
        self.last_act.insert(l.actor.clone(), l.at);
        if matches!(
            l.event,
            Event::DecisionRecorded { .. }
                | Event::RunRecorded { .. }
                | Event::SlotSpent { .. }
                | Event::SlotVoided { .. }
                | Event::TurnSettled { .. }
        ) {
            if self.runs.len() == RUNS_SHOWN {
                self.runs.pop_front();
            }
            self.runs.push_back(l.history_entry());
        }
    }

    fn finish(self, trajectory: loopx_report::Trajectory) -> Activity {
        let mut runs: Vec<HistoryEntry> = self.runs.into();
        runs.reverse();
        Activity { days: self.days.into_values().collect(), runs, last_act: self.last_act, trajectory }
    }
}

impl ActivityCache {
    /// The goal's activity and report, from one pass over its log (kept until it grows).
    pub(crate) fn get(&self, app: &App, root: &Path, goal: &GoalId, events: u64) -> Result<Arc<Activity>> {
        let key = (root.to_path_buf(), goal.clone());
        if let Ok(cache) = self.0.lock()
            && let Some((n, a)) = cache.get(&key)
            && *n == events
        {
            return Ok(a.clone());
        }
        let mut fold = ActivityFold::default();
        let mut report = loopx_report::Fold::new(goal.clone(), loopx_report::Window::default());
        let mut read = 0u64;
        app.kernel(root)?.store().each_line(goal, &mut |line| {
            fold.line(&line);
            report.line(&line);
            read += 1;
            Ok(true)
        })?;
        let a = Arc::new(fold.finish(report.finish()));
        if let Ok(mut cache) = self.0.lock() {
            cache.insert(key, (read, a.clone()));
        }
        Ok(a)
    }
}

/// The gate that holds todo `t` back, if an open one does.
fn gate_of(t: TodoId, gates: &[Gate]) -> Option<String> {
    gates
        .iter()
        .filter(|g| g.status == GateStatus::Open)
        .find(|g| match &g.blocks {
            GateBlocks::Todos(ids) => ids.contains(&t),
            GateBlocks::Goal => true,
            GateBlocks::Agent(_) => false,
        })
        .map(|g| g.id.to_string())
}

fn card(t: &Todo, gate: Option<String>) -> Card {
    Card {
        id: t.id,
        text: t.text.clone(),
        priority: t.priority.to_string(),
        role: t.role.to_string(),
        status: t.status,
        who: t.claimed_by.as_ref().or(t.assignee.as_ref()).map(ToString::to_string),
        gate,
    }
}

/// When a closed todo closed.
fn closed_at(t: &Todo) -> Timestamp {
    t.completion.as_ref().map_or(t.updated_at, |c| c.at)
}

/// The kanban's page `page`: the open work from the live state; the closed, most recent
/// first, from the live state while it has them (it keeps the most recently closed, more than
/// a page) and from the archive past them.
fn lanes(app: &App, root: &Path, b: &Board, page: usize) -> Result<(Vec<LaneCards>, usize)> {
    let s = &b.state;
    // Lanes are sorted from the todos' keys; only the cards on the page are decoded.
    let mut by_lane: BTreeMap<Lane, Vec<(TodoId, Option<String>)>> = BTreeMap::new();
    let mut closed: Vec<&Todo> = Vec::new();
    for k in s.todos.keys() {
        let gate = gate_of(k.id, &s.gates);
        let lane = match k.status {
            TodoStatus::Done | TodoStatus::Superseded => {
                closed.extend(s.todo(k.id));
                continue;
            }
            TodoStatus::Blocked | TodoStatus::Deferred => Lane::Blocked,
            TodoStatus::Open if k.claimed_by.is_some() => Lane::Claimed,
            TodoStatus::Open if gate.is_some() => Lane::Blocked,
            TodoStatus::Open => Lane::Open,
        };
        by_lane.entry(lane).or_default().push((k.id, gate));
    }
    closed.sort_by_key(|t| std::cmp::Reverse((closed_at(t), t.id)));
    let done_total = b.status.counts.done + b.status.counts.superseded;
    let open_most = by_lane.values().map(Vec::len).max().unwrap_or(0);
    let pages = open_most.max(done_total).div_ceil(PER_PAGE).max(1);
    let (from, to) = (page * PER_PAGE, (page + 1) * PER_PAGE);
    let mut done: Vec<Card> = closed.iter().skip(from).take(PER_PAGE).map(|t| card(t, None)).collect();
    if to > closed.len() && done_total > closed.len() {
        // Past the live state's closed work: the archive, newest first.
        let archived = app.kernel(root)?.store().archive(&s.goal.id, &s.archive)?;
        let skip = from.saturating_sub(closed.len());
        done.extend(
            archived.iter().rev().skip(skip).take(PER_PAGE - done.len()).map(|a| card(&a.todo, None)),
        );
    }
    let mut out: Vec<LaneCards> = [Lane::Open, Lane::Claimed, Lane::Blocked]
        .iter()
        .map(|lane| {
            let all = by_lane.remove(lane).unwrap_or_default();
            let n = all.len();
            let cards = all
                .into_iter()
                .skip(from)
                .take(PER_PAGE)
                .filter_map(|(id, gate)| s.todo(id).map(|t| card(t, gate)))
                .collect();
            (*lane, cards, n)
        })
        .collect();
    out.push((Lane::Done, done, done_total));
    Ok((out, pages))
}

/// The newest evidence: from the live state when it holds the newest (evidence ids count up,
/// so the newest are the highest numbers), with the archive's otherwise.
fn latest_evidence(app: &App, root: &Path, s: &GoalState) -> Result<Vec<Evidence>> {
    let mut evidence = s.evidence.clone();
    let newest = s.evidence_total;
    let wanted = newest.saturating_sub(EVIDENCE_SHOWN as u64) + 1..=newest;
    let live = evidence.iter().filter(|e| wanted.contains(&e.id.number())).count() as u64;
    if live < wanted.end().saturating_sub(*wanted.start()) + 1 && !s.archive.is_empty() {
        let archived = app.kernel(root)?.store().archive(&s.goal.id, &s.archive)?;
        evidence.extend(archived.into_iter().flat_map(|a| a.evidence));
    }
    evidence.sort_by_key(|e| std::cmp::Reverse(e.id));
    evidence.truncate(EVIDENCE_SHOWN);
    Ok(evidence)
}

/// Driven turns a goal page lists.
const TURNS_SHOWN: usize = 10;

pub(crate) async fn goal(app: &Arc<App>, root: &Path, goal: &GoalId, page: usize) -> Result<GoalPage> {
    let board = app.kernel(root)?.board(Some(goal))?;
    let (lanes, pages) = lanes(app, root, &board, page)?;
    let activity = app.activity.get(app, root, goal, board.status.events)?;
    let evidence = latest_evidence(app, root, &board.state)?;
    let agents = board
        .state
        .agents
        .iter()
        .map(|a| (a.clone(), activity.last_act.get(a.id.as_str()).copied()))
        .collect();
    Ok(GoalPage {
        root: root.to_path_buf(),
        key: crate::project_key(root),
        gates: board.state.gates.clone(),
        lanes,
        page: page.min(pages - 1),
        pages,
        agents,
        evidence,
        activity,
        turns: board.state.turn_ends.iter().rev().take(TURNS_SHOWN).cloned().collect(),
        strict: board.state.goal.person_key.is_some(),
        status: board.status,
        quota: board.quota,
    })
}
