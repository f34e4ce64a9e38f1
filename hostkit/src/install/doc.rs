//! The host's structured files as documents with key paths: JSON (`serde_json`, keys kept in
//! the user's order), JSON with comments (edited by its bytes, `span`, so every byte not
//! loopx's stays) and TOML (`toml_edit`, comments and layout kept). The installer adds and
//! removes only its own entries through this one interface.

use serde_json::{Map, Number, Value};
use toml_edit::{ArrayOfTables, DocumentMut, InlineTable, Item, Table, TableLike};

use loopx_core::host::Format;
use loopx_core::{Error, Result};

use super::span;

/// A parsed host file.
#[derive(Debug, Clone)]
pub enum Doc {
    Json {
        root: Map<String, Value>,
        indent: String,
    },
    /// The text itself, comments and all.
    Jsonc {
        text: String,
        indent: String,
    },
    Toml(DocumentMut),
}

impl Doc {
    /// Parses `text` (or starts an empty document). Anything but a well-formed document with
    /// a table at its root is refused, naming the file.
    pub fn parse(format: Format, text: Option<&str>, shown: &str) -> Result<Self> {
        let refuse = |why: String| {
            Error::refused(format!(
                "{shown} is not valid {} ({why}); loopx will not replace it",
                name(format)
            ))
            .with_hint("fix the file, then run the command again")
        };
        match format {
            Format::Json => {
                let Some(text) = text else {
                    return Ok(Doc::Json { root: Map::new(), indent: "  ".to_owned() });
                };
                match serde_json::from_str::<Value>(text) {
                    Ok(Value::Object(root)) => Ok(Doc::Json { root, indent: indent_of(text) }),
                    Ok(_) => Err(refuse("its top level is not an object".to_owned())),
                    Err(e) => Err(refuse(e.to_string())),
                }
            }
            Format::Jsonc => {
                let Some(text) = text else {
                    return Ok(Doc::Jsonc { text: "{}\n".to_owned(), indent: "  ".to_owned() });
                };
                span::check(text).map_err(refuse)?;
                Ok(Doc::Jsonc { text: text.to_owned(), indent: indent_of(text) })
            }
            Format::Toml => match text {
                None => Ok(Doc::Toml(DocumentMut::new())),
                Some(t) => {
                    t.parse::<DocumentMut>().map(Doc::Toml).map_err(|e| refuse(first_line(&e.to_string())))
                }
            },
        }
    }

