//! The loopx commands only a person runs: they change the goal's governance (what a person
//! decides), the wiring of the tool gate itself, what this machine trusts, or stand in for a
//! host (a forged hook); `serve` hands out the page that answers as the person, `drive` spends
//! compute on the person's behalf. One table: the tool gate denies these in an agent's shell,
//! and the command line refuses them inside an agent's session or driven turn.

/// One person-only command: its words (a `--flag` word is matched among the options), and
/// what it decides, for a refusal to say.
#[derive(Debug, PartialEq, Eq)]
pub struct PersonOnly {
    pub words: &'static [&'static str],
    pub decides: &'static str,
}

const fn entry(words: &'static [&'static str], decides: &'static str) -> PersonOnly {
    PersonOnly { words, decides }
}

pub const PERSON_ONLY: [PersonOnly; 15] = [
    entry(&["goal", "set"], "changing the goal (objective, quota, budgets, scope, notices)"),
    entry(&["goal", "stop"], "stopping the goal"),
    entry(&["goal", "resume"], "resuming the goal"),
    entry(&["goal", "complete"], "completing the goal"),
    entry(&["quota", "void-slot"], "voiding a spend"),
    entry(&["gate", "answer"], "answering a gate"),
    entry(&["host", "install"], "wiring loopx into a host"),
    entry(&["host", "uninstall"], "taking loopx's wiring out of a host"),
    entry(&["hook"], "answering as a host's hook"),
    entry(&["doctor", "--repair"], "repairing the goal's state"),
    entry(&["serve"], "serving the dashboard, whose page answers as the person,"),
    entry(&["drive"], "driving agents, which spends compute on the person's behalf,"),
    entry(&["store", "trust"], "trusting a database"),
    entry(&["command", "approve"], "approving a command"),
    entry(&["person", "init"], "putting a goal in strict mode"),
];

/// The entry a loopx command line is, given its words that are not options (`sub`) and its
/// options (`flags`): `doctor --repair` wherever the flag stands, and an option that is a
/// prefix of `--repair` (as the parser takes it) too.
pub fn person_only(sub: &[&str], flags: &[&str]) -> Option<&'static PersonOnly> {
    PERSON_ONLY.iter().find(|entry| {
        let (words, options): (Vec<&str>, Vec<&str>) = entry.words.iter().partition(|w| !w.starts_with("--"));
        words.iter().enumerate().all(|(k, w)| sub.get(k) == Some(w))
            && options.iter().all(|o| {
                flags
                    .iter()
                    .map(|f| f.split('=').next().unwrap_or(f))
                    .any(|f| f.len() >= 3 && o.starts_with(f))
            })
    })
}

/// [`person_only`] of a loopx command line's arguments (without the program): the global
/// options' values and an agent command after `--` are not its words.
pub fn person_only_args(args: &[String]) -> Option<&'static PersonOnly> {
    let (mut sub, mut flags) = (Vec::new(), Vec::new());
    let mut it = args.iter().map(String::as_str);
    while let Some(w) = it.next() {
        if w == "--" {
            break;
        } else if matches!(w, "--project" | "--goal-id" | "--color") {
            it.next();
        } else if w.starts_with('-') {
            flags.push(w);
        } else {
            sub.push(w);
        }
    }
    person_only(&sub, &flags)
}

/// The one governance check a command meets before anything else: a person-only command (a
/// loopx command line's `args`, without the program) is refused where an agent's tools run,
/// inside a session of `session_host`, whatever else would refuse it later. A hook is the
/// host's own call, never its agent's.
pub fn refuse_in_session(args: &[String], session_host: Option<&str>) -> crate::Result<()> {
    let Some(host) = session_host else { return Ok(()) };
    match person_only_args(args) {
        Some(p) if p.words != ["hook"] => Err(crate::Error::refused(format!(
            "{} is a person's decision, and this command runs inside a {host} session, an agent's tool environment",
            p.decides
        ))
        .with_hint(format!("it runs in a person's own terminal: ask them to run loopx {} there", p.words.join(" ")))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_person_only_command_is_refused_in_a_session_and_only_there() {
        let args = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
        let e = refuse_in_session(&args("command approve --all"), Some("codex")).unwrap_err();
        assert_eq!(e.kind, crate::ErrorKind::Refused);
        assert!(
            e.message.starts_with("approving a command is a person's decision")
                && e.message.contains("codex")
        );
        assert!(e.hint.unwrap().contains("loopx command approve"));
        assert!(refuse_in_session(&args("command approve --all"), None).is_ok());
        assert!(refuse_in_session(&args("todo list"), Some("codex")).is_ok());
        assert!(
            refuse_in_session(&args("hook codex stop"), Some("codex")).is_ok(),
            "a hook is the host's call"
        );
    }

    #[test]
    fn entries_are_found_by_their_words_and_options() {
        let words = |e: Option<&PersonOnly>| e.map(|e| e.words);
        assert_eq!(words(person_only(&["goal", "complete"], &[])), Some(&["goal", "complete"][..]));
        assert_eq!(words(person_only(&["doctor"], &["--json", "--rep"])), Some(&["doctor", "--repair"][..]));
        assert_eq!(person_only(&["doctor"], &["--json"]), None);
        assert_eq!(person_only(&["goal", "show"], &[]), None);
        assert_eq!(words(person_only(&["hook", "claude-code", "stop"], &[])), Some(&["hook"][..]));
        let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            words(person_only_args(&args(&["--goal-id", "goal", "host", "install"]))),
            Some(&["host", "install"][..])
        );
        assert_eq!(person_only_args(&args(&["status", "--", "goal", "stop"])), None);
    }
}
