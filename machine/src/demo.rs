//! `loopx demo`: a whole goal, scripted, in a temporary project on the embedded store. Two
//! agents on two hosts (a Codex CLI agent and a Claude Code agent) and a person work it to the
//! end through the real kernel: a plan, claims, evidence, a question the person answers, a
//! handoff from one host to the other, a validation command that fails and then passes, and a
//! spend for every turn. The agents are scripted ([`ScriptedAgent`] implements core's `Agent`),
//! nothing else is: every decision shown is the kernel's.
//!
//! The caller hands in what the demo would otherwise read from the machine ([`Stage`]): the
//! empty directory it plays in, the time by the system's clock, and the process runner its
//! validation command runs through. [`run`] returns the [`DemoReport`]; [`render`] writes it as
//! text.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use serde::Serialize;

use loopx_core::continuation::Continuation;
use loopx_core::decision::{DecisionKind, ShouldRunAnswer};
use loopx_core::kernel::*;
use loopx_core::model::{
    DeliveryOutcome, EvidenceKind, GateBlocks, GateStatus, Priority, Role, TodoClass, Validation,
};
use loopx_core::traits::{Agent, EvidenceDraft, HandoffDraft, Provider, TodoDraft, TurnReport};
use loopx_core::{AgentId, AgentType, Error, GoalId, IdempotencyKey, ManualClock, Result, Timestamp, TodoId};
use loopx_kernel::gates::GateRuntime;
use loopx_kernel::{FileKernel, Silent, StoreOptions};

/// The most ticks the demo takes before it calls itself stuck.
const MAX_TICKS: usize = 40;
/// Ticks a question stays open before the scripted person answers it.
const PERSON_LATENCY: usize = 2;
/// The story's pace, on its own clock: a plan takes this long, a turn without a scripted
/// length this long, and a host's loop comes back after this many minutes.
const PLANNING_MINUTES: i64 = 6;
const DEFAULT_TURN_MINUTES: i64 = 10;
const CADENCE_MINUTES: i64 = 2;
/// The story ends about this long after it begins: its clock starts this long before now, so
/// nothing it records lies in the future.
const STORY_HOURS: i64 = 4;

/// The demo's clock: a [`ManualClock`] that moves only when the story says time passes (a
/// turn's work, the loop's cadence), so the goal's history reads like hours of work while the
/// demo takes a second, and `loopx report` on it tells the same story every time. It starts on
/// the minute, [`STORY_HOURS`] before `now`.
fn story_clock(now: Timestamp) -> ManualClock {
    let minute = 60_000;
    let start = (now.unix_millis() - STORY_HOURS * 3_600_000) / minute * minute;
    ManualClock::new(Timestamp::from_unix_millis(start))
}

/// What the demo is handed: everything it would otherwise read from the machine.
pub struct Stage {
    /// An empty directory for the demo's project (the CLI makes one in the system's temporary
    /// directory). The demo removes it afterwards unless `keep`.
    pub root: PathBuf,
    /// Keep the project, to look around in it afterwards.
    pub keep: bool,
    /// Now, by the system's clock: the story ends about now.
    pub now: Timestamp,
    /// The process runner the export check (a validation command) runs through.
    pub processes: Arc<dyn Provider>,
}

impl std::fmt::Debug for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stage")
            .field("root", &self.root)
            .field("keep", &self.keep)
            .field("now", &self.now)
            .finish_non_exhaustive()
    }
}

/// One line of the timeline.
#[derive(Clone, Debug, Serialize)]
pub struct Beat {
    /// Milliseconds since the demo started.
    pub at_ms: u64,
    /// `maya` (the person), or an agent id.
    pub who: String,
    /// The agent's host, as an agent type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<AgentType>,
    pub what: String,
}

/// What the demo did: `loopx demo --json` prints it, [`render`] writes it as text.
#[derive(Debug, Serialize)]
pub struct DemoReport {
    /// The project's directory.
    pub project: String,
    /// Whether the project was kept.
    pub kept: bool,
    /// How long the demo took, by the wall clock.
    pub elapsed_ms: u64,
    pub ticks: usize,
    pub timeline: Vec<Beat>,
    /// The goal's status at the end.
    pub status: StatusView,
}