    /// The document's text.
    pub fn render(&self) -> Result<String> {
        match self {
            Doc::Json { root, indent } => {
                let mut out = Vec::new();
                let fmt = serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes());
                let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
                serde::Serialize::serialize(root, &mut ser)
                    .map_err(|e| Error::internal(format!("cannot encode JSON: {e}")))?;
                let mut s = String::from_utf8(out).map_err(|e| Error::internal(e.to_string()))?;
                s.push('\n');
                Ok(s)
            }
            Doc::Jsonc { text, .. } => Ok(text.clone()),
            Doc::Toml(d) => Ok(d.to_string()),
        }
    }

    pub fn is_empty(&self) -> bool {
        match self {
            Doc::Json { root, .. } => root.is_empty(),
            Doc::Jsonc { text, .. } => span::is_empty_object(text),
            Doc::Toml(d) => d.is_empty(),
        }
    }

    /// The value at `at`, as JSON.
    pub fn get(&self, at: &[String]) -> Option<Value> {
        match self {
            Doc::Json { root, .. } => {
                let (first, rest) = at.split_first()?;
                let mut cur = root.get(first)?;
                for k in rest {
                    cur = cur.as_object()?.get(k)?;
                }
                Some(cur.clone())
            }
            Doc::Jsonc { text, .. } => span::get(text, at),
            Doc::Toml(d) => {
                let mut cur: &Item = d.as_item();
                for k in at {
                    cur = cur.as_table_like()?.get(k)?;
                }
                item_to_json(cur)
            }
        }
    }

    /// Sets the key at `at` to `value`, creating the tables on the way; an existing key keeps
    /// its place.
    pub fn set(&mut self, at: &[String], value: &Value) -> Result<()> {
        let (last, parents) = at.split_last().ok_or_else(|| Error::internal("an entry with no key"))?;
        match self {
            Doc::Json { root, .. } => {
                json_parent(root, parents)?.insert(last.clone(), value.clone());
            }
            Doc::Jsonc { text, indent } => {
                *text = span::set_member(text, at, value, indent).map_err(in_the_way)?
            }
            Doc::Toml(d) => {
                let item = if value.is_object() {
                    Item::Table(json_to_table(value)?)
                } else {
                    Item::Value(json_to_toml(value)?)
                };
                toml_parent(d.as_table_mut(), parents)?.insert(last, item);
            }
        }
        Ok(())
    }

    /// Removes the key at `at`, if present.
    pub fn remove(&mut self, at: &[String]) {
        let Some((last, parents)) = at.split_last() else { return };
        match self {
            Doc::Json { root, .. } => {
                if let Some(p) = json_parent_existing(root, parents) {
                    p.shift_remove(last);
                }
            }
            Doc::Jsonc { text, .. } => {
                if let Some(t) = span::remove_member(text, at, None) {
                    *text = t;
                }
            }
            Doc::Toml(d) => {
                if let Some(p) = toml_parent_existing(d.as_table_mut(), parents) {
                    p.remove(last);
                }
            }
        }
    }

    /// Appends `value` to the array at `at`, creating it. An object goes into a TOML array of
    /// tables (`[[at]]`).
    pub fn push(&mut self, at: &[String], value: &Value) -> Result<()> {
        let (last, parents) = at.split_last().ok_or_else(|| Error::internal("an entry with no key"))?;
        let not_array = |p: &[String]| {
            Error::refused(format!("{} is not an array; loopx will not replace it", p.join(".")))
                .with_hint("fix the file, then run the command again")
        };
        match self {
            Doc::Json { root, .. } => {
                let slot =
                    json_parent(root, parents)?.entry(last.clone()).or_insert_with(|| Value::Array(vec![]));
                slot.as_array_mut().ok_or_else(|| not_array(at))?.push(value.clone());
            }
            Doc::Jsonc { text, indent } => {
                *text = span::push_element(text, at, value, indent).map_err(in_the_way)?;
            }
            Doc::Toml(d) => {
                let parent = toml_parent(d.as_table_mut(), parents)?;
                if value.is_object() {
                    if !parent.contains_key(last) {
                        parent.insert(last, Item::ArrayOfTables(ArrayOfTables::new()));
                    }
                    let aot = parent
                        .get_mut(last)
                        .and_then(Item::as_array_of_tables_mut)
                        .ok_or_else(|| not_array(at))?;
                    aot.push(json_to_table(value)?);
                } else {
                    if !parent.contains_key(last) {
                        parent.insert(last, toml_edit::value(toml_edit::Array::new()));
                    }
                    let arr =
                        parent.get_mut(last).and_then(Item::as_array_mut).ok_or_else(|| not_array(at))?;
                    arr.push(json_to_toml(value)?);
                }
            }
        }
        Ok(())
    }

    /// Removes the first element equal to `value` from the array at `at`; whether it did.
    pub fn remove_element(&mut self, at: &[String], value: &Value) -> bool {
        let Some((last, parents)) = at.split_last() else { return false };
        match self {
            Doc::Json { root, .. } => {
                let arr = json_parent_existing(root, parents)
                    .and_then(|p| p.get_mut(last))
                    .and_then(Value::as_array_mut);
                match arr.and_then(|a| a.iter().position(|v| v == value).map(|i| (a, i))) {
                    Some((a, i)) => {
                        a.remove(i);
                        true
                    }
                    None => false,
                }
            }
            Doc::Jsonc { text, .. } => match span::remove_element(text, at, value) {
                Some(t) => {
                    *text = t;
                    true
                }
                None => false,
            },
            Doc::Toml(d) => {
                let Some(item) =
                    toml_parent_existing(d.as_table_mut(), parents).and_then(|p| p.get_mut(last))
                else {
                    return false;
                };
                if let Some(aot) = item.as_array_of_tables_mut() {
                    let i = aot
                        .iter()
                        .position(|t| item_to_json(&Item::Table(t.clone())).as_ref() == Some(value));
                    return i.map(|i| aot.remove(i)).is_some();
                }
                if let Some(arr) = item.as_array_mut() {
                    let i = arr.iter().position(|v| toml_to_json(v).as_ref() == Some(value));
                    return i.map(|i| arr.remove(i)).is_some();
                }
                false
            }
        }
    }
}

