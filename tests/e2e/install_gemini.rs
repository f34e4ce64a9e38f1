//! `loopx host install gemini` reads `settings.json` as Gemini CLI reads it: comments,
//! trailing commas, `context.fileName` as one string. The user's comments and every byte
//! outside loopx's keys stay; uninstall gives the file back byte for byte; a file Gemini CLI
//! itself refuses is still refused, with nothing written.

use loopx_tests::Sandbox;

const SETTINGS: &str = ".gemini/settings.json";

/// A settings file as people write them for Gemini CLI.
const COMMENTED: &str = "// my Gemini settings\n{\n  /* the model I pay for */\n  \"model\": {\"name\": \"gemini-2.5-pro\",},\n  \"context\": {\n    \"fileName\": \"AGENTS.md\", // not GEMINI.md\n  },\n  \"ui\": { \"theme\": \"Dracula\" }, // dark\n}\n";

fn write(s: &Sandbox, rel: &str, text: &str) {
    let p = s.root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn read(s: &Sandbox) -> String {
    std::fs::read_to_string(s.root.join(SETTINGS)).unwrap()
}

/// The file's text without its comments and trailing commas, as JSON.
fn value(text: &str) -> serde_json::Value {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                in_string = !in_string;
                out.push(c);
            }
            '\\' if in_string => {
                out.push(c);
                out.extend(chars.next());
            }
            '/' if !in_string && chars.peek() == Some(&'/') => {
                while chars.peek().is_some_and(|c| *c != '\n') {
                    chars.next();
                }
            }
            '/' if !in_string && chars.peek() == Some(&'*') => {
                chars.next();
                let mut last = ' ';
                for c in chars.by_ref() {
                    if last == '*' && c == '/' {
                        break;
                    }
                    last = c;
                }
            }
            _ => out.push(c),
        }
    }
    let no_trailing = regex_lite(&out);
    serde_json::from_str(&no_trailing).unwrap_or_else(|e| panic!("{e}:\n{no_trailing}"))
}

/// `,` followed by blanks and a closing bracket, dropped.
fn regex_lite(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::new();
    for (i, c) in b.iter().enumerate() {
        if *c == ',' && b[i + 1..].iter().find(|c| !c.is_whitespace()).is_some_and(|c| *c == '}' || *c == ']')
        {
            continue;
        }
        out.push(*c);
    }
    out
}

#[test]
fn settings_with_comments_and_trailing_commas_are_read_kept_and_given_back() {
    let s = Sandbox::new();
    write(&s, SETTINGS, COMMENTED);
    let before = s.tree();
    let r = s.run(&["host", "install", "gemini", "--with", "stop-driver", "--with", "harden"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let installed = read(&s);
    for kept in [
        "// my Gemini settings\n{\n  /* the model I pay for */\n  \"model\": {\"name\": \"gemini-2.5-pro\",},\n",
        "// not GEMINI.md",
        "\"ui\": { \"theme\": \"Dracula\" }",
        "// dark\n",
    ] {
        assert!(installed.contains(kept), "{kept:?} is gone:\n{installed}");
    }
    let v = value(&installed);
    assert_eq!(v["model"]["name"], "gemini-2.5-pro");
    assert_eq!(v["ui"]["theme"], "Dracula");
    // Gemini CLI reads one name as a list of one: loopx's context file joins it.
    let names = v["context"]["fileName"].as_array().unwrap();
    assert_eq!(names[0], "AGENTS.md");
    assert!(names.iter().any(|n| n.as_str().unwrap().ends_with("loopx.md")), "{v}");
    for event in ["BeforeAgent", "AfterAgent", "BeforeTool"] {
        assert!(
            v["hooks"][event][0]["hooks"][0]["command"].as_str().unwrap().contains("hook gemini"),
            "{event}"
        );
    }
    assert_eq!(v["mcpServers"]["loopx"]["args"], serde_json::json!(["mcp"]));
    // Again: nothing changes.
    let again = s.json(&["host", "install", "gemini", "--with", "stop-driver", "--with", "harden"]);
    assert!(again["actions"].as_array().unwrap().iter().all(|a| a["op"] == "unchanged"), "{again}");
    assert_eq!(read(&s), installed);
    s.ok(&["host", "uninstall", "gemini"]);
    assert_eq!(s.tree(), before, "uninstall gives the file back byte for byte");

    // Edited after install (a comment and a key of the user's): uninstall takes out only
    // loopx's bytes, and the one name is one name again.
    s.ok(&["host", "install", "gemini", "--with", "stop-driver"]);
    let mine = "  // added later\n  \"extra\": 1,\n";
    let edited = read(&s).replacen("{\n", &format!("{{\n{mine}"), 1);
    std::fs::write(s.root.join(SETTINGS), &edited).unwrap();
    s.ok(&["host", "uninstall", "gemini"]);
    assert_eq!(read(&s), COMMENTED.replacen("{\n", &format!("{{\n{mine}"), 1));
}

#[test]
fn a_settings_file_gemini_itself_refuses_is_refused_and_left_as_it_is() {
    for bad in [
        "{ model: 1 }\n",
        "{ 'model': 1 }\n",
        "{ \"model\": 1 } /* never closed\n",
        "{ \"a\": 1,, }\n",
        "[\"not an object\"]\n",
    ] {
        let s = Sandbox::new();
        write(&s, SETTINGS, bad);
        let before = s.tree();
        let r = s.fails(1, &["host", "install", "gemini"]);
        assert!(r.stderr.contains("is not valid JSON (with comments)"), "{bad:?}: {}", r.stderr);
        assert_eq!(s.tree(), before, "{bad:?}");
    }
}
