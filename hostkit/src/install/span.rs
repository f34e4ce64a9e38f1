//! A host's JSON file edited by its bytes: an entry is cut out of the text with the separator
//! beside it, or written into it, and every other byte stays as the user wrote it (line
//! endings, escapes, spacing, arrays on one line). Serialising the parsed file again would
//! reformat all of it.
//!
//! It reads JSON with comments as well (`//` and `/* */`, and a trailing comma before `}` or
//! `]`: what Gemini CLI reads in its `settings.json`), so a file with comments keeps them; a
//! file loopx edits only this way ([`Format::Jsonc`](loopx_core::host::Format)) is never
//! serialised again.

use serde_json::Value;

/// Where a value is in the text.
#[derive(Clone, Debug, PartialEq)]
enum Node {
    /// `{…}`: its first byte, the members (key, the member's first byte, its value's first
    /// byte, the member's last byte + 1, its value), and its last byte + 1.
    Object {
        start: usize,
        members: Vec<(String, usize, usize, usize, Node)>,
        end: usize,
    },
    /// `[…]`: its first byte, the elements (first byte, last byte + 1, the value), and its last
    /// byte + 1.
    Array {
        start: usize,
        elements: Vec<(usize, usize, Node)>,
        end: usize,
    },
    Scalar,
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    /// Whitespace and comments; `None` for a comment that never ends.
    fn ws(&mut self) -> Option<()> {
        loop {
            match (self.b.get(self.i), self.b.get(self.i + 1)) {
                (Some(b' ' | b'\t' | b'\n' | b'\r'), _) => self.i += 1,
                (Some(b'/'), Some(b'/')) => {
                    while self.b.get(self.i).is_some_and(|c| *c != b'\n') {
                        self.i += 1;
                    }
                }
                (Some(b'/'), Some(b'*')) => {
                    let end = self.b[self.i + 2..].windows(2).position(|w| w == b"*/")?;
                    self.i += 2 + end + 2;
                }
                _ => return Some(()),
            }
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.b.get(self.i) == Some(&c)).then(|| self.i += 1)
    }

    /// A string, decoded (its escapes read as JSON reads them).
    fn string(&mut self) -> Option<String> {
        let start = self.i;
        self.eat(b'"')?;
        loop {
            match *self.b.get(self.i)? {
                b'"' => {
                    self.i += 1;
                    break;
                }
                b'\\' => self.i += 2,
                _ => self.i += 1,
            }
        }
        serde_json::from_slice(self.b.get(start..self.i)?).ok()
    }