/// An edit a JSON-with-comments file has no room for, as the other formats refuse it.
fn in_the_way(e: span::InTheWay) -> Error {
    match e.not {
        "an array" => {
            Error::refused(format!("{} is not an array; loopx will not replace it", e.at.join(".")))
                .with_hint("fix the file, then run the command again")
        }
        _ => not_a_table(&e.at),
    }
}

fn name(format: Format) -> &'static str {
    match format {
        Format::Json => "JSON",
        Format::Jsonc => "JSON (with comments)",
        Format::Toml => "TOML",
    }
}

fn first_line(s: &str) -> String {
    s.lines().find(|l| !l.trim().is_empty()).unwrap_or(s).trim().to_owned()
}

/// The indentation the file already uses (two spaces when it says nothing).
fn indent_of(text: &str) -> String {
    text.lines()
        .nth(1)
        .map(|l| l.chars().take_while(|c| *c == ' ' || *c == '\t').collect::<String>())
        .filter(|i| !i.is_empty())
        .unwrap_or_else(|| "  ".to_owned())
}

fn not_a_table(at: &[String]) -> Error {
    Error::refused(format!("{} is not an object; loopx will not replace it", at.join(".")))
        .with_hint("fix the file, then run the command again")
}

fn json_parent<'a>(
    root: &'a mut Map<String, Value>,
    parents: &[String],
) -> Result<&'a mut Map<String, Value>> {
    let mut cur = root;
    for (i, k) in parents.iter().enumerate() {
        let slot = cur.entry(k.clone()).or_insert_with(|| Value::Object(Map::new()));
        cur = slot.as_object_mut().ok_or_else(|| not_a_table(&parents[..=i]))?;
    }
    Ok(cur)
}

fn json_parent_existing<'a>(
    root: &'a mut Map<String, Value>,
    parents: &[String],
) -> Option<&'a mut Map<String, Value>> {
    let mut cur = root;
    for k in parents {
        cur = cur.get_mut(k)?.as_object_mut()?;
    }
    Some(cur)
}

fn toml_parent<'a>(root: &'a mut Table, parents: &[String]) -> Result<&'a mut dyn TableLike> {
    let mut cur: &mut dyn TableLike = root;
    for (i, k) in parents.iter().enumerate() {
        if !cur.contains_key(k) {
            let mut t = Table::new();
            t.set_implicit(true);
            cur.insert(k, Item::Table(t));
        }
        cur = cur.get_mut(k).and_then(Item::as_table_like_mut).ok_or_else(|| not_a_table(&parents[..=i]))?;
    }
    Ok(cur)
}

fn toml_parent_existing<'a>(root: &'a mut Table, parents: &[String]) -> Option<&'a mut dyn TableLike> {
    let mut cur: &mut dyn TableLike = root;
    for k in parents {
        cur = cur.get_mut(k)?.as_table_like_mut()?;
    }
    Some(cur)
}

fn json_to_toml(v: &Value) -> Result<toml_edit::Value> {
    Ok(match v {
        Value::Null => return Err(Error::internal("TOML has no null")),
        Value::Bool(b) => (*b).into(),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => i.into(),
            (None, Some(f)) => f.into(),
            _ => return Err(Error::internal(format!("number {n} does not fit TOML"))),
        },
        Value::String(s) => s.as_str().into(),
        Value::Array(a) => {
            let mut arr = toml_edit::Array::new();
            for x in a {
                arr.push(json_to_toml(x)?);
            }
            arr.into()
        }
        Value::Object(m) => {
            let mut t = InlineTable::new();
            for (k, x) in m {
                t.insert(k, json_to_toml(x)?);
            }
            t.into()
        }
    })
}

