//! The layering rules of ARCHITECTURE.md's code map (each crate's "never"), checked on the code itself: which workspace crates each
//! crate may depend on (from `cargo metadata`), and which parts of `std` and which macros its
//! source may name. Sources are parsed with `syn`, every `use` is followed (grouped imports,
//! renames, globs), every path and macro is resolved through them, macro arguments are parsed
//! too, and every module file is read, however deep. Test modules (`#[cfg(test)]`) are exempt.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use syn::punctuated::Punctuated;
use syn::visit::{self, Visit};

/// The kind of crate a source file belongs to, which decides its rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    /// `core/`: no file, network, environment, process or clock I/O, no printing.
    Core,
    /// `kernel/` and the crates beside it (`machine/`, `pgstore/`, `dashboard/`): never read the
    /// environment, print or exit.
    /// (Every layer here is also forbidden to print: stdout and stderr belong to the CLI.)
    Kernel,
    /// `hosts/*`: reads and parses, never writes a file, runs a process, reads the environment
    /// or prints.
    Host,
    /// `adapters/*`: pure plans and answers: no file, process, network or environment access.
    Adapter,
    /// `providers/`: observes the world (network, processes) for the kernel; writes no file
    /// (it reads `/proc` to find processes), reads no environment (the CLI hands it what it
    /// needs), never prints or exits.
    Provider,
    /// `hostkit/`: the host platform's own machinery (`loopx drive`): runs processes and asks
    /// the kernel, but writes no file (the kernel writes `.loopx/`), reads no environment,
    /// never prints or exits.
    Platform,
}

const PRINTING: [&str; 5] = ["println", "eprintln", "print", "eprint", "dbg"];

const FS_WRITES: [&str; 12] = [
    "std::fs::write",
    "std::fs::remove_file",
    "std::fs::remove_dir",
    "std::fs::remove_dir_all",
    "std::fs::create_dir",
    "std::fs::create_dir_all",
    "std::fs::rename",
    "std::fs::copy",
    "std::fs::hard_link",
    "std::fs::set_permissions",
    "std::fs::OpenOptions",
    "std::fs::File::create",
];

impl Layer {
    /// Path prefixes the layer may not name.
    fn forbidden_paths(self) -> Vec<&'static str> {
        match self {
            Layer::Core => vec![
                "std::fs",
                "std::net",
                "std::env",
                "std::process",
                "std::thread::sleep",
                "std::time::SystemTime::now",
                "std::time::Instant::now",
                "tokio",
            ],
            Layer::Kernel => vec!["std::env", "std::process::exit"],
            Layer::Host => {
                let mut v = FS_WRITES.to_vec();
                v.extend(["std::env", "std::net", "std::process"]);
                v
            }
            Layer::Adapter => vec!["std::fs", "std::env", "std::net", "std::process", "tokio"],
            Layer::Provider => {
                let mut v = FS_WRITES.to_vec();
                v.extend(["tokio::fs", "std::env", "std::process::exit"]);
                v
            }
            Layer::Platform => {
                let mut v = FS_WRITES.to_vec();
                v.extend(["tokio::fs", "std::env", "std::process::exit"]);
                v
            }
        }
    }

    pub fn of(dir: &str) -> Option<Layer> {
        match dir {
            "core" => Some(Layer::Core),
            "kernel" | "machine" | "pgstore" | "dashboard" | "import" | "report" => Some(Layer::Kernel),
            "providers" => Some(Layer::Provider),
            "hostkit" => Some(Layer::Platform),
            d if d.starts_with("hosts/") => Some(Layer::Host),
            d if d.starts_with("adapters/") => Some(Layer::Adapter),
            _ => None,
        }
    }
}

/// One broken rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub file: String,
    pub what: String,
}

struct Checker<'a> {
    layer: Layer,
    file: &'a str,
    /// The file is the kernel's or core's, which name no concrete host (outside tests and
    /// docs): hosts are known only through the adapters' declarations.
    hostless: bool,
    /// Local name → the full path it was imported as.
    imports: BTreeMap<String, Vec<String>>,
    found: Vec<Violation>,
}

fn flatten(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<(String, Vec<String>)>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let name = n.ident.to_string();
            let mut full = prefix.clone();
            if name != "self" {
                full.push(name.clone());
            }
            let local = if name == "self" { prefix.last().cloned().unwrap_or_default() } else { name };
            out.push((local, full));
        }
        syn::UseTree::Rename(r) => {
            let mut full = prefix.clone();
            full.push(r.ident.to_string());
            out.push((r.rename.to_string(), full));
        }
        syn::UseTree::Glob(_) => {
            let mut full = prefix.clone();
            full.push("*".to_owned());
            out.push(("*".to_owned(), full));
        }
        syn::UseTree::Group(g) => {
            for t in &g.items {
                flatten(t, prefix, out);
            }
        }
    }
}

fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && a.parse_args::<syn::Meta>().is_ok_and(|m| m.path().is_ident("test"))
    })
}

/// `src` parsed, without its test code (`#[cfg(test)]` modules, functions and imports, however
/// deep in inline modules); `None` when it does not parse.
fn parse_outside_tests(src: &str) -> Option<syn::File> {
    fn strip(items: &mut Vec<syn::Item>) {
        items.retain(|i| match i {
            syn::Item::Mod(m) => !is_test_only(&m.attrs),
            syn::Item::Fn(f) => !is_test_only(&f.attrs),
            syn::Item::Use(u) => !is_test_only(&u.attrs),
            _ => true,
        });
        for i in items {
            if let syn::Item::Mod(syn::ItemMod { content: Some((_, inner)), .. }) = i {
                strip(inner);
            }
        }
    }
    let mut file = syn::parse_file(src).ok()?;
    strip(&mut file.items);
    Some(file)
}

/// Visits the arguments of `format!`-like macros, which are expressions too.
fn visit_macro_args<V: for<'a> Visit<'a>>(v: &mut V, m: &syn::Macro) {
    if let Ok(args) = m.parse_body_with(Punctuated::<syn::Expr, syn::Token![,]>::parse_terminated) {
        for e in &args {
            v.visit_expr(e);
        }
    }
}

impl Checker<'_> {
    fn resolve(&self, segments: &[String]) -> Vec<String> {
        let Some(first) = segments.first() else { return vec![] };
        match self.imports.get(first) {
            Some(full) => full.iter().cloned().chain(segments[1..].iter().cloned()).collect(),
            None => segments.to_vec(),
        }
    }

    fn check(&mut self, full: &[String]) {
        let joined = full.join("::");
        for f in self.layer.forbidden_paths() {
            let prefix: Vec<&str> = f.split("::").collect();
            if full.len() >= prefix.len() && full.iter().zip(&prefix).all(|(a, b)| a == b) {
                self.found
                    .push(Violation { file: self.file.to_owned(), what: format!("names {joined} ({f})") });
                return;
            }
        }
    }
}

/// Concrete hosts, as they show up in names and words. `cursor` is also a common word for a
/// position, so it counts in a string only.
const HOSTS: [&str; 5] = ["claude", "codex", "gemini", "opencode", "cursor"];

impl Checker<'_> {
    fn check_host(&mut self, what: &str, text: &str, in_name: bool) {
        if !self.hostless {
            return;
        }
        let lower = text.to_ascii_lowercase();
        if let Some(h) = HOSTS.iter().filter(|h| !(in_name && **h == "cursor")).find(|h| lower.contains(**h))
        {
            self.found.push(Violation {
                file: self.file.to_owned(),
                what: format!("names the host {h} in {what} {text:?} (hosts come from their adapters)"),
            });
        }
    }
}

impl<'ast> Visit<'ast> for Checker<'_> {
    fn visit_attribute(&mut self, a: &'ast syn::Attribute) {
        // Docs may name hosts.
        if !a.path().is_ident("doc") {
            visit::visit_attribute(self, a);
        }
    }

    fn visit_lit_str(&mut self, l: &'ast syn::LitStr) {
        self.check_host("a string", &l.value(), false);
    }

    fn visit_ident(&mut self, i: &'ast syn::Ident) {
        self.check_host("a name", &i.to_string(), true);
    }

    fn visit_item_use(&mut self, i: &'ast syn::ItemUse) {
        if is_test_only(&i.attrs) {
            return;
        }
        let mut out = Vec::new();
        flatten(&i.tree, &mut Vec::new(), &mut out);
        for (local, full) in out {
            self.check(&full);
            if local != "*" {
                self.imports.insert(local, full);
            }
        }
    }

    fn visit_item_mod(&mut self, i: &'ast syn::ItemMod) {
        if !is_test_only(&i.attrs) {
            visit::visit_item_mod(self, i);
        }
    }

    fn visit_item_fn(&mut self, i: &'ast syn::ItemFn) {
        if !is_test_only(&i.attrs) {
            visit::visit_item_fn(self, i);
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        let full = self.resolve(&segments);
        self.check(&full);
        visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        let name = m.path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default();
        if PRINTING.contains(&name.as_str()) {
            self.found.push(Violation { file: self.file.to_owned(), what: format!("prints with {name}!") });
        }
        // Paths inside macro arguments count too.
        visit_macro_args(self, m);
        visit::visit_macro(self, m);
    }
}

