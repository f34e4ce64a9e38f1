//! What a person reads: the text of `status`, `todo list`, `todo show`, `history`, `goal set`
//! and `quota status` in a story that exercises every line they can print, and every error
//! with its hint. Each hint's command parses as the CLI would parse it, so it works pasted.

use clap::Parser;

use loopx_cli::args::Cli;
use loopx_tests::{Run, Sandbox};

/// Times change from run to run.
fn timeless(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("20") {
        let cand = &rest[i..];
        let len = cand.find(|c: char| !(c.is_ascii_digit() || "-T:.Z".contains(c))).unwrap_or(cand.len());
        let word = &cand[..len];
        if word.len() >= 20 && word.as_bytes().get(10) == Some(&b'T') && word.ends_with('Z') {
            out.push_str(&rest[..i]);
            out.push_str("[time]");
        } else {
            out.push_str(&rest[..i + 2.min(len.max(1))]);
            rest = &rest[i + 2.min(len.max(1))..];
            continue;
        }
        rest = &cand[len..];
    }
    out.push_str(rest);
    out
}

fn story() -> Sandbox {
    let s = Sandbox::new();
    s.init();
    s.ok(&["agent", "register", "--agent-id", "claude-1", "--agent-type", "claude-code"]);
    s.ok(&["agent", "register", "--agent-id", "codex-1", "--agent-type", "codex-cli"]);
    s.ok(&[
        "todo",
        "add",
        "--agent-id",
        "claude-1",
        "--text",
        "write the CSV reader\nand its tests",
        "--priority",
        "P1",
    ]);
    s.ok(&["todo", "add", "--agent-id", "user", "--text", "decide the date format", "--role", "user"]);
    s.ok(&["todo", "claim", "--todo-id", "t1", "--agent-id", "claude-1"]);
    s.ok(&[
        "todo",
        "complete",
        "--todo-id",
        "t1",
        "--agent-id",
        "claude-1",
        "--evidence",
        "reader tests pass",
        "--next-todo",
        "handle quoted fields",
    ]);
    s.ok(&[
        "gate",
        "ask",
        "--question",
        "May the importer skip bad rows?\nThey are 2% of the file.",
        "--blocks",
        "goal",
    ]);
    s.ok(&[
        "todo",
        "add",
        "--agent-id",
        "user",
        "--text",
        "ship it",
        "--after-gate",
        "g1",
        "--validation-command",
        "test -f importer.toml",
        "--scope",
        "src/**",
    ]);
    s.ok(&[
        "lease",
        "acquire",
        "--todo-id",
        "t4",
        "--agent-id",
        "codex-1",
        "--ttl",
        "45m",
        "--write-scope",
        "src/importer/**",
    ]);
    s
}

#[test]
fn text_output_reads_as_it_should() {
    let s = story();
    let show = |args: &[&str]| timeless(&s.ok(args).stdout);
    insta::assert_snapshot!("text_status", show(&["status"]));
    insta::assert_snapshot!("text_todo_list", show(&["todo", "list", "--all"]));
    insta::assert_snapshot!("text_todo_show", show(&["todo", "show", "--todo-id", "t4"]));
    insta::assert_snapshot!("text_todo_show_done", show(&["todo", "show", "--todo-id", "t1"]));
    insta::assert_snapshot!("text_history", show(&["history"]));
    insta::assert_snapshot!(
        "text_goal_set",
        show(&["goal", "set", "--compute", "0.5", "--handoff-mode", "hard_lease", "--write-scope", "src/**"])
    );
    insta::assert_snapshot!("text_goal_set_unchanged", show(&["goal", "set", "--compute", "0.5"]));
    insta::assert_snapshot!("text_quota_status", show(&["quota", "status"]));
    let st = s.json(&["status"]);
    assert_eq!(st["needs_user"][0]["gate"], "g1", "an open goal-wide gate needs the person: {st}");
    assert_eq!(st["needs_user"][1]["todo"], "t2");
}

/// Commands that fail, one of each kind a person meets; each must say what to do.
const ERRORS: &[&[&str]] = &[
    &["todo", "claim", "--todo-id", "t3"],
    &["todo", "claim", "--todo-id", "t3", "--agent-id", "nobody"],
    &["todo", "claim", "--todo-id", "t9", "--agent-id", "codex-1"],
    &["todo", "claim", "--todo-id", "x9", "--agent-id", "codex-1"],
    &["todo", "claim", "--todo-id", "t4", "--agent-id", "claude-1"],
    &["todo", "complete", "--todo-id", "t2", "--agent-id", "claude-1"],
    &["todo", "complete", "--todo-id", "t3", "--agent-id", "claude-1"],
    &["todo", "complete", "--todo-id", "t1", "--agent-id", "claude-1", "--next-todo", "x", "--no-follow-up"],
    &["todo", "claim", "--todo-id", "t1"],
    &["todo", "add", "--agent-id", "user", "--text", "bell \u{7} ringing"],
    &["todo", "add", "--agent-id", "user", "--text", " "],
    &["todo", "add", "--agent-id", "user", "--text", "x", "--priority", "P9"],
    &["todo", "update", "--todo-id", "t3", "--agent-id", "claude-1", "--status", "done"],
    &["todo", "update", "--todo-id", "t3", "--agent-id", "claude-1"],
    &["gate", "answer", "g9", "--approve"],
    &["gate", "answer", "g1", "--approve", "--agent-id", "codex-1"],
    &["gate", "ask", "--question", "why?", "--blocks", "everything"],
    &["goal", "set", "--compute", "2"],
    &["goal", "set", "--budget-usd", "-3"],
    &["goal", "set"],
    &["goal", "set", "--compute", "0.5", "--agent-id", "claude-1"],
    &["lease", "acquire", "--todo-id", "t3", "--agent-id", "claude-1", "--ttl", "9d"],
    &["lease", "acquire", "--todo-id", "t4", "--agent-id", "claude-1", "--ttl", "5m"],
    &["lease", "renew", "--todo-id", "t4", "--agent-id", "claude-1", "--ttl", "5m"],
    &["quota", "spend-slot", "--todo-id", "t3", "--agent-id", "claude-1"],
    &["quota", "spend-slot", "--todo-id", "t3", "--agent-id", "claude-1", "--usd", "-1"],
    &["quota", "should-run"],
    &["agent", "register", "--agent-id", "codex-2", "--agent-type", "codex"],
    &["agent", "register", "--agent-id", "Bad Id", "--agent-type", "claude-code"],
    &["agent", "bind-thread", "--agent-id", "codex-1", "--host", "codex-app", "--thread", "<id>"],
    &["agent", "unbind-thread", "--agent-id", "claude-1", "--host", "codex-app", "--thread", "0199-a"],
    &["handoff", "--agent-id", "codex-1", "--to-host", "claude-code", "--todo-id", "t3"],
    &["handoff", "--agent-id", "codex-1", "--to-host", "claude-code", "--ttl", "9d"],
    &["handoff", "cancel", "--handoff-id", "h4"],
    &["resume", "--host", "cursor"],
    &["goal", "create", "--goal-id", "main", "--objective", "again"],
    &["--goal-id", "nope", "status"],
    &["evidence", "add", "--todo-id", "t3", "--agent-id", "claude-1", "--kind", "vibes", "--summary", "x"],
    &["history", "--todo", "t0"],
];

