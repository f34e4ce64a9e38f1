//! Write scopes: the path globs a goal or a todo may write, checked when an agent edits.

use std::path::{Component, Path, PathBuf};

use loopx_core::{Error, Result};

/// A set of path globs relative to the project root. `*` and `?` stay within one directory,
/// `**` crosses directories, `[a-z]` (or `[!a-z]`) is one of (or none of) the characters,
/// `{a,b}` picks one: `src/**` is everything under `src/`, `*.md` the Markdown files at the
/// top, `**/*.rs` every Rust file.
#[derive(Clone, Debug)]
pub struct WriteScope {
    globs: Vec<String>,
    /// Each glob with its braces expanded, split at `/`.
    patterns: Vec<Vec<String>>,
}

fn invalid(g: &str, why: &str) -> Error {
    Error::usage(format!("invalid scope glob {g:?}: {why}"))
        .with_hint("a scope is a path glob such as src/** or docs/*.md")
}

/// Most alternatives one glob's braces may expand to.
const MAX_EXPANSIONS: usize = 256;

/// `a{b,c}d{e,f}` → `abde`, `abdf`, `acde`, `acdf`; braces may nest.
fn expand(g: &str, out: &mut Vec<String>, whole: &str) -> Result<()> {
    let Some(open) = g.find('{') else {
        if g.contains('}') {
            return Err(invalid(whole, "a '}' without its '{'"));
        }
        out.push(g.to_owned());
        return Ok(());
    };
    let (mut depth, mut close, mut commas) = (0usize, None, vec![]);
    for (i, c) in g[open..].char_indices().map(|(i, c)| (i + open, c)) {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    close = Some(i);
                    break;
                }
            }
            ',' if depth == 1 => commas.push(i),
            _ => {}
        }
    }
    let close = close.ok_or_else(|| invalid(whole, "a '{' without its '}'"))?;
    let (head, tail) = (&g[..open], &g[close + 1..]);
    let mut start = open + 1;
    for end in commas.into_iter().chain([close]) {
        expand(&format!("{head}{}{tail}", &g[start..end]), out, whole)?;
        if out.len() > MAX_EXPANSIONS {
            return Err(invalid(whole, "its braces expand to too many globs"));
        }
        start = end + 1;
    }
    Ok(())
}

/// Checks one path component's pattern: every `[` closes.
fn check_component(p: &str, whole: &str) -> Result<()> {
    let mut chars = p.chars();
    while let Some(c) = chars.next() {
        if c == '[' {
            let mut first = true;
            loop {
                match chars.next() {
                    None => return Err(invalid(whole, "a '[' without its ']'")),
                    Some(']') if !first => break,
                    Some('!' | '^') if first => {}
                    Some(_) => first = false,
                }
            }
        }
    }
    Ok(())
}

/// Whether one path component matches one pattern component (`*`, `?`, `[…]`, literals).
fn component_matches(p: &[char], s: &[char]) -> bool {
    match p.split_first() {
        None => s.is_empty(),
        Some(('*', rest)) => (0..=s.len()).any(|i| component_matches(rest, &s[i..])),
        Some(('?', rest)) => !s.is_empty() && component_matches(rest, &s[1..]),
        Some(('[', rest)) => {
            let Some((&c, s_rest)) = s.split_first() else { return false };
            let negated = matches!(rest.first(), Some('!' | '^'));
            let body = if negated { &rest[1..] } else { rest };
            // The class ends at the first `]` after its first character.
            let Some(end) = body.iter().skip(1).position(|&x| x == ']').map(|i| i + 1) else {
                return false;
            };
            let class = &body[..end];
            let mut hit = false;
            let mut i = 0;
            while i < class.len() {
                if i + 2 < class.len() && class[i + 1] == '-' {
                    hit |= class[i] <= c && c <= class[i + 2];
                    i += 3;
                } else {
                    hit |= class[i] == c;
                    i += 1;
                }
            }
            hit != negated && component_matches(&body[end + 1..], s_rest)
        }
        Some((&c, rest)) => s.first() == Some(&c) && component_matches(rest, &s[1..]),
    }
}

/// Whether the path components `s` match the pattern components `p`; a `**` component matches
/// any number of path components, none included, but for a trailing one, which matches what is
/// inside (`src/**` is not `src` itself).
fn path_matches(p: &[String], s: &[&str]) -> bool {
    match p.split_first() {
        None => s.is_empty(),
        Some((first, rest)) if first == "**" => {
            (usize::from(rest.is_empty())..=s.len()).any(|i| path_matches(rest, &s[i..]))
        }
        Some((first, rest)) => s.split_first().is_some_and(|(c, s_rest)| {
            let (pc, sc): (Vec<char>, Vec<char>) = (first.chars().collect(), c.chars().collect());
            component_matches(&pc, &sc) && path_matches(rest, s_rest)
        }),
    }
}

impl WriteScope {
    /// Compiles `globs`; an invalid glob is a usage error naming it.
    pub fn new(globs: &[String]) -> Result<Self> {
        let mut patterns = Vec::new();
        for g in globs {
            let mut expanded = Vec::new();
            expand(g.trim_start_matches("./"), &mut expanded, g)?;
            for e in expanded {
                let components: Vec<String> = e
                    .split('/')
                    .filter(|c| !c.is_empty())
                    // `a**b` is two stars in one component: as `*` within it.
                    .map(|c| if c != "**" && c.contains("**") { c.replace("**", "*") } else { c.to_owned() })
                    .collect();
                for c in &components {
                    check_component(c, g)?;
                }
                patterns.push(components);
            }
        }
        Ok(Self { globs: globs.to_vec(), patterns })
    }