/// The violations in one source file of a crate of `layer`. A file that does not parse is
/// itself a violation (the checker cannot vouch for it).
pub fn check_source(layer: Layer, file: &str, src: &str) -> Vec<Violation> {
    let ast = match syn::parse_file(src) {
        Ok(a) => a,
        Err(e) => return vec![Violation { file: file.to_owned(), what: format!("does not parse: {e}") }],
    };
    let hostless = file.starts_with("core/") || file.starts_with("kernel/");
    let mut c = Checker { layer, file, hostless, imports: BTreeMap::new(), found: Vec::new() };
    // Imports first (they may come after their use in the file).
    for item in &ast.items {
        if let syn::Item::Use(u) = item
            && !is_test_only(&u.attrs)
        {
            let mut out = Vec::new();
            flatten(&u.tree, &mut Vec::new(), &mut out);
            c.imports.extend(out.into_iter().filter(|(l, _)| l != "*"));
        }
    }
    c.visit_file(&ast);
    c.found.sort_by(|a, b| a.what.cmp(&b.what));
    c.found.dedup();
    c.found
}

/// Every violation under `root` (the workspace), crate by crate, file by file.
pub fn check_workspace(root: &Path) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut dirs = vec!["core".to_owned(), "kernel".to_owned(), "providers".to_owned()];
    // The crates beside the kernel, where the workspace has them.
    dirs.extend(
        ["machine", "pgstore", "dashboard", "import", "report", "hostkit"]
            .iter()
            .filter(|d| root.join(d).join("Cargo.toml").is_file())
            .map(|d| (*d).to_owned()),
    );
    for family in ["hosts", "adapters"] {
        if let Ok(entries) = std::fs::read_dir(root.join(family)) {
            for e in entries.flatten().filter(|e| e.path().join("Cargo.toml").is_file()) {
                dirs.push(format!("{family}/{}", e.file_name().to_string_lossy()));
            }
        }
    }
    for dir in dirs {
        let Some(layer) = Layer::of(&dir) else { continue };
        let mut files = Vec::new();
        rust_files(&root.join(&dir).join("src"), &mut files);
        assert!(!files.is_empty(), "{dir}/src holds no Rust files");
        for f in files {
            let src = std::fs::read_to_string(&f).unwrap_or_default();
            let shown = f.strip_prefix(root).unwrap_or(&f).display().to_string();
            out.extend(check_source(layer, &shown, &src));
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The dependency rules over `deps` (workspace crate → the workspace crates it depends on).
pub fn check_deps(deps: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let mut out = Vec::new();
    for (name, on) in deps {
        let allowed = |d: &str| match name.as_str() {
            "loopx-core" => false,
            "loopx-kernel" | "loopx-providers" => d == "loopx-core",
            // A store implements the kernel's `Store` trait, and nothing else.
            "loopx-pgstore" => d == "loopx-core" || d == "loopx-kernel",
            // The dashboard reads and writes through the kernel; the CLI hands it the stores.
            "loopx-dashboard" => {
                matches!(d, "loopx-core" | "loopx-kernel" | "loopx-machine" | "loopx-report")
            }
            // The person's machine keeps its own files and reaches goals through the kernel.
            "loopx-machine" => d == "loopx-core" || d == "loopx-kernel",
            // The report reads a goal's log through the kernel's `Store`, nothing else.
            "loopx-report" => d == "loopx-core" || d == "loopx-kernel",
            // The host platform asks the kernel, starts work as the person's machine does, runs
            // processes with the providers' runner, and knows hosts only through core's traits.
            "loopx-hostkit" => {
                matches!(d, "loopx-core" | "loopx-kernel" | "loopx-machine" | "loopx-providers")
            }
            // The importer reads another tool's files and commits through the kernel's stores.
            "loopx-import" => d == "loopx-core" || d == "loopx-kernel",
            n if n.starts_with("loopx-host-") => d == "loopx-core",
            n if n.starts_with("loopx-adapter-") => {
                // Core, and the one host crate whose host the adapter is named after.
                let host = n.trim_start_matches("loopx-adapter-");
                d == "loopx-core" || d.strip_prefix("loopx-host-").is_some_and(|h| host.starts_with(h))
            }
            // Test support checks the product; the product never depends on it.
            "loopx-testkit" => matches!(d, "loopx-core" | "loopx-kernel" | "loopx-machine" | "loopx-hostkit"),
            "loopx-cli" => d != "loopx-testkit",
            _ => true, // xtask and tests may depend on anything
        };
        for d in on.iter().filter(|d| !allowed(d)) {
            out.push(format!("{name} must not depend on {d} (see ARCHITECTURE.md's code map)"));
        }
        if name.starts_with("loopx-adapter-")
            && on.iter().filter(|d| d.starts_with("loopx-host-")).count() > 1
        {
            out.push(format!("{name} depends on more than one host crate"));
        }
    }
    out
}

// ---- circles of modules ----------------------------------------------------------------------

/// The crate's own top-level modules a source file names (`crate::X…` in an import or a path),
/// outside tests.
pub fn modules_named(src: &str) -> BTreeSet<String> {
    struct Named(BTreeSet<String>);
    impl<'ast> Visit<'ast> for Named {
        fn visit_item_use(&mut self, i: &'ast syn::ItemUse) {
            let mut out = Vec::new();
            flatten(&i.tree, &mut Vec::new(), &mut out);
            for (_, full) in out {
                if let [root, module, ..] = full.as_slice()
                    && root == "crate"
                {
                    self.0.insert(module.clone());
                }
            }
        }
        fn visit_path(&mut self, p: &'ast syn::Path) {
            let mut s = p.segments.iter().map(|s| s.ident.to_string());
            if let (Some(root), Some(module)) = (s.next(), s.next())
                && root == "crate"
            {
                self.0.insert(module);
            }
            visit::visit_path(self, p);
        }
        fn visit_macro(&mut self, m: &'ast syn::Macro) {
            visit_macro_args(self, m);
        }
    }
    let Some(ast) = parse_outside_tests(src) else { return BTreeSet::new() };
    let mut named = Named(BTreeSet::new());
    named.visit_file(&ast);
    named.0
}

/// Which top-level module names which, over a crate's `src` directory: a file `src/x.rs` or any
/// file under `src/x/` is module `x`; the crate root names none.
pub fn module_graph(src_dir: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src_dir, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let Ok(rel) = f.strip_prefix(src_dir) else { continue };
        let Some(first) = rel.components().next() else { continue };
        let module = first.as_os_str().to_string_lossy().trim_end_matches(".rs").to_owned();
        if module == "lib" || module == "main" {
            continue;
        }
        let named = modules_named(&std::fs::read_to_string(&f).unwrap_or_default());
        graph.entry(module.clone()).or_default().extend(named.into_iter().filter(|m| *m != module));
    }
    graph
}

/// The circles of a module graph: each set of two or more modules that reach one another,
/// sorted (Tarjan's strongly connected components).
pub fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        out: Vec<Vec<String>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, v: &'g str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut scc = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    scc.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    scc.sort();
                    self.out.push(scc);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.out.sort();
    walk.out
}

