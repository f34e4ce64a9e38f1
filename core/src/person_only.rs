//! The loopx commands only a person runs: they change the goal's governance (what a person
//! decides), the wiring of the tool gate itself, what this machine trusts, or stand in for a
//! host (a forged hook); `serve` hands out the page that answers as the person, `drive` spends
//! compute on the person's behalf. One table: the tool gate denies these in an agent's shell,
//! and the command line refuses them inside an agent's session or driven turn.

/// Each entry: the subcommand's words (a `--flag` word is matched among the options).
pub const PERSON_ONLY: [&[&str]; 15] = [
    &["goal", "set"],
    &["goal", "stop"],
    &["goal", "resume"],
    &["goal", "complete"],
    &["quota", "void-slot"],
    &["gate", "answer"],
    &["host", "install"],
    &["host", "uninstall"],
    &["hook"],
    &["doctor", "--repair"],
    &["serve"],
    &["drive"],
    &["store", "trust"],
    &["command", "approve"],
    &["person", "init"],
];

/// The entry a loopx command line is, given its words that are not options (`sub`) and its
/// options (`flags`): `doctor --repair` wherever the flag stands, and an option that is a
/// prefix of `--repair` (as the parser takes it) too.
pub fn person_only(sub: &[&str], flags: &[&str]) -> Option<&'static [&'static str]> {
    PERSON_ONLY.iter().copied().find(|entry| {
        let (words, options): (Vec<&str>, Vec<&str>) = entry.iter().partition(|w| !w.starts_with("--"));
        words.iter().enumerate().all(|(k, w)| sub.get(k) == Some(w))
            && options.iter().all(|o| {
                flags
                    .iter()
                    .map(|f| f.split('=').next().unwrap_or(f))
                    .any(|f| f.len() >= 3 && o.starts_with(f))
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_found_by_their_words_and_options() {
        assert_eq!(person_only(&["goal", "complete"], &[]), Some(&["goal", "complete"][..]));
        assert_eq!(person_only(&["doctor"], &["--json", "--rep"]), Some(&["doctor", "--repair"][..]));
        assert_eq!(person_only(&["doctor"], &["--json"]), None);
        assert_eq!(person_only(&["goal", "show"], &[]), None);
        assert_eq!(person_only(&["hook", "claude-code", "stop"], &[]), Some(&["hook"][..]));
    }
}