    pub fn is_empty(&self) -> bool {
        self.globs.is_empty()
    }

    pub fn globs(&self) -> &[String] {
        &self.globs
    }

    /// Whether `path` (absolute, or relative to `cwd`) is inside the scope under `root`. A path
    /// outside the project is never inside a non-empty scope; an empty scope allows everything.
    pub fn allows(&self, root: &Path, cwd: &Path, path: &str) -> bool {
        if self.is_empty() {
            return true;
        }
        let full = normalize(&cwd.join(path));
        let Ok(rel) = full.strip_prefix(normalize(root)) else { return false };
        let components: Option<Vec<&str>> = rel.components().map(|c| c.as_os_str().to_str()).collect();
        match components {
            Some(c) if !c.is_empty() => self.patterns.iter().any(|p| path_matches(p, &c)),
            _ => false,
        }
    }
}

/// `a/./b/../c` → `a/c`, lexically (the file may not exist yet).
pub fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(g: &[&str]) -> WriteScope {
        WriteScope::new(&g.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn globs_are_real_globs() {
        let root = Path::new("/p");
        let s = scope(&["src/**", "*.md"]);
        assert_eq!(s.globs(), ["src/**", "*.md"], "kept as written, for the messages that name them");
        assert!(s.allows(root, root, "/p/src/a/b.rs"));
        assert!(s.allows(root, Path::new("/p/src"), "lib.rs"), "relative to the session's cwd");
        assert!(s.allows(root, root, "README.md"));
        assert!(!s.allows(root, root, "docs/guide.md"), "* stays in one directory");
        assert!(!s.allows(root, root, "Cargo.toml"));
        assert!(!s.allows(root, root, "/p/src/../Cargo.toml"), ".. is resolved");
        assert!(!s.allows(root, root, "/etc/passwd"), "outside the project");
        assert!(!s.allows(root, root, "/p"));
        let rs = scope(&["*.rs"]);
        assert!(!rs.allows(root, root, "README.md"), "*.rs no longer allows every path");
        assert!(scope(&[]).allows(root, root, "/anything"));
        assert!(WriteScope::new(&["src/[".to_owned()]).is_err());
    }

    /// Each row: a glob, a path under the project, whether the glob takes it.
    #[test]
    fn every_glob_form_matches_as_documented() {
        let root = Path::new("/p");
        for (glob, path, want) in [
            ("**", "a/b/c.rs", true),
            ("**", "top.rs", true),
            ("**/*.rs", "top.rs", true),
            ("**/*.rs", "a/b/c.rs", true),
            ("**/*.rs", "a/b/c.md", false),
            ("src/**", "src", false),
            ("src/**", "src/x", true),
            ("src/**/test.rs", "src/test.rs", true),
            ("src/**/test.rs", "src/a/b/test.rs", true),
            ("src/**/test.rs", "src/a/b/test.rss", false),
            ("src/*/mod.rs", "src/a/mod.rs", true),
            ("src/*/mod.rs", "src/a/b/mod.rs", false),
            ("src/a**b", "src/aXb", true),
            ("src/a**b", "src/a/b", false),
            ("file?.txt", "file1.txt", true),
            ("file?.txt", "file12.txt", false),
            ("file?.txt", "file/.txt", false),
            ("[a-c]*.md", "b.md", true),
            ("[a-c]*.md", "d.md", false),
            ("[!a-c]*.md", "d.md", true),
            ("[!a-c]*.md", "a.md", false),
            ("[]x].md", "].md", true),
            ("{src,docs}/**", "docs/a.md", true),
            ("{src,docs}/**", "tests/a.md", false),
            ("src/{a,b{c,d}}.rs", "src/bd.rs", true),
            ("src/{a,b{c,d}}.rs", "src/b.rs", false),
            ("./src/*.rs", "src/lib.rs", true),
            ("src//*.rs", "src/lib.rs", true),
            ("*", ".hidden", true),
            ("docs/*.md", "docs/a.md", true),
            ("docs/*.md", "docs", false),
            ("file[ab].rs", "fileb.rs", true),
            ("file[ab].rs", "filec.rs", false),
            ("v[a-]", "v-", true),
            ("v[a-]", "va", true),
            ("v[a-]", "vb", false),
        ] {
            assert_eq!(scope(&[glob]).allows(root, root, path), want, "{glob} on {path}");
        }
        for bad in ["src/[", "src/{a,b", "src/a}", "[!", "{a,b", "src/[]", "src/[!]"] {
            assert!(WriteScope::new(&[bad.to_owned()]).is_err(), "{bad} is refused");
        }
        let many = "{a,b,c,d}{a,b,c,d}{a,b,c,d}{a,b,c,d}{a,b}";
        assert!(WriteScope::new(&[many.to_owned()]).is_err(), "a glob of 512 alternatives is refused");
        let most = "{a,b,c,d}{a,b,c,d}{a,b,c,d}{a,b,c,d}";
        let s = WriteScope::new(&[most.to_owned()]).expect("256 alternatives are the most a glob may have");
        assert!(s.allows(root, root, "dcba") && !s.allows(root, root, "dcbae"));
    }
}