/// How many refusals a source makes: each naming of core's `Error::refused` outside test
/// code. The CLI is a shell (argv, printing, exit codes): what it refuses itself can
/// only be about its own environment (a terminal, a program on PATH), every rule's refusal
/// coming from a library, so the workspace check holds its list to the few it names.
pub fn refusals(src: &str) -> usize {
    struct Finder(usize);
    impl<'ast> Visit<'ast> for Finder {
        fn visit_path(&mut self, p: &'ast syn::Path) {
            let names: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
            if names.ends_with(&["Error".to_owned(), "refused".to_owned()]) {
                self.0 += 1;
            }
            visit::visit_path(self, p);
        }
        fn visit_macro(&mut self, m: &'ast syn::Macro) {
            visit_macro_args(self, m);
        }
    }
    let Some(file) = parse_outside_tests(src) else { return 0 };
    let mut f = Finder(0);
    f.visit_file(&file);
    f.0
}

/// The refusals each file under `dir` makes ([`refusals`]), by file (relative to `root`),
/// leaving out files that make none.
pub fn refusals_under(root: &Path, dir: &str) -> BTreeMap<String, usize> {
    let mut files = Vec::new();
    rust_files(&root.join(dir), &mut files);
    files
        .iter()
        .filter_map(|f| {
            let n = refusals(&std::fs::read_to_string(f).unwrap_or_default());
            let shown = f.strip_prefix(root).unwrap_or(f).display().to_string();
            (n > 0).then_some((shown, n))
        })
        .collect()
}
