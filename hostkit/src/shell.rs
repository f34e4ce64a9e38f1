//! The tool gate's reading of a shell command line, host-neutral: whether it runs a person's
//! loopx command (however the shell reaches loopx), writes loopx's state, only reads, or is
//! destructive. Pure; the hook driver asks, adapters never decide.

use std::path::Path;

use loopx_kernel::project::STATE_DIR;
use loopx_kernel::scope::normalize;

/// Whether a shell command is destructive: removes trees, rewrites or publishes history,
/// discards work, or escalates. Conservative: a match is a reason to ask a person, not proof
/// of harm.
pub fn is_destructive(command: &str) -> bool {
    let c = command.split_whitespace().collect::<Vec<_>>().join(" ");
    const PATTERNS: [&str; 15] = [
        "rm -rf",
        "rm -fr",
        "rm -r ",
        "git push",
        "git reset --hard",
        "git clean -f",
        "git checkout -- ",
        "git branch -D",
        "git rebase",
        "git filter-branch",
        "dd if=",
        "mkfs",
        "chmod -R",
        "sudo ",
        "> /dev/",
    ];
    PATTERNS.iter().any(|p| c.contains(p))
        || c.split([';', '&', '|']).any(|part| {
            let p = part.trim();
            p.starts_with("rm ")
                && p.split_whitespace()
                    .any(|w| w.starts_with('-') && !w.starts_with("--") && w.contains(['r', 'R']))
        })
}

/// What a shell command line would do, as far as the tool gate cares.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShellCheck {
    /// A loopx command that governs the goal (a person's decision), as it was found.
    pub governs: Option<String>,
    /// A path under `.loopx/` that the command may write, remove or move.
    pub writes_state: Option<String>,
    /// Every part only reads, or is loopx's own non-governance command (which the kernel
    /// governs): the gate lets it through even while loopx says not to run.
    pub read_only: bool,
}

/// loopx's subcommands: a word after `loopx` that is none of them, in a script an interpreter
/// runs, may be anything.
const SUBCOMMANDS: [&str; 30] = [
    "init",
    "connect",
    "goal",
    "agent",
    "todo",
    "evidence",
    "lease",
    "status",
    "projects",
    "gate",
    "quota",
    "refresh-state",
    "history",
    "doctor",
    "mcp",
    "serve",
    "hook",
    "host",
    "store",
    "join",
    "heartbeat-prompt",
    "handoff",
    "resume",
    "drive",
    "demo",
    "import",
    "completions",
    "command",
    "person",
    "help",
];

/// Programs that only read what they are given (with no output redirection).
const READERS: [&str; 33] = [
    "ls", "cat", "head", "tail", "less", "more", "grep", "egrep", "fgrep", "rg", "wc", "pwd", "echo",
    "printf", "which", "stat", "file", "tree", "du", "df", "date", "printenv", "true", "false", "sort",
    "uniq", "cut", "diff", "cmp", "basename", "dirname", "realpath", "test",
];

/// Programs that run a script given on their command line (`python3` and `python3.11` alike).
const INTERPRETERS: [&str; 10] =
    ["python", "perl", "ruby", "node", "deno", "bun", "php", "lua", "awk", "osascript"];

/// `git` subcommands that only read.
const GIT_READS: [&str; 10] =
    ["status", "log", "diff", "show", "rev-parse", "ls-files", "blame", "grep", "describe", "shortlog"];

/// Wrappers that run the rest of their words as a command.
const WRAPPERS: [&str; 13] = [
    "env", "sudo", "doas", "nohup", "time", "command", "exec", "nice", "setsid", "stdbuf", "ionice",
    "unbuffer", "runuser",
];

/// Wrappers whose first word after their options is theirs (a CPU mask, a priority), not the
/// command's.
const WRAPPERS_WITH_ARG: [&str; 3] = ["timeout", "taskset", "chrt"];

