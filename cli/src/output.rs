//! Printing: stdout is data, stderr is for people. `--json` prints one document with a
//! `schema_version`; text is coloured only on a terminal, never with `NO_COLOR` or `--json`.
//! A closed pipe ends the program quietly.

use std::io::{self, IsTerminal, Write};

use serde::Serialize;
use serde_json::{Map, Value};

use loopx_core::kernel::SCHEMA_VERSION;
use loopx_core::{Error, exit};
use loopx_hostkit::next;

use crate::args::ColorChoice;

/// A command's result, ready to print either way.
#[derive(Debug)]
pub struct Rendered {
    pub json: Value,
    pub text: String,
    pub exit_code: i32,
    /// Bytes printed as they are instead of the text or the JSON (`report --svg -`).
    pub raw: Option<Vec<u8>>,
}

impl Rendered {
    pub fn new(value: &impl Serialize, text: String) -> Result<Self, Error> {
        let json =
            serde_json::to_value(value).map_err(|e| Error::internal(format!("cannot encode output: {e}")))?;
        Ok(Self { json, text, exit_code: exit::SUCCESS, raw: None })
    }
    /// `bytes` on stdout as they are, and nothing else.
    pub fn raw(bytes: Vec<u8>) -> Self {
        Self { json: Value::Null, text: String::new(), exit_code: exit::SUCCESS, raw: Some(bytes) }
    }
    pub fn with_exit(mut self, code: i32) -> Self {
        self.exit_code = code;
        self
    }
}

/// Colours for text output.
#[derive(Clone, Copy, Debug)]
pub struct Style {
    on: bool,
}

impl Style {
    pub fn paint(self, code: &str, s: &str) -> String {
        if self.on { format!("\x1b[{code}m{s}\x1b[0m") } else { s.to_owned() }
    }
    pub fn bold(self, s: &str) -> String {
        self.paint("1", s)
    }
    pub fn dim(self, s: &str) -> String {
        self.paint("2", s)
    }
    pub fn green(self, s: &str) -> String {
        self.paint("32", s)
    }
    pub fn yellow(self, s: &str) -> String {
        self.paint("33", s)
    }
    pub fn red(self, s: &str) -> String {
        self.paint("31", s)
    }
}

/// What the environment says about colour.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ColorEnv {
    pub no_color: bool,
    pub force: bool,
}

impl ColorEnv {
    /// From the values of `NO_COLOR` and `CLICOLOR_FORCE`.
    pub fn from_values(no_color: Option<&std::ffi::OsStr>, force: Option<&std::ffi::OsStr>) -> Self {
        Self {
            no_color: no_color.is_some_and(|v| !v.is_empty()),
            force: force.is_some_and(|v| !v.is_empty() && v != "0"),
        }
    }
}

#[derive(Debug)]
pub struct Printer {
    pub json: bool,
    pub style: Style,
    err_style: Style,
}

impl Printer {
    /// `env` is the colour environment: `NO_COLOR` (set and not empty: no colour, per
    /// no-color.org) and `CLICOLOR_FORCE` (set and not `0`: colour even off a terminal).
    /// `--color always|never` overrides both; `--json` is never coloured.
    pub fn new(json: bool, color: ColorChoice, env: ColorEnv) -> Self {
        let decide = |is_tty: bool| match color {
            _ if json => false,
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto if env.no_color => false,
            ColorChoice::Auto => is_tty || env.force,
        };
        Self {
            json,
            style: Style { on: decide(io::stdout().is_terminal()) },
            err_style: Style { on: decide(io::stderr().is_terminal()) && !json },
        }
    }

    /// Prints a result; returns its exit code.
    pub fn emit(&self, r: Rendered) -> i32 {
        if let Some(bytes) = &r.raw {
            write_raw(bytes);
            return r.exit_code;
        }
        let doc = if self.json { document(r.json) } else { r.text };
        write_stdout(&doc);
        r.exit_code
    }

    /// Prints an error (and, with `--json`, an error document); returns its exit code.
    pub fn error(&self, e: &Error) -> i32 {
        let e = &crate::registry::with_type_names(e);
        let mut msg =
            format!("{} {}", self.err_style.red("error:"), loopx_core::untrusted::printable(&e.message));
        for line in next::hint_lines(e.hint.as_deref(), &next::error_commands(e)) {
            msg.push_str(&format!("\n{} {line}", self.err_style.dim("hint:")));
        }
        eprintln!("{msg}");
        if self.json {
            self.error_document(e);
        }
        e.exit_code()
    }

    /// `{"schema_version":1,"error":{"kind":…,"message":…,"hint":…}}` on stdout.
    pub fn error_document(&self, e: &Error) {
        let e = &crate::registry::with_type_names(e);
        let mut m = Map::new();
        let mut err = serde_json::to_value(e).unwrap_or(Value::Null);
        let commands = next::error_commands(e);
        if let (Some(o), false) = (err.as_object_mut(), commands.is_empty()) {
            o.insert("next_commands".to_owned(), Value::from(commands));
        }
        m.insert("error".to_owned(), err);
        write_stdout(&document(Value::Object(m)));
    }

    pub fn warn(&self, message: &str) {
        eprintln!("{} {message}", self.err_style.yellow("warning:"));
    }
}

/// `{"schema_version":1, …}` on one line.
fn document(body: Value) -> String {
    let mut m = Map::new();
    m.insert("schema_version".to_owned(), Value::from(SCHEMA_VERSION));
    match body {
        Value::Object(o) => m.extend(o),
        other => {
            m.insert("result".to_owned(), other);
        }
    }
    Value::Object(m).to_string()
}

fn write_raw(bytes: &[u8]) {
    let mut out = io::stdout().lock();
    if let Err(e) = out.write_all(bytes).and_then(|()| out.flush())
        && e.kind() == io::ErrorKind::BrokenPipe
    {
        std::process::exit(exit::SUCCESS);
    }
}

fn write_stdout(s: &str) {
    let mut out = io::stdout().lock();
    let r = out
        .write_all(s.as_bytes())
        .and_then(|()| if s.ends_with('\n') { Ok(()) } else { out.write_all(b"\n") });
    if let Err(e) = r.and_then(|()| out.flush())
        && e.kind() == io::ErrorKind::BrokenPipe
    {
        std::process::exit(exit::SUCCESS);
    }
}
