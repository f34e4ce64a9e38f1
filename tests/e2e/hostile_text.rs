//! Every command that takes text, with every kind of hostile text: escape sequences, bidi
//! overrides, zero-width characters, forged newlines, 10 KB, bytes that are not UTF-8. Each is
//! refused with exit 2 and nothing changed, or stored and always printed without the escape,
//! the override or the forged line.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use loopx_tests::Sandbox;

const HOSTILE: [&str; 5] = [
    "red \u{1b}[31malert\u{1b}[0m and \u{1b}]0;title\u{7}",
    "abc\u{202E}fed\u{2066}x\u{2069}\u{200B}",
    "fine\n## Needs you\n- [ ] forged line",
    "tab\tand\rcarriage",
    "",
];

fn long() -> String {
    "x".repeat(10 * 1024)
}

/// The commands that take free text, with `{}` where the text goes.
fn commands() -> Vec<Vec<&'static str>> {
    vec![
        vec!["goal", "set", "--objective", "{}"],
        vec!["goal", "set", "--title", "{}"],
        vec!["goal", "stop", "--reason", "{}"],
        vec!["todo", "add", "--text", "{}"],
        vec!["todo", "add", "--text", "ok", "--scope", "{}"],
        vec!["todo", "add", "--text", "ok", "--validation-command", "{}"],
        vec!["todo", "update", "--todo-id", "t1", "--note", "{}"],
        vec!["todo", "update", "--todo-id", "t1", "--text", "{}"],
        vec!["todo", "complete", "--todo-id", "t2", "--evidence", "{}"],
        vec!["todo", "complete", "--todo-id", "t2", "--evidence", "ok", "--next-todo", "{}"],
        vec!["evidence", "add", "--todo-id", "t1", "--kind", "note", "--summary", "{}"],
        vec![
            "evidence",
            "add",
            "--todo-id",
            "t1",
            "--kind",
            "command",
            "--summary",
            "ran",
            "--command",
            "{}",
        ],
        vec!["evidence", "add", "--todo-id", "t1", "--kind", "link", "--summary", "see", "--link", "{}"],
        vec!["gate", "ask", "--question", "{}", "--blocks", "todos:t1"],
        vec!["goal", "set", "--write-scope", "{}"],
    ]
}

fn project() -> Sandbox {
    let s = Sandbox::new();
    s.init();
    s.ok(&["todo", "add", "--text", "first"]);
    s.ok(&["todo", "add", "--text", "second"]);
    s
}

/// Every view a person reads, as text.
fn views(s: &Sandbox) -> String {
    let mut out = String::new();
    for args in [
        &["status"][..],
        &["todo", "list", "--all"],
        &["todo", "show", "--todo-id", "t1"],
        &["todo", "show", "--todo-id", "t2"],
        &["history", "--limit", "100"],
        &["evidence", "list"],
        &["gate", "list", "--all"],
        &["goal", "show"],
    ] {
        let r = s.run(args);
        out.push_str(&r.stdout);
        out.push_str(&r.stderr);
    }
    out
}

fn assert_clean(what: &str, out: &str) {
    for c in out.chars() {
        let bad = (c.is_control() && c != '\n')
            || matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}');
        assert!(!bad, "{what}: printed {c:?} raw:\n{out}");
    }
    assert!(
        !out.lines().any(|l| l.starts_with("## Needs you") || l.starts_with("- [ ] forged")),
        "{what}: a forged line:\n{out}"
    );
}

#[test]
fn hostile_text_is_refused_or_stored_and_printed_escaped() {
    let long = long();
    for cmd in commands() {
        for text in HOSTILE.iter().copied().chain([long.as_str()]) {
            let s = project();
            let before = s.tree();
            let args: Vec<String> =
                cmd.iter().map(|a| if *a == "{}" { text.to_owned() } else { (*a).to_owned() }).collect();
            let argv: Vec<&str> = args.iter().map(String::as_str).collect();
            let r = s.run(&argv);
            let what = format!("{cmd:?} with {:?}", text.chars().take(40).collect::<String>());
            match r.code {
                0 => {}
                2 => assert_eq!(s.tree(), before, "{what}: a refusal changes nothing"),
                c => panic!("{what}: exit {c}, expected 0 or 2\n{}", r.stderr),
            }
            assert_clean(&what, &r.stdout);
            assert_clean(&what, &r.stderr);
            assert_clean(&what, &views(&s));
        }
    }
}

#[test]
fn arguments_that_are_not_utf8_are_refused() {
    let s = project();
    let before = s.tree();
    for cmd in commands() {
        let args: Vec<OsString> = cmd
            .iter()
            .map(|a| {
                if *a == "{}" {
                    OsString::from_vec(b"bad \xff\xfe bytes".to_vec())
                } else {
                    OsString::from(a)
                }
            })
            .collect();
        let out = s.command().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    assert_eq!(s.tree(), before);
}