/// Shells that run a script given with `-c`.
const SHELLS: [&str; 9] = ["sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "tcsh"];

#[derive(Debug, PartialEq)]
enum Tok {
    Word(String),
    /// `;`, `&&`, `||`, `|`, `&`, newline, `(`, `)`.
    Sep,
    /// An output redirection (`>`, `>>`, `2>`, `&>`, `>|`); its target is the next word.
    RedirOut,
    /// An input redirection or here-document; its operand is the next word.
    RedirIn,
}

/// Splits a command line into words and operators, honouring quotes. Command substitutions
/// (`$(…)`, backquotes) are returned separately, to be checked as command lines of their own.
fn lex(s: &str, subs: &mut Vec<String>) -> Vec<Tok> {
    let chars: Vec<char> = s.chars().collect();
    let mut toks = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut i = 0;
    let flush = |toks: &mut Vec<Tok>, word: &mut String, in_word: &mut bool| {
        if *in_word {
            toks.push(Tok::Word(std::mem::take(word)));
            *in_word = false;
        }
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\'' => {
                in_word = true;
                i += 1;
                while i < chars.len() && chars[i] != '\'' {
                    word.push(chars[i]);
                    i += 1;
                }
            }
            '"' => {
                in_word = true;
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' && i + 1 < chars.len() {
                        i += 1;
                    } else if chars[i] == '$' && chars.get(i + 1) == Some(&'(') {
                        let (inner, end) = balanced(&chars, i + 2);
                        subs.push(inner);
                        i = end;
                        continue;
                    } else if chars[i] == '`' {
                        let end =
                            chars[i + 1..].iter().position(|c| *c == '`').map_or(chars.len(), |p| i + 1 + p);
                        subs.push(chars[i + 1..end.min(chars.len())].iter().collect());
                        i = end + 1;
                        continue;
                    }
                    word.push(chars[i]);
                    i += 1;
                }
            }
            '\\' if i + 1 < chars.len() => {
                in_word = true;
                word.push(chars[i + 1]);
                i += 1;
            }
            '$' if chars.get(i + 1) == Some(&'(') => {
                let (inner, end) = balanced(&chars, i + 2);
                subs.push(inner);
                in_word = true;
                word.push_str("$(…)");
                i = end;
                continue;
            }
            '`' => {
                let end = chars[i + 1..].iter().position(|c| *c == '`').map_or(chars.len(), |p| i + 1 + p);
                subs.push(chars[i + 1..end.min(chars.len())].iter().collect());
                in_word = true;
                word.push_str("$(…)");
                i = end + 1;
                continue;
            }
            ' ' | '\t' => flush(&mut toks, &mut word, &mut in_word),
            ';' | '\n' | '(' | ')' | '{' | '}' if !in_word || matches!(c, ';' | '\n') => {
                flush(&mut toks, &mut word, &mut in_word);
                toks.push(Tok::Sep);
            }
            '|' | '&' => {
                // `&>` is a redirection; `&&`, `||`, `|&`, `|`, `&` separate commands.
                if c == '&' && chars.get(i + 1) == Some(&'>') {
                    flush(&mut toks, &mut word, &mut in_word);
                    toks.push(Tok::RedirOut);
                    i += 2;
                    if chars.get(i) == Some(&'>') {
                        i += 1;
                    }
                    continue;
                }
                flush(&mut toks, &mut word, &mut in_word);
                toks.push(Tok::Sep);
                if matches!(chars.get(i + 1), Some('|' | '&')) {
                    i += 1;
                }
            }
            '>' => {
                // `2>` and `1>` are redirections of a descriptor: the digit is not a word.
                if in_word && (word == "1" || word == "2") {
                    word.clear();
                    in_word = false;
                }
                flush(&mut toks, &mut word, &mut in_word);
                let mut j = i + 1;
                while matches!(chars.get(j), Some('>' | '|')) {
                    j += 1;
                }
                if chars.get(j) == Some(&'&') {
                    // `>&2`: a descriptor, not a file.
                    j += 1;
                    while chars.get(j).is_some_and(char::is_ascii_digit) {
                        j += 1;
                    }
                    i = j;
                    continue;
                }
                toks.push(Tok::RedirOut);
                i = j;
                continue;
            }
            '<' => {
                flush(&mut toks, &mut word, &mut in_word);
                while chars.get(i + 1) == Some(&'<') {
                    i += 1;
                }
                toks.push(Tok::RedirIn);
            }
            _ => {
                in_word = true;
                word.push(c);
            }
        }
        i += 1;
    }
    flush(&mut toks, &mut word, &mut in_word);
    toks
}