/// A step of an agent's script for one todo: what the turn reports, and the file its work
/// writes in the project (relative path), if any.
#[derive(Debug)]
struct Step {
    report: TurnReport,
    writes: Option<&'static str>,
    /// How long the turn works, on the story's clock.
    minutes: i64,
}

/// An agent whose turns are written in advance, per todo. It still goes through the kernel
/// like any other: the kernel decides what it works on and whether its work counts.
#[derive(Debug)]
pub struct ScriptedAgent {
    id: AgentId,
    agent_type: AgentType,
    root: PathBuf,
    plan: Mutex<Vec<TodoDraft>>,
    script: Mutex<HashMap<TodoId, VecDeque<Step>>>,
    /// Minutes its last turn worked.
    worked: Mutex<i64>,
}

#[async_trait]
impl Agent for ScriptedAgent {
    fn id(&self) -> &AgentId {
        &self.id
    }

    fn agent_type(&self) -> AgentType {
        self.agent_type.clone()
    }

    async fn act(&self, continuation: &Continuation) -> Result<TurnReport> {
        match continuation {
            Continuation::Replan { .. } => {
                *lock(&self.worked)? = PLANNING_MINUTES;
                let plan = std::mem::take(&mut *lock(&self.plan)?);
                Ok(TurnReport {
                    todo: None,
                    summary: format!("planned {} todos", plan.len()),
                    plan,
                    ..report(None, "")
                })
            }
            Continuation::Run { todo, .. } => {
                let step = lock(&self.script)?.get_mut(todo).and_then(VecDeque::pop_front);
                *lock(&self.worked)? = step.as_ref().map_or(DEFAULT_TURN_MINUTES, |s| s.minutes);
                let Some(step) = step else {
                    return Ok(TurnReport {
                        completed: true,
                        evidence: vec![note("done as planned")],
                        ..report(Some(*todo), "worked the todo through")
                    });
                };
                if let Some(path) = step.writes {
                    std::fs::write(self.root.join(path), b"ok\n")
                        .map_err(|e| Error::internal(format!("the demo agent cannot write {path}: {e}")))?;
                }
                Ok(TurnReport { todo: Some(*todo), ..step.report })
            }
            other => Err(Error::internal(format!("a scripted agent is never asked to act on {other:?}"))),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> Result<std::sync::MutexGuard<'_, T>> {
    m.lock().map_err(|_| Error::internal("a demo agent's script is poisoned"))
}

fn report(todo: Option<TodoId>, summary: &str) -> TurnReport {
    TurnReport {
        todo,
        summary: summary.to_owned(),
        evidence: Vec::new(),
        completed: false,
        no_follow_up: false,
        plan: Vec::new(),
        question: None,
        handoff: None,
    }
}

fn note(summary: &str) -> EvidenceDraft {
    EvidenceDraft {
        kind: EvidenceKind::Note,
        summary: summary.to_owned(),
        command: None,
        exit_code: None,
        output_digest: None,
    }
}

fn test_run(argv: &str, summary: &str) -> EvidenceDraft {
    EvidenceDraft {
        kind: EvidenceKind::Test,
        summary: summary.to_owned(),
        command: Some(argv.split(' ').map(str::to_owned).collect()),
        exit_code: Some(0),
        output_digest: None,
    }
}

fn t(n: u64) -> TodoId {
    TodoId::from_number(n)
}

/// The Codex CLI agent: plans, writes the CSV writer, asks before exporting emails, starts the
/// button and hands it to Claude Code when its session ends; adds the columns once approved.
fn codex(root: &Path) -> Result<ScriptedAgent> {
    let plan = vec![
        TodoDraft {
            text: "Write the CSV writer for report rows".into(),
            priority: Priority::P1,
            validation: None,
        },
        TodoDraft {
            text: "Add the contact columns to the export".into(),
            priority: Priority::P1,
            validation: None,
        },
        TodoDraft {
            text: "Wire the Export button to the writer".into(),
            priority: Priority::P2,
            validation: None,
        },
        TodoDraft {
            text: "Pass the export check".into(),
            priority: Priority::P3,
            validation: Some(vec!["test".into(), "-f".into(), "export.ok".into()]),
        },
    ];
    let mut script = HashMap::new();
    script.insert(
        t(1),
        VecDeque::from([Step {
            report: TurnReport {
                completed: true,
                evidence: vec![test_run("cargo test csv_writer", "cargo test csv_writer: 14 passed")],
                ..report(None, "wrote the CSV writer with RFC 4180 quoting")
            },
            writes: None,
            minutes: 25,
        }]),
    );
    script.insert(
        t(2),
        VecDeque::from([
            Step {
                report: TurnReport {
                    question: Some("May the export include customers' email addresses?".into()),
                    ..report(None, "the contact columns would export emails; asking first")
                },
                writes: None,
                minutes: 8,
            },
            Step {
                report: TurnReport {
                    completed: true,
                    evidence: vec![test_run(
                        "cargo test export_columns",
                        "cargo test export_columns: 6 passed",
                    )],
                    ..report(None, "added name, email and phone columns behind the setting")
                },
                writes: None,
                minutes: 18,
            },
        ]),
    );
    script.insert(
        t(3),
        VecDeque::from([Step {
            report: TurnReport {
                evidence: vec![note("the button renders on the reports page; not wired yet")],
                handoff: Some(HandoffDraft {
                    to_host: AgentType::from_static("claude-code"),
                    note: "The button renders; wire its onClick to the writer and stream the file.".into(),
                }),
                ..report(None, "added the Export button; the session ends here")
            },
            writes: None,
            minutes: 30,
        }]),
    );
    Ok(ScriptedAgent {
        id: AgentId::new("codex-1")?,
        agent_type: AgentType::from_static("codex-cli"),
        root: root.to_path_buf(),
        plan: Mutex::new(plan),
        script: Mutex::new(script),
        worked: Mutex::new(0),
    })
}

/// The Claude Code agent: its session starts when the handoff arrives; it takes the button
/// over and makes the export check pass on its second try.
fn claude(root: &Path) -> Result<ScriptedAgent> {
    let mut script = HashMap::new();
    script.insert(
        t(3),
        VecDeque::from([Step {
            report: TurnReport {
                completed: true,
                evidence: vec![test_run("npm test -- export-button", "npm test -- export-button: 3 passed")],
                ..report(None, "wired the button; the file streams")
            },
            writes: None,
            minutes: 22,
        }]),
    );
    script.insert(
        t(4),
        VecDeque::from([
            Step {
                report: TurnReport {
                    completed: true,
                    evidence: vec![note("the export looks right by eye")],
                    ..report(None, "believes the export is done")
                },
                writes: None,
                minutes: 12,
            },
            Step {
                report: TurnReport {
                    completed: true,
                    no_follow_up: true,
                    evidence: vec![note("generated the export and the marker the check reads")],
                    ..report(None, "produced the export the check looks for")
                },
                writes: Some("export.ok"),
                minutes: 9,
            },
        ]),
    );
    Ok(ScriptedAgent {
        id: AgentId::new("claude-1")?,
        agent_type: AgentType::from_static("claude-code"),
        root: root.to_path_buf(),
        plan: Mutex::new(Vec::new()),
        script: Mutex::new(script),
        worked: Mutex::new(0),
    })
}

struct Demo {
    k: FileKernel,
    clock: Arc<ManualClock>,
    start: Instant,
    timeline: Vec<Beat>,
    goal: GoalId,
    turns: u64,
}

impl Demo {
    fn say(&mut self, who: &str, host: Option<AgentType>, what: String) {
        let at_ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.timeline.push(Beat { at_ms, who: who.to_owned(), host, what });
    }

    fn person(&self) -> CommandContext {
        CommandContext { goal: Some(self.goal.clone()), ..CommandContext::default() }
    }

    fn agent_ctx(&self, a: &AgentId, turn: Option<&str>) -> Result<CommandContext> {
        Ok(CommandContext {
            goal: Some(self.goal.clone()),
            agent: Some(a.clone()),
            key: turn.map(IdempotencyKey::new).transpose()?,
            session: None,
            signer: None,
        })
    }

    /// The scripted person answers every question open for long enough.
    async fn person_answers(
        &mut self,
        asked_at: &mut HashMap<loopx_core::GateId, usize>,
        tick: usize,
    ) -> Result<()> {
        let gates = self.k.list_gates(Some(&self.goal), false).await?;
        for g in gates.gates {
            let since = *asked_at.entry(g.id).or_insert(tick);
            if tick >= since + PERSON_LATENCY {
                let req = AnswerGate {
                    gate: g.id,
                    status: GateStatus::Approved,
                    note: Some("yes, behind the include-contacts setting".into()),
                };
                self.k.answer_gate(&self.person(), req).await?;
                self.say(
                    "maya",
                    None,
                    format!("approves {}: \"yes, behind the include-contacts setting\"", g.id),
                );
            }
        }
        Ok(())
    }

    /// One tick for one agent: a waiting handoff first, then should-run, then (if it says run)
    /// the agent's turn and its writeback.
    async fn tick(&mut self, agent: &ScriptedAgent) -> Result<ShouldRunAnswer> {
        let id = agent.id().clone();
        let host = Some(agent.agent_type());
        if self.k.handoff_packet(Some(&self.goal), agent.agent_type(), Some(&id)).await?.is_some() {
            let req = AcceptHandoff { host: agent.agent_type(), handoff: None };
            let r = self.k.accept_handoff(&self.agent_ctx(&id, None)?, req).await?;
            if let Some(p) = &r.body.packet {
                let h = &p.handoff;
                let done: Vec<String> = p.done.iter().map(|d| d.todo.to_string()).collect();
                let todos: Vec<String> = h.todos.iter().map(|t| t.todo.to_string()).collect();
                self.say(
                    id.as_str(),
                    host.clone(),
                    format!(
                        "resumes {} from {}{}: takes {} over; done so far {}; note \"{}\"",
                        h.id,
                        h.from,
                        if r.body.registered { " (registering itself)" } else { "" },
                        todos.join(", "),
                        done.join(", "),
                        h.note.as_deref().unwrap_or("")
                    ),
                );
            }
        }
        self.turns += 1;
        let turn = format!("turn-{}", self.turns);
        let ctx = self.agent_ctx(&id, Some(&turn))?;
        let d = self.k.should_run(&ctx, None).await?;
        self.say(id.as_str(), host.clone(), format!("should-run → {}", decision_words(&d)));
        if !d.should_run {
            return Ok(d);
        }
        let plain = self.agent_ctx(&id, None)?;
        if let Continuation::Run { todo, claim_required: true } = d.continuation {
            self.k.claim_todo(&plain, todo).await?;
            self.say(id.as_str(), host.clone(), format!("claims {todo}"));
        }
        let r = agent.act(&d.continuation).await?;
        self.clock.advance_minutes(*lock(&agent.worked)?);
        if !r.plan.is_empty() {
            for draft in &r.plan {
                let req = AddTodo {
                    text: draft.text.clone(),
                    priority: draft.priority,
                    role: Role::Agent,
                    class: TodoClass::Advance,
                    scopes: vec![],
                    after_gate: None,
                    validation: draft.validation.clone().map(|argv| Validation { argv, timeout_secs: 30 }),
                };
                let added = self.k.add_todo(&plain, req).await?;
                let check = draft
                    .validation
                    .as_ref()
                    .map(|v| format!(" (check: {})", v.join(" ")))
                    .unwrap_or_default();
                self.say(
                    id.as_str(),
                    host.clone(),
                    format!("plans {} {}{check}", added.body.todo.id, draft.text),
                );
            }
            return Ok(d);
        }
        let Some(todo) = r.todo else { return Ok(d) };
        self.say(id.as_str(), host.clone(), format!("works on {todo}: {}", r.summary));
        if let Some(q) = &r.question {
            let g = self
                .k
                .ask_gate(
                    &plain,
                    AskGate {
                        question: q.clone(),
                        blocks: GateBlocks::Todos(vec![todo]),
                        kind: loopx_core::model::GateKind::Person,
                    },
                )
                .await?;
            self.say(id.as_str(), host.clone(), format!("asks {} (holds {todo}): \"{q}\"", g.body.gate.id));
        }
        if r.completed {
            let evidence = r.evidence.first().map(|e| NewEvidence {
                kind: e.kind,
                summary: e.summary.clone(),
                command: e.command.clone(),
                exit_code: e.exit_code,
                link: None,
            });
            let req = SettleTurn {
                complete: CompleteTodo {
                    todo,
                    evidence,
                    no_follow_up: r.no_follow_up,
                    note: None,
                    next_todo: None,
                },
                classification: "implement".into(),
                delivery_outcome: DeliveryOutcome::OutcomeProgress,
                slots: 1,
                tokens: None,
                usd: None,
            };
            match self.k.settle_turn(&ctx, req).await {
                Ok(s) => {
                    let proof =
                        s.body.evidence.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
                    self.say(
                        id.as_str(),
                        host,
                        format!(
                            "completes {todo} with evidence {proof}; spends {} (writeback {})",
                            s.body.spend, s.body.run
                        ),
                    );
                    return Ok(d);
                }
                Err(e) if e.kind == loopx_core::ErrorKind::Refused => {
                    self.say(id.as_str(), host.clone(), format!("completion refused: {}", e.message));
                }
                Err(e) => return Err(e),
            }
        } else {
            for e in &r.evidence {
                let req = AddEvidence {
                    todo,
                    evidence: NewEvidence {
                        kind: e.kind,
                        summary: e.summary.clone(),
                        command: e.command.clone(),
                        exit_code: e.exit_code,
                        link: None,
                    },
                };
                let added = self.k.add_evidence(&plain, req).await?;
                self.say(
                    id.as_str(),
                    host.clone(),
                    format!("records {}: {}", added.body.evidence.id, e.summary),
                );
            }
        }
        // A turn that did not complete its todo still writes back before it spends.
        let outcome =
            if r.question.is_some() { DeliveryOutcome::SurfaceOnly } else { DeliveryOutcome::OutcomeGap };
        let req = RefreshState {
            todo,
            classification: "implement".into(),
            delivery_outcome: outcome,
            next_action: None,
        };
        let run = self.k.refresh_state(&ctx, req).await?;
        let spend = SpendSlot { todo, slots: 1, tokens: None, usd: None, dry_run: false };
        let s = self.k.spend_slot(&ctx, spend).await?;
        self.say(
            id.as_str(),
            host.clone(),
            format!("writes back {} ({outcome}); spends {}", run.body.run.id, s.body.spend.id),
        );
        if let Some(h) = &r.handoff {
            let req = OfferHandoff {
                to_host: h.to_host.clone(),
                to_agent: None,
                todos: vec![todo],
                note: Some(h.note.clone()),
                ttl_secs: DEFAULT_HANDOFF_TTL_SECS,
            };
            let off = self.k.handoff(&plain, req).await?;
            self.say(
                id.as_str(),
                host,
                format!("hands {todo} off to {} ({}): \"{}\"", h.to_host, off.body.handoff.id, h.note),
            );
        }
        Ok(d)
    }
}

/// `run t3 (claim first) — …`, `wait — …`, `stop (terminal) — …`.
fn decision_words(d: &ShouldRunAnswer) -> String {
    match &d.continuation {
        Continuation::Run { todo, claim_required } => {
            format!("run {todo}{} — {}", if *claim_required { " (claim first)" } else { "" }, d.reason)
        }
        Continuation::Stop { cause } => format!("stop ({}) — {}", cause.as_str(), d.reason),
        _ => format!("{} — {}", d.decision.as_str(), d.reason),
    }
}

/// Runs the demo in `stage.root`. The project is removed afterwards unless `stage.keep`.
pub async fn run(stage: Stage) -> Result<DemoReport> {
    let Stage { root, keep, now, processes } = stage;
    let outcome = play(&root, now, processes).await;
    let report = match outcome {
        Ok(r) => r,
        Err(e) => {
            if !keep {
                let _ = std::fs::remove_dir_all(&root);
            }
            return Err(e);
        }
    };
    let report = DemoReport { kept: keep, ..report };
    if !keep {
        std::fs::remove_dir_all(&root).map_err(|e| {
            Error::internal(format!("cannot remove the demo project {}: {e}", root.display()))
        })?;
    }
    Ok(report)
}

async fn play(root: &Path, now: Timestamp, processes: Arc<dyn Provider>) -> Result<DemoReport> {
    let start = Instant::now();
    let clock = Arc::new(story_clock(now));
    let (k, _) = FileKernel::init(root, clock.clone(), Arc::new(Silent), StoreOptions::default())?;
    // The demo's CI gate is a command loopx runs itself, through the runner it is handed.
    let k = k.with_gates(GateRuntime { processes: Some(processes), ..GateRuntime::default() });
    let goal = GoalId::new("demo")?;
    let mut demo = Demo { k, clock, start, timeline: Vec::new(), goal: goal.clone(), turns: 0 };
    let objective = "Add a CSV export to the reports page";
    demo.k
        .create_goal(CreateGoal {
            id: goal.clone(),
            objective: objective.into(),
            title: None,
            make_default: true,
        })
        .await?;
    demo.say("maya", None, format!("creates goal demo: \"{objective}\""));
    let agents = [codex(root)?, claude(root)?];
    // Codex starts alone; Claude Code's session starts once work is handed to it.
    let first = &agents[0];
    let req = RegisterAgent { id: first.id().clone(), agent_type: first.agent_type(), require_new: true };
    demo.k.register_agent(&demo.person(), req).await?;
    demo.say(
        "maya",
        None,
        format!("registers {} ({}) and starts its session", first.id(), first.agent_type()),
    );
    let mut active = vec![true, false];
    let mut stopped = [false, false];
    let mut asked_at = HashMap::new();
    let (mut ticks, mut next) = (0, 0);
    while !stopped.iter().zip(&active).all(|(s, a)| *s && *a) {
        if ticks >= MAX_TICKS {
            return Err(Error::internal(format!("the demo did not finish in {MAX_TICKS} ticks")));
        }
        demo.person_answers(&mut asked_at, ticks).await?;
        for (i, a) in agents.iter().enumerate() {
            if !active[i] && demo.k.handoff_packet(Some(&goal), a.agent_type(), Some(a.id())).await?.is_some()
            {
                active[i] = true;
                demo.say("maya", None, format!("opens a {} session for {}", a.agent_type(), a.id()));
            }
        }
        let i = (next..next + agents.len()).map(|n| n % agents.len()).find(|n| active[*n]).unwrap_or(0);
        if ticks > 0 {
            demo.clock.advance_minutes(CADENCE_MINUTES);
        }
        next = i + 1;
        let d = demo.tick(&agents[i]).await?;
        stopped[i] = d.decision == DecisionKind::Stop;
        ticks += 1;
    }
    // Whether the objective is met is the person's call: loopx tells them the work is
    // finished, and they complete the goal.
    let finished = demo.k.status(Some(&goal)).await?;
    if !finished.work_finished {
        return Err(Error::internal("the demo's agents stopped before its work was finished"));
    }
    demo.say(
        "maya",
        None,
        "status says the work is finished and asks her to confirm it; she tries the export: it works".into(),
    );
    demo.k
        .complete_goal(&demo.person(), Some("CSV export shipped and tried on the reports page".into()))
        .await?;
    demo.say("maya", None, "completes goal demo (loopx goal complete)".into());
    demo.tick(&agents[0]).await?;
    let status = demo.k.status(Some(&goal)).await?;
    let elapsed_ms = u64::try_from(demo.start.elapsed().as_millis()).unwrap_or(u64::MAX);
    Ok(DemoReport {
        project: root.display().to_string(),
        kept: false,
        elapsed_ms,
        ticks,
        timeline: demo.timeline,
        status,
    })
}

/// The report as `loopx demo` prints it: the timeline, the goal's end, and where to look next.
pub fn render(r: &DemoReport) -> String {
    use std::fmt::Write;
    let mut out =
        String::from("loopx demo: one goal, a Codex CLI agent and a Claude Code agent, one person\n\n");
    for b in &r.timeline {
        let who = match &b.host {
            Some(h) => format!("{} @{}", b.who, h),
            None => b.who.clone(),
        };
        let _ = writeln!(out, "{:>6} ms  {who:<21} {}", b.at_ms, b.what);
    }
    let s = &r.status;
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "final: goal {} {} · {} of {} todos done · {} evidence · {} turns written back · {}/{} slots spent",
        s.goal_id,
        s.goal_status,
        s.counts.done,
        s.counts.total,
        s.evidence,
        s.runs,
        s.quota.used_slots,
        s.quota.allowed_slots
    );
    let _ = writeln!(out, "{} ticks in {} ms on the embedded store", r.ticks, r.elapsed_ms);
    if r.kept {
        let _ = writeln!(out, "\nthe project is kept at {}; look around:", r.project);
        let _ = writeln!(out, "  loopx --project {} status", r.project);
        let _ = writeln!(out, "  loopx --project {} history --limit 100", r.project);
        let _ = writeln!(out, "  loopx --project {} history --todo t3", r.project);
    } else {
        let _ = writeln!(out, "\n(run `loopx demo --keep` to keep the project and look around)");
    }
    out
}

#[cfg(test)]
mod tests {
    use std::task::{Context, Poll};