/// The command in a hint or next line (`… run: loopx todo claim …`), without a trailing
/// parenthetical remark.
fn hinted_commands(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter_map(|l| l.find("loopx ").map(|i| &l[i..]))
        .map(|c| c.split(" (").next().unwrap_or(c).trim_end_matches(['.', ';']).to_owned())
        .collect()
}

#[test]
fn every_error_says_what_to_do_and_its_commands_parse() {
    let s = story();
    // A second registered agent under another session makes the bind-thread conflict real.
    s.ok(&["agent", "bind-thread", "--agent-id", "codex-1", "--host", "codex-app", "--thread", "0199-a"]);
    let mut transcript = String::new();
    let mut parsed = 0;
    for args in ERRORS {
        let before = s.tree();
        let r: Run = s.run(args);
        assert_ne!(r.code, 0, "loopx {args:?} should fail");
        assert_eq!(s.tree(), before, "loopx {args:?} changed nothing");
        assert!(
            r.stderr.contains("\nhint: ")
                || r.stderr.starts_with("hint: ")
                || r.code == 2 && r.stderr.contains("Usage:"),
            "loopx {args:?} says what to do:\n{}",
            r.stderr
        );
        transcript.push_str(&format!(
            "$ loopx {}\nexit {}\n{}\n",
            shell_words::join(*args),
            r.code,
            timeless(&r.stderr)
        ));
        for c in hinted_commands(&r.stderr) {
            let words = shell_words::split(&c).unwrap_or_else(|e| panic!("{c:?} does not split: {e}"));
            if let Err(e) = Cli::try_parse_from(&words) {
                panic!("the hint of loopx {args:?} names {c:?}, which loopx does not parse:\n{e}");
            }
            parsed += 1;
        }
    }
    insta::assert_snapshot!("text_errors", transcript);
    assert!(parsed >= 12, "{parsed} hinted commands parsed");
}

#[test]
fn colour_follows_no_color_and_clicolor_force() {
    let s = Sandbox::new();
    s.init();
    let painted = |env: &[(&str, &str)]| {
        s.run_with(&["todo", "add", "--text", "x"], b"", env).stdout.contains('\u{1b}')
    };
    assert!(!painted(&[]), "NO_COLOR=1 (the sandbox's): no colour");
    assert!(!painted(&[("NO_COLOR", "1"), ("CLICOLOR_FORCE", "1")]), "NO_COLOR wins");
    assert!(
        painted(&[("NO_COLOR", ""), ("CLICOLOR_FORCE", "1")]),
        "an empty NO_COLOR is unset; CLICOLOR_FORCE paints off a terminal"
    );
    assert!(!painted(&[("NO_COLOR", ""), ("CLICOLOR_FORCE", "0")]));
    let list = s.run_with(&["todo", "list", "--color", "always"], b"", &[]).stdout;
    assert!(list.contains("\u{1b}["), "--color always: {list:?}");
    let plain = s.run_with(&["todo", "list", "--color", "never"], b"", &[("CLICOLOR_FORCE", "1")]).stdout;
    let stripped: String = {
        let mut out = String::new();
        let mut esc = false;
        for c in list.chars() {
            match (esc, c) {
                (false, '\u{1b}') => esc = true,
                (true, 'm') => esc = false,
                (true, _) => {}
                (false, c) => out.push(c),
            }
        }
        out
    };
    assert_eq!(stripped, plain, "colour adds codes, never columns");
}

#[test]
fn completions_load_in_bash_and_generate_for_every_shell() {
    let s = Sandbox::new();
    let bin = loopx_tests::loopx_bin().display().to_string();
    let out = std::process::Command::new("bash")
        .args(["-c", &format!("source <('{bin}' completions bash) && complete -p loopx")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("-F _loopx loopx"));
    for shell in ["zsh", "fish", "powershell", "elvish"] {
        let script = s.ok(&["completions", shell]).stdout;
        assert!(script.contains("handoff") && script.contains("should-run"), "{shell}");
    }
    s.fails(2, &["completions", "tcsh"]);
}