/// The text up to the `)` that closes a `$(` opened before `start`, and the index after it.
fn balanced(chars: &[char], start: usize) -> (String, usize) {
    let mut depth = 1;
    let mut i = start;
    while i < chars.len() {
        match chars[i] {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return (chars[start..i].iter().collect(), i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    (chars[start..].iter().collect(), chars.len())
}

fn basename(w: &str) -> &str {
    w.rsplit('/').next().unwrap_or(w)
}

/// Whether `path` (absolute, or relative to `cwd`) lies under the project's `.loopx/`, or
/// names a `.loopx` directory anywhere.
fn in_state(root: &Path, cwd: &Path, path: &str) -> bool {
    let p = Path::new(path.trim_start_matches('~'));
    if p.components().any(|c| c.as_os_str() == STATE_DIR) {
        return true;
    }
    normalize(&cwd.join(path)).starts_with(normalize(&root.join(STATE_DIR)))
}

/// Checks a shell command line as an agent's shell tool would run it in `cwd`. Where loopx
/// cannot tell what a line runs and it mentions loopx, it counts as governance: the gate denies
/// when in doubt.
pub fn check_shell(command: &str, root: &Path, cwd: &Path) -> ShellCheck {
    let line = Line { root, cwd, mentions_loopx: mentions_loopx(command) };
    let mut out = check_shell_depth(command, &line, 0);
    if out.governs.is_none() && mentions_loopx(command) && sheds_identity(command) {
        out.governs = Some("loopx, with the session's identity taken out of its environment".to_owned());
    }
    out
}

/// Whether `loopx` stands in the line as a word of its own (a path's last part included).
fn mentions_loopx(s: &str) -> bool {
    s.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.'))
        .any(|w| w == "loopx" || w == "loopx.exe")
}

/// Whether the line takes variables out of an environment: `unset`, `export -n`, `env -u`/`-i`,
/// an empty assignment (`X= cmd`, `export X=`), which loopx reads as unset.
fn sheds_identity(command: &str) -> bool {
    let mut subs = Vec::new();
    let toks = lex(command, &mut subs);
    let lines = std::iter::once(toks).chain(subs.iter().map(|s| lex(s, &mut Vec::new())));
    lines.into_iter().any(|toks| {
        toks.split(|t| *t == Tok::Sep).any(|part| {
            let words: Vec<&str> = part
                .iter()
                .filter_map(|t| if let Tok::Word(w) = t { Some(w.as_str()) } else { None })
                .collect();
            words.iter().enumerate().any(|(i, w)| {
                let name = basename(w);
                let empty_assignment = is_assignment(w) && w.ends_with('=');
                let program_position =
                    words[..i].iter().all(|p| is_assignment(p) || WRAPPERS.contains(&basename(p)));
                empty_assignment
                    || (program_position && name == "unset")
                    || (program_position
                        && matches!(name, "export" | "declare" | "typeset")
                        && words.get(i + 1).is_some_and(|o| o.starts_with("-n") || o.starts_with('+')))
                    || (name == "env"
                        && words[i + 1..].iter().take_while(|o| o.starts_with('-')).any(|o| {
                            *o == "-"
                                || o.starts_with("-u")
                                || o.starts_with("-i")
                                || o.starts_with("--unset")
                                || *o == "--ignore-environment"
                        }))
            })
        })
    })
}

/// What every part of a line is checked against: the project, the shell's directory, and
/// whether the whole line mentions loopx (a part loopx cannot read is then taken for it).
struct Line<'a> {
    root: &'a Path,
    cwd: &'a Path,
    mentions_loopx: bool,
}

fn check_shell_depth(command: &str, line: &Line<'_>, depth: usize) -> ShellCheck {
    let (root, cwd) = (line.root, line.cwd);
    let mut out = ShellCheck { read_only: true, ..ShellCheck::default() };
    if depth > 8 {
        out.read_only = false;
        if mentions_loopx(command) {
            out.governs = Some("loopx, nested deeper than loopx reads".to_owned());
        }
        return out;
    }
    let mut subs = Vec::new();
    let toks = lex(command, &mut subs);
    let merge = |out: &mut ShellCheck, inner: ShellCheck| {
        out.governs = out.governs.take().or(inner.governs);
        out.writes_state = out.writes_state.take().or(inner.writes_state);
        out.read_only &= inner.read_only;
    };
    for sub in &subs {
        let inner = check_shell_depth(sub, line, depth + 1);
        merge(&mut out, inner);
    }
    for part in toks.split(|t| *t == Tok::Sep) {
        let mut words = Vec::new();
        let mut targets = Vec::new();
        let mut it = part.iter();
        while let Some(t) = it.next() {
            match t {
                Tok::Word(w) => words.push(w.clone()),
                Tok::RedirOut => {
                    if let Some(Tok::Word(target)) = it.next() {
                        targets.push(target.clone());
                    }
                }
                Tok::RedirIn => {
                    it.next();
                }
                Tok::Sep => {}
            }
        }
        for t in &targets {
            if in_state(root, cwd, t) {
                out.writes_state.get_or_insert_with(|| t.clone());
            }
            if !matches!(t.as_str(), "/dev/null" | "/dev/stdout" | "/dev/stderr") {
                out.read_only = false;
            }
        }
        let inner = check_simple(&words, line, depth);
        merge(&mut out, inner);
    }
    out
}

/// One simple command: its words, after redirections were taken out.
fn check_simple(words: &[String], line: &Line<'_>, depth: usize) -> ShellCheck {
    let (root, cwd) = (line.root, line.cwd);
    let mut out = ShellCheck { read_only: true, ..ShellCheck::default() };
    // Variable assignments and wrappers (with their options) come before the program.
    let mut i = 0;
    while let Some(w) = words.get(i) {
        let name = basename(w);
        if is_assignment(w) {
            // A value that names a loopx command (`X='loopx gate answer g1'; $X`) is read as one.
            let value = w.split_once('=').map_or("", |(_, v)| v);
            out.governs = out.governs.take().or_else(|| governance_in_script(value));
            i += 1;
        } else if WRAPPERS.contains(&name) || WRAPPERS_WITH_ARG.contains(&name) || name == "xargs" {
            i += 1;
            while let Some(o) = words.get(i).filter(|o| o.starts_with('-')) {
                let takes_value = matches!(o.as_str(), "-u" | "-n" | "-C" | "-s" | "-k" | "-g" | "-S");
                i += if takes_value { 2 } else { 1 };
            }
            if WRAPPERS_WITH_ARG.contains(&name) {
                i += 1; // the duration, the mask, the priority
            }
        } else if name == "flock" {
            // `flock [options] FILE COMMAND…` or `flock [options] FILE -c SCRIPT`.
            i += 1;
            while words.get(i).is_some_and(|o| o.starts_with('-')) {
                i += 1;
            }
            i += 1;
            if words.get(i).is_some_and(|w| w == "-c") {
                return words.get(i + 1).map_or(out, |script| check_shell_depth(script, line, depth + 1));
            }
        } else if matches!(name, "busybox" | "toybox") {
            i += 1; // the applet is the program
        } else {
            break;
        }
    }
    let Some(program) = words.get(i) else { return out };
    let args = &words[i + 1..];
    let name = basename(program);
    if SHELLS.contains(&name) {
        if let Some(p) = args.iter().position(|a| a.starts_with('-') && a.contains('c'))
            && let Some(script) = args.get(p + 1)
        {
            return check_shell_depth(script, line, depth + 1);
        }
        out.read_only = false;
        return out;
    }
    if name == "eval" {
        return check_shell_depth(&args.join(" "), line, depth + 1);
    }
    if name == "loopx" || name == "loopx.exe" {
        return check_loopx(args);
    }
    // The command `find` runs for each file (`-exec … ;`), and a git alias's shell script
    // (`git -c alias.x='!…' x`), are commands of the line too.
    if name == "find"
        && let Some(p) =
            args.iter().position(|a| matches!(a.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir"))
    {
        let end = args[p + 1..].iter().position(|a| a == ";" || a == "+").map_or(args.len(), |e| p + 1 + e);
        let mut inner = check_simple(&args[p + 1..end], line, depth + 1);
        inner.read_only = false;
        return inner;
    }
    if name == "git"
        && let Some(script) = args
            .windows(2)
            .filter(|w| w[0] == "-c")
            .find_map(|w| w[1].split_once('=').filter(|(k, _)| k.starts_with("alias.")).map(|(_, v)| v))
            .and_then(|v| v.strip_prefix('!'))
    {
        let mut inner = check_shell_depth(script, line, depth + 1);
        inner.read_only = false;
        return inner;
    }
    if unreadable(program) {
        // A program loopx cannot see: in a line that mentions loopx, it may be loopx.
        out.read_only = false;
        out.governs = governance_in(args).or_else(|| {
            line.mentions_loopx.then(|| format!("loopx, run as {program} (a program loopx cannot read)"))
        });
        return out;
    }
    let reads = READERS.contains(&name)
        || (name == "git"
            && args.iter().find(|a| !a.starts_with('-')).is_some_and(|s| GIT_READS.contains(&s.as_str())))
        || (name == "find"
            && !args.iter().any(|a| {
                matches!(
                    a.as_str(),
                    "-delete" | "-exec" | "-execdir" | "-ok" | "-fprint" | "-fprintf" | "-fls"
                )
            }))
        || (name == "sed" && !args.iter().any(|a| a.starts_with("-i") || a == "--in-place"));
    out.read_only = reads;
    if INTERPRETERS.iter().any(|i| name.starts_with(i)) {
        // A script an interpreter runs (`python3 -c "os.system('loopx …')"`, `node -e`): the
        // loopx command it names, read as words.
        out.governs = args.iter().find_map(|a| governance_in_script(a));
    } else if !reads && line.mentions_loopx {
        // In a line that mentions loopx, any program may be loopx under another name
        // (`cp $(which loopx) lx; ./lx gate answer g1`), or a launcher loopx does not know
        // that runs loopx's words (`chpst loopx gate answer g1`).
        out.governs = governance_in(args).or_else(|| {
            args.iter()
                .enumerate()
                .filter(|(_, a)| mentions_loopx(a))
                .find_map(|(k, _)| governance_in(&args[k + 1..]))
                .map(|g| format!("{g} (run through {program}, a launcher loopx does not read)"))
        });
    }
    if !reads
        && let Some(p) =
            args.iter().find(|a| in_state(root, cwd, a.split_once('=').map_or(a.as_str(), |(_, v)| v)))
    {
        out.writes_state = Some(p.clone());
    }
    out
}

/// `NAME=value`, as a shell reads it before a command.
fn is_assignment(w: &str) -> bool {
    w.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// A word whose value the shell decides only when it runs: a variable, a substitution, a glob,
/// a brace expansion.
fn unreadable(w: &str) -> bool {
    w.contains(['$', '`', '*', '?', '[', '{'])
}

/// The governance subcommand in loopx's words, if any (options skipped; `doctor --repair`
/// wherever the flag stands). A subcommand loopx cannot read counts as one.
fn governance_in(words: &[String]) -> Option<String> {
    let (sub, flags) = loopx_words(words);
    if let Some(w) = sub.iter().take(2).find(|w| unreadable(w)) {
        return Some(format!("loopx {w} (a subcommand loopx cannot read)"));
    }
    if sub.first().is_some_and(|s| *s == "doctor") && flags.iter().any(|f| unreadable(f)) {
        return Some("loopx doctor --repair (an option loopx cannot read)".to_owned());
    }
    loopx_core::person_only::person_only(&sub, &flags).map(|g| format!("loopx {}", g.words.join(" ")))
}

/// loopx's words: the ones that are not options (the values of its global options skipped),
/// and the options.
fn loopx_words(words: &[String]) -> (Vec<&str>, Vec<&str>) {
    let (mut sub, mut flags) = (Vec::new(), Vec::new());
    let mut it = words.iter().map(String::as_str);
    while let Some(w) = it.next() {
        if matches!(w, "--project" | "--goal-id" | "--color") {
            it.next();
        } else if w.starts_with('-') {
            flags.push(w);
        } else {
            sub.push(w);
        }
    }
    (sub, flags)
}

/// The loopx governance a script names (`os.system('loopx gate answer g1')`): the words after
/// `loopx`, split at quotes, brackets and separators. A word there that is no subcommand of
/// loopx's (`'loopx ' + cmd`) may be anything.
fn governance_in_script(script: &str) -> Option<String> {
    let words: Vec<String> = script
        .split(|c: char| c.is_whitespace() || "'\"()[],;+`".contains(c))
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect();
    words.iter().enumerate().filter(|(_, w)| matches!(basename(w), "loopx" | "loopx.exe")).find_map(
        |(i, _)| {
            let rest = &words[i + 1..];
            let (sub, _) = loopx_words(rest);
            match sub.first() {
                None => None,
                Some(s) if !SUBCOMMANDS.contains(s) => {
                    Some(format!("loopx {s} (in a script loopx cannot read)"))
                }
                Some(_) => governance_in(rest),
            }
        },
    )
}

/// loopx itself: governance is a person's; everything else is governed by the kernel (as
/// loopx's MCP tools are), so the gate lets it through like a read.
fn check_loopx(args: &[String]) -> ShellCheck {
    let governs = governance_in(args);
    ShellCheck { read_only: governs.is_none(), governs, writes_state: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell(c: &str) -> ShellCheck {
        check_shell(c, Path::new("/p"), Path::new("/p/src"))
    }

    #[test]
    fn governance_is_found_however_loopx_is_reached() {
        for c in [
            "loopx goal set --compute 1",
            "/home/u/.cargo/bin/loopx goal resume",
            "./target/release/loopx --project . --goal-id main goal stop",
            "env LOOPX_PROJECT=/p loopx gate answer g1 --approve",
            "env -u CLAUDE_CODE_SESSION_ID loopx quota void-slot --spend-id s1",
            "FOO=1 nohup loopx goal set --budget-tokens 99999999",
            "sh -c \"loopx goal set --compute 1\"",
            "bash -lc 'cd /p && loopx gate answer g1 --approve'",
            "echo hi; loopx doctor --repair",
            "true && $(echo loopx) goal set --objective x",
            "echo $(loopx gate answer g1 --approve)",
            "eval loopx goal resume",
            "loopx hook claude-code stop < /tmp/forged.json",
            "loopx host uninstall claude-code",
            "sudo -u me timeout 5 loopx goal stop",
            // However it is spelled: a subcommand or program loopx cannot read, quoting,
            // options before the subcommand, an interpreter's script, a renamed binary.
            "unset CLAUDECODE; X=answer; loopx gate $X g1 --approve",
            "loopx gate $(printf answer) g1 --approve",
            "loopx $CMD",
            "loopx ga*e answer g1",
            "loopx 'gate' \"answer\" g1",
            "loopx g\\ate an''swer g1",
            "loopx --no-such-flag gate answer g1",
            "loopx doctor $FLAGS",
            "L=loopx; $L gate answer g1",
            "L=loopx; $L $S",
            "X='loopx gate answer g1 --approve'; sh -c \"$X\"",
            "eval \"$CMD\" # loopx",
            "python3 -c \"import os; os.system('loopx gate answer g1 --approve')\"",
            "node -e \"require('child_process').execSync('loopx ' + cmd)\"",
            "cp $(which loopx) /tmp/lx; /tmp/lx gate answer g1",
            // serve hands out a page that answers as the person; trust is the person's.
            "env -u CLAUDECODE -u CLAUDE_CODE_SESSION_ID loopx serve",
            "loopx serve --port 0",
            "loopx store trust",
            "loopx command approve c1",
            "loopx person init",
            "loopx goal complete",
            "loopx drive -- claude -p go",
            // Launchers: known ones are read, unknown ones carrying loopx's words are denied.
            "setsid loopx gate answer g1 --approve",
            "setsid -f loopx goal stop",
            "stdbuf -oL loopx goal set --compute 1",
            "flock /tmp/l loopx gate answer g1",
            "flock -n /tmp/l -c 'loopx goal resume'",
            "find . -maxdepth 0 -exec loopx gate answer g1 --approve ;",
            "git -c 'alias.x=!loopx gate answer g1' x",
            "fish -c 'loopx goal stop'",
            "busybox sh -c 'loopx goal stop'",
            "taskset 0x1 loopx goal stop",
            "chpst -u me loopx gate answer g1",
            "my-runner --then loopx quota void-slot --spend-id s1",
            // Its session's identity taken away: a person's command however harmless.
            "unset CLAUDECODE; loopx status",
            "CLAUDECODE= loopx status",
            "export -n CODEX_THREAD_ID; loopx status",
            "env -i PATH=/usr/bin loopx status",
            "env --unset=LOOPX_AGENT_ID loopx todo list",
        ] {
            assert!(shell(c).governs.is_some(), "{c}");
        }
        for c in [
            "loopx status",
            "loopx todo complete --todo-id t1 --evidence ok",
            "loopx doctor",
            "echo loopx goal set",
            "loopx evidence add --todo-id t1 --summary \"cost $5\"",
            "export FOO=bar; loopx status",
            "hugo serve",
            "npm run serve",
            "git clone https://example.invalid/loopx",
            "cargo test -p loopx-kernel",
            "cd loopx && cargo build",
            "python3 -c 'print(1)'",
            "unset FOO",
            "setsid loopx status",
            "find . -name '*.rs' -exec grep -l loopx {} ;",
            "git -c alias.st=status st",
            "my-runner --then loopx todo list",
        ] {
            let v = shell(c);
            assert!(v.governs.is_none(), "{c}");
        }
    }

    #[test]
    fn writes_under_the_state_directory_are_found() {
        for c in [
            "echo x > ../.loopx/goals/main/snapshot.json",
            "echo x >> /p/.loopx/project.json",
            "rm -rf /p/.loopx",
            "mv ../.loopx/goals/main/events.jsonl /tmp",
            "sed -i s/0/1/ ../.loopx/goals/main/snapshot.json",
            "cp /tmp/forged.json /p/.loopx/goals/main/snapshot.json",
            "python3 -c 'x' > /p/.loopx/x",
            "cat a | tee ../.loopx/goals/main/GOAL.md",
            "dd if=/tmp/x of=/p/.loopx/goals/main/events.jsonl",
        ] {
            assert!(shell(c).writes_state.is_some(), "{c}");
        }
        for c in ["cat ../.loopx/goals/main/GOAL.md", "ls /p/.loopx", "grep -r todo ../.loopx", "echo .loopx"]
        {
            assert_eq!(shell(c).writes_state, None, "{c}");
        }
    }

    #[test]
    fn read_only_commands_are_told_apart() {
        for c in [
            "ls -la",
            "cat src/a.rs | grep fn | wc -l",
            "git status",
            "git diff HEAD~1",
            "loopx status",
            "find . -name '*.rs'",
            "echo hi > /dev/null",
            "head -n 3 a 2>&1",
        ] {
            assert!(shell(c).read_only, "{c}");
        }
        for c in [
            "cargo build",
            "echo x > a.txt",
            "git commit -m x",
            "find . -delete",
            "sed -i s/a/b/ x",
            "rm a",
            "ls; touch b",
            "python3 x.py",
            "$CMD",
        ] {
            assert!(!shell(c).read_only, "{c}");
        }
    }

    #[test]
    fn destructive_commands() {
        for c in [
            "rm  -rf build",
            "git push --force origin main",
            "cd x && rm -r y",
            "rm -Rf /",
            "sudo make install",
        ] {
            assert!(is_destructive(c), "{c}");
        }
        for c in
            ["cargo test", "grep -r foo .", "rm a.txt", "git status"].into_iter().chain(["rm --force a.txt"])
        {
            assert!(!is_destructive(c), "{c}");
        }
    }
}