/// An object as a `[table]`; its nested objects stay inline.
fn json_to_table(v: &Value) -> Result<Table> {
    let mut t = Table::new();
    for (k, x) in v.as_object().into_iter().flatten() {
        t.insert(k, Item::Value(json_to_toml(x)?));
    }
    Ok(t)
}

fn toml_to_json(v: &toml_edit::Value) -> Option<Value> {
    use toml_edit::Value as T;
    Some(match v {
        T::String(s) => Value::String(s.value().clone()),
        T::Integer(i) => Value::Number((*i.value()).into()),
        T::Float(f) => Value::Number(Number::from_f64(*f.value())?),
        T::Boolean(b) => Value::Bool(*b.value()),
        T::Datetime(d) => Value::String(d.value().to_string()),
        T::Array(a) => Value::Array(a.iter().filter_map(toml_to_json).collect()),
        T::InlineTable(t) => {
            Value::Object(t.iter().filter_map(|(k, v)| Some((k.to_owned(), toml_to_json(v)?))).collect())
        }
    })
}

fn item_to_json(item: &Item) -> Option<Value> {
    match item {
        Item::None => None,
        Item::Value(v) => toml_to_json(v),
        Item::Table(t) => Some(Value::Object(
            t.iter().filter_map(|(k, i)| Some((k.to_owned(), item_to_json(i)?))).collect(),
        )),
        Item::ArrayOfTables(a) => {
            Some(Value::Array(a.iter().filter_map(|t| item_to_json(&Item::Table(t.clone()))).collect()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(p: &str) -> Vec<String> {
        p.split('.').map(str::to_owned).collect()
    }

    #[test]
    fn toml_edits_keep_the_users_comments_and_layout() {
        let text = "# my settings\nmodel = \"o3\"  # the model\n\n[mcp_servers.docs]\ncommand = \"docs\"\n";
        let mut d = Doc::parse(Format::Toml, Some(text), "config.toml").unwrap();
        d.set(&at("mcp_servers.loopx"), &json!({"command": "loopx", "args": ["mcp"]})).unwrap();
        d.push(&at("hooks.Stop"), &json!({"command": "loopx hook codex stop"})).unwrap();
        let out = d.render().unwrap();
        assert!(out.starts_with(text), "{out}");
        assert!(out.contains("[mcp_servers.loopx]\ncommand = \"loopx\"\nargs = [\"mcp\"]"), "{out}");
        assert!(out.contains("[[hooks.Stop]]"), "{out}");
        assert_eq!(d.get(&at("mcp_servers.loopx.args")), Some(json!(["mcp"])));
        d.remove(&at("mcp_servers.loopx"));
        assert!(d.remove_element(&at("hooks.Stop"), &json!({"command": "loopx hook codex stop"})));
        d.remove(&at("hooks"));
        assert_eq!(d.render().unwrap(), text);
    }

    #[test]
    fn json_keeps_order_and_indent() {
        let text = "{\n    \"b\": 1,\n    \"a\": [\"x\"]\n}\n";
        let mut d = Doc::parse(Format::Json, Some(text), "s.json").unwrap();
        d.push(&at("a"), &json!("y")).unwrap();
        assert_eq!(
            d.render().unwrap(),
            "{\n    \"b\": 1,\n    \"a\": [\n        \"x\",\n        \"y\"\n    ]\n}\n"
        );
        assert!(d.remove_element(&at("a"), &json!("y")));
        assert!(!d.remove_element(&at("a"), &json!("y")));
        assert!(d.push(&at("b"), &json!(1)).is_err(), "a scalar is not an array");
        assert!(d.set(&at("b.c"), &json!(1)).is_err(), "a scalar is not a table");
    }

    #[test]
    fn bad_documents_are_refused() {
        assert!(Doc::parse(Format::Json, Some("[1]"), "x").is_err());
        assert!(Doc::parse(Format::Json, Some("{"), "x").is_err());
        assert!(Doc::parse(Format::Toml, Some("a = = 1"), "x").is_err());
        assert!(Doc::parse(Format::Toml, None, "x").unwrap().is_empty());
    }
}