    fn value(&mut self) -> Option<Node> {
        self.ws()?;
        let start = self.i;
        match *self.b.get(self.i)? {
            b'{' => {
                self.i += 1;
                let mut members = Vec::new();
                loop {
                    self.ws()?;
                    if self.eat(b'}').is_some() {
                        return Some(Node::Object { start, members, end: self.i });
                    }
                    let mstart = self.i;
                    let key = self.string()?;
                    self.ws()?;
                    self.eat(b':')?;
                    self.ws()?;
                    let vstart = self.i;
                    let v = self.value()?;
                    members.push((key, mstart, vstart, self.i, v));
                    self.ws()?;
                    if self.eat(b',').is_some() {
                        continue;
                    }
                    self.eat(b'}')?;
                    return Some(Node::Object { start, members, end: self.i });
                }
            }
            b'[' => {
                self.i += 1;
                let mut elements = Vec::new();
                loop {
                    self.ws()?;
                    if self.eat(b']').is_some() {
                        return Some(Node::Array { start, elements, end: self.i });
                    }
                    let estart = self.i;
                    let v = self.value()?;
                    elements.push((estart, self.i, v));
                    self.ws()?;
                    if self.eat(b',').is_some() {
                        continue;
                    }
                    self.eat(b']')?;
                    return Some(Node::Array { start, elements, end: self.i });
                }
            }
            b'"' => self.string().map(|_| Node::Scalar),
            _ => {
                while self
                    .b
                    .get(self.i)
                    .is_some_and(|c| !matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r' | b'/'))
                {
                    self.i += 1;
                }
                // A number, true, false or null, as JSON reads it.
                serde_json::from_slice::<Value>(&self.b[start..self.i]).ok().map(|_| Node::Scalar)
            }
        }
    }
}

fn parse(text: &str) -> Option<Node> {
    let mut p = Parser { b: text.as_bytes(), i: 0 };
    let v = p.value()?;
    p.ws()?;
    (p.i == text.len()).then_some(v)
}

/// `text` (JSON with comments) as plain JSON: comments become spaces, a trailing comma goes.
fn plain(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    // After the first byte of a comment or whitespace run: where the next token starts.
    let next_token = |mut j: usize| {
        let mut p = Parser { b, i: j };
        if p.ws().is_some() {
            j = p.i;
        }
        b.get(j).copied()
    };
    while i < b.len() {
        match b[i] {
            b'"' => {
                let mut p = Parser { b, i };
                let _ = p.string();
                let end = p.i.max(i + 1).min(b.len());
                out.extend_from_slice(&b[i..end]);
                i = end;
            }
            b'/' if matches!(b.get(i + 1), Some(b'/' | b'*')) => {
                let mut p = Parser { b, i };
                let end = if p.ws().is_some() { p.i } else { b.len() };
                out.push(b' ');
                i = end.max(i + 1);
            }
            b',' if matches!(next_token(i + 1), Some(b'}' | b']')) => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_default()
}

/// The value of a piece of JSON with comments.
fn value_of(text: &str) -> Option<Value> {
    serde_json::from_str(&plain(text)).ok()
}

/// Whether `text` is a JSON object, comments and trailing commas allowed; why not otherwise.
pub fn check(text: &str) -> Result<(), String> {
    match parse(text) {
        Some(Node::Object { .. }) => Ok(()),
        Some(_) => Err("its top level is not an object".to_owned()),
        None => Err(match serde_json::from_str::<Value>(&plain(text)) {
            Err(e) => e.to_string(),
            Ok(_) => "it does not parse".to_owned(),
        }),
    }
}

/// The value at `at`, if there is one.
pub fn get(text: &str, at: &[String]) -> Option<Value> {
    let root = parse(text)?;
    let (s, e) = span_of(&root, at)?;
    value_of(&text[s..e])
}

/// The first and last + 1 byte of the value at `at` (the root: the whole value).
fn span_of(root: &Node, at: &[String]) -> Option<(usize, usize)> {
    let (last, parents) = match at.split_last() {
        Some(x) => x,
        None => {
            return match root {
                Node::Object { start, end, .. } | Node::Array { start, end, .. } => Some((*start, *end)),
                Node::Scalar => None,
            };
        }
    };
    let Node::Object { members, .. } = find(root, parents)? else { return None };
    members.iter().rev().find(|(k, ..)| k == last).map(|(_, _, vs, e, _)| (*vs, *e))
}

/// The node at `at`.
fn find<'a>(mut node: &'a Node, at: &[String]) -> Option<&'a Node> {
    for k in at {
        let Node::Object { members, .. } = node else { return None };
        node = &members.iter().rev().find(|(key, ..)| key == k)?.4;
    }
    Some(node)
}

/// Whether `text[from..to]` holds a comment.
fn has_comment(text: &str, from: usize, to: usize) -> bool {
    let mut p = Parser { b: text.as_bytes(), i: from };
    while p.i < to {
        match (p.b.get(p.i), p.b.get(p.i + 1)) {
            (Some(b'/'), Some(b'/' | b'*')) => return true,
            _ => p.i += 1,
        }
    }
    false
}

/// The first byte after `from` that is not whitespace (a comment's first byte counts).
fn skip_blank(text: &str, mut from: usize) -> usize {
    let b = text.as_bytes();
    while b.get(from).is_some_and(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r')) {
        from += 1;
    }
    from
}

/// The first byte of the whitespace right before `at`.
fn blank_before(text: &str, mut at: usize) -> usize {
    let b = text.as_bytes();
    while at > 0 && matches!(b[at - 1], b' ' | b'\t' | b'\n' | b'\r') {
        at -= 1;
    }
    at
}

/// The position of the comma after `from` (outside comments), if the next token is one.
fn comma_after(text: &str, from: usize) -> Option<usize> {
    let mut p = Parser { b: text.as_bytes(), i: from };
    p.ws()?;
    (p.b.get(p.i) == Some(&b',')).then_some(p.i)
}

/// Cuts item `idx` of `spans` (each a first byte and last byte + 1) out of `text`, with the
/// comma and space that separate it from the next item (or, for the last, from the one
/// before). A comment beside it is the user's, and stays.
fn cut(text: &str, spans: &[(usize, usize)], idx: usize) -> String {
    let (start, end) = spans[idx];
    let ranges: Vec<(usize, usize)> = match (spans.get(idx + 1), idx.checked_sub(1).map(|p| spans[p])) {
        (Some(next), _) if !has_comment(text, end, next.0) => vec![(start, next.0)],
        (Some(_), _) => {
            // Up to the comma after it and the blank after that: a comment after stays.
            let comma = comma_after(text, end).unwrap_or(end);
            vec![(start, skip_blank(text, comma + 1))]
        }
        (None, Some(prev)) if !has_comment(text, prev.1, start) => vec![(prev.1, end)],
        (None, Some(prev)) => {
            // The comma after the one before, and this item with the blank before it.
            let comma = comma_after(text, prev.1).unwrap_or(prev.1);
            vec![(comma, comma + 1), (blank_before(text, start).max(comma + 1), end)]
        }
        // The only item: a trailing comma after it goes too.
        (None, None) => match comma_after(text, end) {
            Some(c) => vec![(start, c + 1)],
            None => vec![(start, end)],
        },
    };
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (from, to) in ranges {
        out.push_str(&text[at..from]);
        at = to;
    }
    out.push_str(&text[at..]);
    out
}

/// `text` without the member at `at`, when its value is `expect` (any value when `None`);
/// `None` when there is no such member (or the text does not parse).
pub fn remove_member(text: &str, at: &[String], expect: Option<&Value>) -> Option<String> {
    let (last, parents) = at.split_last()?;
    let root = parse(text)?;
    let Node::Object { members, .. } = find(&root, parents)? else { return None };
    let idx = members.iter().rposition(|(k, ..)| k == last)?;
    let (_, _, vstart, end, _) = &members[idx];
    if let Some(v) = expect
        && value_of(&text[*vstart..*end])? != *v
    {
        return None;
    }
    let spans: Vec<(usize, usize)> = members.iter().map(|(_, s, _, e, _)| (*s, *e)).collect();
    Some(cut(text, &spans, idx))
}

/// `text` without the first element equal to `value` of the array at `at`; `None` when there
/// is none.
pub fn remove_element(text: &str, at: &[String], value: &Value) -> Option<String> {
    let root = parse(text)?;
    let Node::Array { elements, .. } = find(&root, at)? else { return None };
    let idx = elements.iter().position(|(s, e, _)| value_of(&text[*s..*e]).as_ref() == Some(value))?;
    let spans: Vec<(usize, usize)> = elements.iter().map(|(s, e, _)| (*s, *e)).collect();
    Some(cut(text, &spans, idx))
}

/// Whether the value at `at` is an empty object or array.
pub fn is_empty_container(text: &str, at: &[String]) -> bool {
    parse(text).and_then(|r| find(&r, at).cloned()).is_some_and(|n| match n {
        Node::Object { members, .. } => members.is_empty(),
        Node::Array { elements, .. } => elements.is_empty(),
        Node::Scalar => false,
    })
}

/// Whether the root object has no member.
pub fn is_empty_object(text: &str) -> bool {
    matches!(parse(text), Some(Node::Object { members, .. }) if members.is_empty())
}

/// Why an edit cannot be made: the path to the value that is in the way, and what it is not.
#[derive(Debug, PartialEq, Eq)]
pub struct InTheWay {
    pub at: Vec<String>,
    pub not: &'static str,
}

/// The indentation of the line `pos` is on.
fn line_indent(text: &str, pos: usize) -> &str {
    let line = text[..pos].rfind('\n').map_or(0, |i| i + 1);
    let rest = &text[line..];
    &rest[..rest.len() - rest.trim_start_matches([' ', '\t']).len()]
}

/// `v` as pretty JSON indented by `unit`, its lines after the first starting with `base`.
fn render(v: &Value, unit: &str, base: &str) -> String {
    let mut out = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(unit.as_bytes());
    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
    let _ = serde::Serialize::serialize(v, &mut ser);
    String::from_utf8(out).unwrap_or_default().replace('\n', &format!("\n{base}"))
}

/// `text` with `item` (already rendered) added as the last item of the container starting at
/// `start` whose items are `spans`: on a line of its own, indented as its siblings are
/// (or one `unit` in from the container), or on the same line when the items share the
/// container's.
fn insert_item(text: &str, start: usize, spans: &[(usize, usize)], item: &str, unit: &str) -> String {
    let base = line_indent(text, start).to_owned();
    let (at, piece) = match spans.last() {
        None => (start + 1, format!("\n{base}{unit}{item}\n{base}")),
        Some(&(_, last_end)) => {
            let first = spans[0].0;
            if text[start..first].contains('\n') {
                (last_end, format!(",\n{}{item}", line_indent(text, first)))
            } else {
                (last_end, format!(", {item}"))
            }
        }
    };
    let mut out = String::with_capacity(text.len() + piece.len());
    out.push_str(&text[..at]);
    out.push_str(&piece);
    out.push_str(&text[at..]);
    out
}

/// The indentation a new member or element at the container starting at `start` takes.
fn child_indent(text: &str, start: usize, spans: &[(usize, usize)], unit: &str) -> String {
    match spans.first() {
        Some(&(first, _)) if text[start..first].contains('\n') => line_indent(text, first).to_owned(),
        Some(_) => line_indent(text, start).to_owned(),
        None => format!("{}{unit}", line_indent(text, start)),
    }
}

/// `text` with the member at `at` set to `v`: its value's bytes replaced when it is there (and
/// different), else added, with the objects on the way.
pub fn set_member(text: &str, at: &[String], v: &Value, unit: &str) -> Result<String, InTheWay> {
    let root = parse(text).ok_or(InTheWay { at: vec![], not: "an object" })?;
    if let Some((vs, e)) = span_of(&root, at) {
        if value_of(&text[vs..e]).as_ref() == Some(v) {
            return Ok(text.to_owned());
        }
        let mut out = String::with_capacity(text.len());
        out.push_str(&text[..vs]);
        out.push_str(&render(v, unit, line_indent(text, vs)));
        out.push_str(&text[e..]);
        return Ok(out);
    }
    // The deepest object on the way that is there; the rest is made.
    let mut node = &root;
    let mut depth = 0;
    while depth + 1 < at.len() {
        let Node::Object { members, .. } = node else { break };
        match members.iter().rev().find(|(k, ..)| *k == at[depth]) {
            Some(m) => {
                node = &m.4;
                depth += 1;
            }
            None => break,
        }
    }
    let Node::Object { start, members, .. } = node else {
        return Err(InTheWay { at: at[..depth].to_vec(), not: "an object" });
    };
    let value = at[depth + 1..].iter().rev().fold(v.clone(), |acc, k| {
        let mut m = serde_json::Map::new();
        m.insert(k.clone(), acc);
        Value::Object(m)
    });
    let spans: Vec<(usize, usize)> = members.iter().map(|(_, s, _, e, _)| (*s, *e)).collect();
    let indent = child_indent(text, *start, &spans, unit);
    let key = serde_json::to_string(&at[depth]).unwrap_or_default();
    let item = format!("{key}: {}", render(&value, unit, &indent));
    Ok(insert_item(text, *start, &spans, &item, unit))
}

/// `text` with `v` appended to the array at `at` (made when it is not there).
pub fn push_element(text: &str, at: &[String], v: &Value, unit: &str) -> Result<String, InTheWay> {
    let root = parse(text).ok_or(InTheWay { at: vec![], not: "an object" })?;
    match find(&root, at) {
        None => set_member(text, at, &Value::Array(vec![v.clone()]), unit),
        Some(Node::Array { start, elements, .. }) => {
            let spans: Vec<(usize, usize)> = elements.iter().map(|(s, e, _)| (*s, *e)).collect();
            let indent = child_indent(text, *start, &spans, unit);
            let one_line = spans.first().is_some_and(|&(first, _)| !text[*start..first].contains('\n'));
            let item = if one_line {
                serde_json::to_string(v).unwrap_or_default()
            } else {
                render(v, unit, &indent)
            };
            Ok(insert_item(text, *start, &spans, &item, unit))
        }
        Some(_) => Err(InTheWay { at: at.to_vec(), not: "an array" }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn at(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_member_goes_with_its_comma_and_nothing_else_changes() {
        let text = "{\r\n  \"a\": \"caf\\u00e9\",\r\n  \"loopx\": {\"command\": \"/bin/loopx\"},\r\n  \"z\": [1,2,3]\r\n}\r\n";
        assert_eq!(
            remove_member("{\"a:b\": 1, \"c\": 2}", &at(&["a:b"]), Some(&json!(1))).unwrap(),
            "{\"c\": 2}"
        );
        let out = remove_member(text, &at(&["loopx"]), Some(&json!({"command": "/bin/loopx"}))).unwrap();
        assert_eq!(out, "{\r\n  \"a\": \"caf\\u00e9\",\r\n  \"z\": [1,2,3]\r\n}\r\n");
        // Not the value expected: nothing is taken.
        assert_eq!(remove_member(text, &at(&["loopx"]), Some(&json!({"command": "mine"}))), None);
        // The last member takes the comma before it.
        let out = remove_member(text, &at(&["z"]), None).unwrap();
        assert_eq!(
            out,
            "{\r\n  \"a\": \"caf\\u00e9\",\r\n  \"loopx\": {\"command\": \"/bin/loopx\"}\r\n}\r\n"
        );
        // The only member leaves an empty object.
        assert_eq!(remove_member("{ \"x\": 1 }", &at(&["x"]), None).unwrap(), "{  }");
        assert!(is_empty_object("{  }"));
    }

    #[test]
    fn an_element_goes_from_a_nested_array() {
        let text = "{\"hooks\": {\"Stop\": [{\"cmd\": \"mine\"}, {\"cmd\": \"loopx hook\"}]}}";
        let out = remove_element(text, &at(&["hooks", "Stop"]), &json!({"cmd": "loopx hook"})).unwrap();
        assert_eq!(out, "{\"hooks\": {\"Stop\": [{\"cmd\": \"mine\"}]}}");
        let out = remove_element(&out, &at(&["hooks", "Stop"]), &json!({"cmd": "mine"})).unwrap();
        assert_eq!(out, "{\"hooks\": {\"Stop\": []}}");
        assert!(is_empty_container(&out, &at(&["hooks", "Stop"])));
        assert_eq!(remove_element(&out, &at(&["hooks", "Stop"]), &json!(1)), None);
    }

    #[test]
    fn comments_and_trailing_commas_are_read_and_kept() {
        let text = "// top\n{\n  \"a\": 1, // about a\n  /* b */ \"b\": [\"x\",],\n}\n";
        assert_eq!(check(text), Ok(()));
        assert_eq!(get(text, &at(&["b"])), Some(json!(["x"])));
        // Added by its bytes, after the last member; taken out again to the byte.
        let added = set_member(text, &at(&["c", "d"]), &json!({"e": true}), "  ").unwrap();
        assert_eq!(
            added,
            "// top\n{\n  \"a\": 1, // about a\n  /* b */ \"b\": [\"x\",],\n  \"c\": {\n    \"d\": {\n      \"e\": true\n    }\n  },\n}\n"
        );
        assert_eq!(remove_member(&added, &at(&["c"]), None).unwrap(), text);
        let pushed = push_element(text, &at(&["b"]), &json!("y"), "  ").unwrap();
        assert_eq!(pushed, text.replace("[\"x\",]", "[\"x\", \"y\",]"));
        assert_eq!(remove_element(&pushed, &at(&["b"]), &json!("y")).unwrap(), text);
        // A member between comments: the comments stay.
        let out = remove_member(text, &at(&["a"]), None).unwrap();
        assert_eq!(out, "// top\n{\n  // about a\n  /* b */ \"b\": [\"x\",],\n}\n");
        let out = remove_member(text, &at(&["b"]), None).unwrap();
        assert_eq!(out, "// top\n{\n  \"a\": 1 // about a\n  /* b */,\n}\n");
        assert_eq!(check(&out), Ok(()));
        assert_eq!(push_element(text, &at(&["a"]), &json!(1), "  ").unwrap_err().not, "an array");
        for bad in ["{a: 1}", "{'a': 1}", "{\"a\": 1} /*", "{\"a\": 1,,}", "[1]", "{\"a\": NaN}"] {
            assert!(check(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn text_that_does_not_parse_is_left_alone() {
        for bad in ["", "{", "{\"a\":}", "[1,", "{\"a\": 1} x"] {
            assert_eq!(remove_member(bad, &at(&["a"]), None), None, "{bad:?}");
        }
    }
}
