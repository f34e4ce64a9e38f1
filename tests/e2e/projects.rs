//! `loopx projects` and `loopx status --all`: the user's index of projects, and what in them
//! needs a person, most urgent first, each with a command that acts on it.

use loopx_tests::Sandbox;

#[test]
fn status_all_shows_what_needs_a_person_across_projects_and_reports_the_unreadable() {
    let s = Sandbox::new();
    let dir = |name: &str| {
        let d = s.root.join(name);
        std::fs::create_dir_all(&d).unwrap();
        d
    };
    let (api, web, broken) = (dir("api"), dir("web"), dir("broken"));
    let ok = |d: &std::path::Path, args: &[&str]| s.ok_in(d, args);
    // Nothing indexed yet: said, and the way to add one.
    assert!(ok(&s.root, &["status", "--all"]).stdout.contains("loopx projects add DIR"));
    // A new project offers the index, and asks nothing.
    let made = ok(&api, &["init", "--goal-id", "main", "--objective", "the api", "--json"]).json();
    assert!(made["next"].as_array().unwrap().iter().any(|c| c == "loopx projects add"), "{made}");
    ok(&api, &["gate", "ask", "--question", "Ship the API?", "--blocks", "goal"]);
    ok(&web, &["init", "--goal-id", "site", "--objective", "the site"]);
    ok(
        &web,
        &[
            "todo",
            "add",
            "--agent-id",
            "user",
            "--role",
            "user",
            "--priority",
            "P1",
            "--text",
            "rotate the key",
        ],
    );
    ok(&web, &["goal", "set", "--compute", "0"]);
    ok(&broken, &["init"]);
    for d in [&api, &web, &broken] {
        ok(d, &["projects", "add"]);
    }
    let again = ok(&api, &["init", "--json"]).json();
    assert!(!again["next"].as_array().unwrap().iter().any(|c| c == "loopx projects add"), "{again}");
    // Adding again changes nothing; a directory outside any project is refused.
    assert!(ok(&api, &["projects", "add", "."]).stdout.contains("in the index already"));
    let outside = dir("outside");
    assert_eq!(s.run_in(&outside, &["projects", "add"]).code, 1);
    std::fs::write(broken.join(".loopx/project.json"), "not json").unwrap();

    let all = ok(&s.root, &["status", "--all", "--json"]).json();
    let kinds: Vec<(&str, &str)> = all["needs_you"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["kind"].as_str().unwrap(), n["goal"].as_str().unwrap()))
        .collect();
    assert_eq!(kinds, [("paused", "site"), ("gate", "main"), ("user_todo", "site")], "{all}");
    let unreadable = all["unreadable"].as_array().unwrap();
    assert_eq!(unreadable.len(), 1);
    assert!(unreadable[0]["error"].as_str().unwrap().contains("project.json is not valid"), "{all}");
    let text = ok(&s.root, &["status", "--all"]).stdout;
    assert!(text.contains("needs you (3):") && text.contains("cannot read"), "{text}");

    // Each command shown acts: run the gate's and the pause's, and only the person's todo is left.
    for n in all["needs_you"].as_array().unwrap().iter().take(2) {
        let line = n["command"].as_str().unwrap();
        let command = line.split("   #").next().unwrap();
        let words = shell_words::split(command).unwrap();
        assert_eq!(words[0], "loopx");
        let args: Vec<&str> = words[1..].iter().map(String::as_str).collect();
        ok(&outside, &args);
    }
    let after = ok(&s.root, &["status", "--all", "--json"]).json();
    let left: Vec<&str> =
        after["needs_you"].as_array().unwrap().iter().map(|n| n["kind"].as_str().unwrap()).collect();
    assert_eq!(left, ["user_todo"], "{after}");

    // Removing keeps the project's files; removing what is not there is refused.
    let before = std::fs::read(web.join(".loopx/project.json")).unwrap();
    ok(&web, &["projects", "remove"]);
    assert_eq!(std::fs::read(web.join(".loopx/project.json")).unwrap(), before);
    assert_eq!(s.run_in(&web, &["projects", "remove"]).code, 1);
    let list = ok(&s.root, &["projects", "list", "--json"]).json();
    assert_eq!(list["projects"].as_array().unwrap().len(), 2, "{list}");
    // A damaged index is refused and left as it is.
    let index = s.home.join(".config/loopx/projects.json");
    std::fs::write(&index, "{").unwrap();
    let r = s.run_in(&api, &["projects", "add"]);
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert_eq!(std::fs::read_to_string(&index).unwrap(), "{");
}