    use loopx_core::model::GoalStatus;
    use loopx_core::traits::{Observation, ObservationRequest};

    use super::*;

    /// Runs the export check (`test -f export.ok`) by looking for the file.
    struct Checks;

    #[async_trait]
    impl Provider for Checks {
        fn name(&self) -> &'static str {
            "process"
        }
        async fn observe(&self, request: &ObservationRequest) -> Result<Observation> {
            let ObservationRequest::RunCommand { argv, cwd, .. } = request else {
                return Err(Error::usage("the demo only runs its check"));
            };
            assert_eq!(argv, &["test", "-f", "export.ok"]);
            let passed = cwd.join("export.ok").is_file();
            Ok(Observation::CommandExited {
                argv: argv.clone(),
                exit_code: Some(if passed { 0 } else { 1 }),
                output_digest: "none".into(),
                duration_ms: 1,
            })
        }
    }

    /// The kernel's futures and the check above never wait, so one poll finishes them.
    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        loop {
            if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
        }
    }

    #[test]
    fn the_story_ends_with_the_goal_done_hours_before_now_and_the_project_gone() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("demo");
        std::fs::create_dir(&root).unwrap();
        let now = Timestamp::parse_rfc3339("2026-11-02T13:00:30Z").unwrap();
        let stage = Stage { root: root.clone(), keep: false, now, processes: Arc::new(Checks) };
        let r = block_on(run(stage)).unwrap();
        assert!(!root.exists(), "the project is removed");
        assert_eq!(r.status.goal_status, GoalStatus::Done);
        assert_eq!((r.status.counts.done, r.status.counts.total, r.ticks), (4, 4, 11));
        let said: Vec<&str> = r.timeline.iter().map(|b| b.what.as_str()).collect();
        assert_eq!(said.first(), Some(&"creates goal demo: \"Add a CSV export to the reports page\""));
        assert!(
            said.iter().any(|w| w.starts_with("completion refused: validation `test -f export.ok` failed"))
        );
        assert_eq!(
            said.last(),
            Some(&"should-run → stop (done) — the goal is done: a person confirmed its objective is met")
        );
        // The story's clock starts on the minute four hours before now (09:00) and moves only
        // as the script says: the same times every run, none in the future.
        let last = r.status.last_event_at.unwrap();
        assert_eq!(last.to_string(), "2026-11-02T11:30:00.000Z");
        assert!(last < now);
        let text = render(&r);
        assert!(text.contains("final: goal demo done · 4 of 4 todos done"), "{text}");
        assert!(text.ends_with("(run `loopx demo --keep` to keep the project and look around)\n"), "{text}");
    }
}
