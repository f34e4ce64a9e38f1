//! Taking an entry out of a JSON file by its bytes: the member or the array element is cut
//! out of the text with the separator beside it, and every other byte stays as the user wrote
//! it (line endings, escapes, spacing, arrays on one line). Serialising the parsed file again
//! would reformat all of it.

use serde_json::Value;

/// Where a value is in the text.
#[derive(Clone, Debug, PartialEq)]
enum Node {
    /// `{…}`: the members (key, the member's first byte, its value's first byte, the member's
    /// last byte + 1, its value).
    Object {
        members: Vec<(String, usize, usize, usize, Node)>,
        end: usize,
    },
    /// `[…]`: the elements (first byte, last byte + 1, the value).
    Array {
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
    fn ws(&mut self) {
        while self.b.get(self.i).is_some_and(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
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
        serde_json::from_slice(&self.b[start..self.i]).ok()
    }

    fn value(&mut self) -> Option<Node> {
        self.ws();
        match *self.b.get(self.i)? {
            b'{' => {
                self.i += 1;
                let mut members = Vec::new();
                self.ws();
                if self.eat(b'}').is_some() {
                    return Some(Node::Object { members, end: self.i });
                }
                loop {
                    self.ws();
                    let start = self.i;
                    let key = self.string()?;
                    self.ws();
                    self.eat(b':')?;
                    self.ws();
                    let vstart = self.i;
                    let v = self.value()?;
                    members.push((key, start, vstart, self.i, v));
                    self.ws();
                    if self.eat(b',').is_some() {
                        continue;
                    }
                    self.eat(b'}')?;
                    return Some(Node::Object { members, end: self.i });
                }
            }
            b'[' => {
                self.i += 1;
                let mut elements = Vec::new();
                self.ws();
                if self.eat(b']').is_some() {
                    return Some(Node::Array { elements, end: self.i });
                }
                loop {
                    self.ws();
                    let start = self.i;
                    let v = self.value()?;
                    elements.push((start, self.i, v));
                    self.ws();
                    if self.eat(b',').is_some() {
                        continue;
                    }
                    self.eat(b']')?;
                    return Some(Node::Array { elements, end: self.i });
                }
            }
            b'"' => self.string().map(|_| Node::Scalar),
            _ => {
                let start = self.i;
                while self
                    .b
                    .get(self.i)
                    .is_some_and(|c| !matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
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
    p.ws();
    (p.i == text.len()).then_some(v)
}

/// The node at `at`.
fn find<'a>(mut node: &'a Node, at: &[String]) -> Option<&'a Node> {
    for k in at {
        let Node::Object { members, .. } = node else { return None };
        node = &members.iter().rev().find(|(key, ..)| key == k)?.4;
    }
    Some(node)
}

/// Cuts item `idx` of `spans` (each a first byte and last byte + 1) out of `text`, with the
/// comma and space that separate it from the next item (or, for the last, from the one before).
fn cut(text: &str, spans: &[(usize, usize)], idx: usize) -> String {
    let (start, end) = spans[idx];
    let (from, to) = match (spans.get(idx + 1), idx.checked_sub(1).map(|p| spans[p])) {
        (Some(next), _) => (start, next.0),
        (None, Some(prev)) => (prev.1, end),
        (None, None) => (start, end),
    };
    let mut out = String::with_capacity(text.len());
    out.push_str(&text[..from]);
    out.push_str(&text[to..]);
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
    if let Some(v) = expect {
        let found: Value = serde_json::from_str(&text[*vstart..*end]).ok()?;
        if found != *v {
            return None;
        }
    }
    let spans: Vec<(usize, usize)> = members.iter().map(|(_, s, _, e, _)| (*s, *e)).collect();
    Some(cut(text, &spans, idx))
}

/// `text` without the first element equal to `value` of the array at `at`; `None` when there
/// is none.
pub fn remove_element(text: &str, at: &[String], value: &Value) -> Option<String> {
    let root = parse(text)?;
    let Node::Array { elements, .. } = find(&root, at)? else { return None };
    let idx = elements
        .iter()
        .position(|(s, e, _)| serde_json::from_str::<Value>(&text[*s..*e]).ok().as_ref() == Some(value))?;
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
    fn text_that_does_not_parse_is_left_alone() {
        for bad in ["", "{", "{\"a\":}", "[1,", "{\"a\": 1} x"] {
            assert_eq!(remove_member(bad, &at(&["a"]), None), None, "{bad:?}");
        }
    }
}
