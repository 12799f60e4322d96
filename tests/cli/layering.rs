//! The architecture as a test. The layers are crates (cli → engine → domain → infra),
//! so the compiler refuses an upward import; here: each crate's manifest names only
//! the layers below it, the engine's wings stand in their order, no module imports in a
//! circle anywhere, only the cli reads the environment, and every child process starts
//! in one place with the environment it is handed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Each crate's source root, from the top layer down.
fn crates() -> [(&'static str, PathBuf); 4] {
    [
        ("cli", root().join("src")),
        ("engine", root().join("crates/engine/src")),
        ("domain", root().join("crates/domain/src")),
        ("infra", root().join("crates/infra/src")),
    ]
}

/// The engine's wings, from the bottom up: a wing uses only those before it.
const WINGS: [&str; 5] = ["store", "agents", "step", "fleet", "ops"];

/// The non-test code of every source file under `dir`: (path, text).
fn sources(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read src").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") && path.file_name().is_some_and(|n| n != "tests.rs") {
                let text = std::fs::read_to_string(&path).expect("read");
                let code = text.split("#[cfg(test)]").next().unwrap_or("").to_owned();
                out.push((path, code));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn each_layer_depends_only_on_the_layers_below_it() {
    let layers = ["infra", "domain", "engine"];
    for (at, layer) in layers.iter().enumerate() {
        let manifest = std::fs::read_to_string(root().join("crates").join(layer).join("Cargo.toml")).expect("manifest");
        let named: Vec<&str> = manifest
            .lines()
            .filter_map(|l| l.split_once(".workspace = true").map(|(name, _)| name.trim()))
            .filter(|name| layers.contains(name))
            .collect();
        let below = &layers[..at];
        assert!(named.iter().all(|n| below.contains(n)), "crate `{layer}` depends on {named:?}; only {below:?} may be");
    }
}

/// The module paths a piece of code names from `crate::`, `super::` or `self::`, with
/// grouped imports (`use crate::{a::b, c::{d, e}}`) spread out: each as the prefix word
/// and the segments after it.
fn paths_named(code: &str) -> Vec<(String, Vec<String>)> {
    fn spread(prefix: &[String], rest: &str, out: &mut Vec<Vec<String>>) {
        let rest = rest.trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            let (mut depth, mut start) = (0, 0);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        spread(prefix, &group[start..i], out);
                        return;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        spread(prefix, &group[start..i], out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            return;
        }
        let mut segments = prefix.to_vec();
        let mut rest = rest;
        loop {
            let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
            if end == 0 {
                break;
            }
            segments.push(rest[..end].to_owned());
            rest = &rest[end..];
            match rest.strip_prefix("::") {
                Some(next) if next.starts_with('{') => return spread(&segments, next, out),
                Some(next) => rest = next,
                None => break,
            }
        }
        out.push(segments);
    }
    let mut named = Vec::new();
    for word in ["crate::", "super::", "self::"] {
        let mut at = 0;
        while let Some(found) = code[at..].find(word) {
            let start = at + found;
            at = start + word.len();
            // Only where a path starts: not `super::` inside `super::super::`, nor `x::self`.
            let before = code[..start].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let mut paths = Vec::new();
            spread(&[word.trim_end_matches(':').to_owned()], &code[at..], &mut paths);
            named.extend(paths.into_iter().map(|mut p| (p.remove(0), p)));
        }
    }
    named
}

/// A module's path in its crate (`step/driver/record.rs` → `[step, driver, record]`),
/// and whether the file is a folder's own (`mod.rs`, `lib.rs`, `main.rs`).
fn module_of(src: &Path, file: &Path) -> (Vec<String>, bool) {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap_or_default();
    let own = ["mod.rs", "lib.rs", "main.rs"].contains(&last.as_str());
    if !own {
        parts.push(last.trim_end_matches(".rs").to_owned());
    }
    (parts, own)
}

/// The crate path a named path leads to, seen from module `module`.
fn absolute(module: &[String], word: &str, segments: &[String]) -> Vec<String> {
    let mut at: Vec<String> = match word {
        "crate" => Vec::new(),
        "self" => module.to_vec(),
        _ => module[..module.len().saturating_sub(1)].to_vec(),
    };
    let mut segments = segments.iter().peekable();
    while segments.peek().is_some_and(|s| *s == "super") {
        segments.next();
        at.pop();
    }
    at.extend(segments.cloned());
    at
}

/// Every import between two modules of one folder, for each folder of `src`: folder →
/// (from → to). A module's own folder file using its children is no such import.
fn sibling_imports(src: &Path) -> BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> {
    let files = sources(src);
    let units: BTreeSet<Vec<String>> = files.iter().map(|(f, _)| module_of(src, f).0).collect();
    let mut folders: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (file, code) in &files {
        let (module, _) = module_of(src, file);
        for (word, segments) in paths_named(code) {
            let target = absolute(&module, &word, &segments);
            let common = module.iter().zip(&target).take_while(|(a, b)| a == b).count();
            let (Some(from), Some(to)) = (module.get(common), target.get(common)) else { continue };
            // Only modules count (an item of the folder's own file is not a sibling).
            let unit = &target[..=common];
            if !units.iter().any(|u| u.starts_with(unit)) {
                continue;
            }
            folders.entry(module[..common].to_vec()).or_default().entry(from.clone()).or_default().insert(to.clone());
        }
    }
    folders
}

/// A circle among `edges`, if there is one: the modules on it, back to the first.
fn circle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn walk(
        edges: &BTreeMap<String, BTreeSet<String>>,
        at: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == at) {
            let mut found = path[i..].to_vec();
            found.push(at.to_owned());
            return Some(found);
        }
        if !done.insert(at.to_owned()) {
            return None;
        }
        path.push(at.to_owned());
        for next in edges.get(at).into_iter().flatten() {
            if let Some(found) = walk(edges, next, path, done) {
                return Some(found);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    edges.keys().find_map(|start| walk(edges, start, &mut Vec::new(), &mut done))
}

#[test]
fn no_modules_import_each_other_in_a_circle() {
    let mut circles = Vec::new();
    for (layer, src) in crates() {
        for (folder, edges) in sibling_imports(&src) {
            if let Some(found) = circle(&edges) {
                circles.push(format!("{layer} {}: {}", folder.join("/"), found.join(" → ")));
            }
        }
    }
    assert!(circles.is_empty(), "modules importing each other in a circle:\n{}", circles.join("\n"));
    // The walk sees imports at every depth.
    let engine = sibling_imports(&root().join("crates/engine/src"));
    assert!(engine[&Vec::new()]["step"].contains("store"), "{engine:?}");
    assert!(engine[&vec!["step".to_owned()]]["driver"].contains("toolcall"), "{engine:?}");
}

#[test]
fn the_engine_wings_point_down_in_their_order() {
    let engine = sibling_imports(&root().join("crates/engine/src"));
    let top = engine.get(&Vec::new()).cloned().unwrap_or_default();
    let mut wrong = Vec::new();
    for (from, to) in &top {
        let Some(at) = WINGS.iter().position(|w| w == from) else {
            wrong.push(format!("`{from}` is no wing of the engine ({WINGS:?})"));
            continue;
        };
        for target in to {
            if !WINGS[..at].contains(&target.as_str()) {
                wrong.push(format!("{from} → {target}"));
            }
        }
    }
    assert!(wrong.is_empty(), "engine wings reaching up or sideways:\n{}", wrong.join("\n"));
    let folders: BTreeSet<String> = std::fs::read_dir(root().join("crates/engine/src"))
        .expect("engine")
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(folders, WINGS.iter().map(|w| (*w).to_owned()).collect(), "the engine is its wings");
}

#[test]
fn paths_are_read_as_the_compiler_reads_them() {
    let named = paths_named("use crate::{a::b, c::{d, e}};\nlet x = super::super::f::g();\nuse self::h;");
    let want: Vec<(String, Vec<String>)> = [
        ("crate", &["a", "b"][..]),
        ("crate", &["c", "d"]),
        ("crate", &["c", "e"]),
        ("super", &["super", "f", "g"]),
        ("self", &["h"]),
    ]
    .iter()
    .map(|(w, s)| ((*w).to_owned(), s.iter().map(|s| (*s).to_owned()).collect()))
    .collect();
    assert_eq!(named, want);
    let module: Vec<String> = ["step", "driver", "record"].iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(absolute(&module, "super", &["super".into(), "toolcall".into()]), ["step", "toolcall"]);
}

#[test]
fn only_cli_reads_the_environment() {
    let mut offenders = Vec::new();
    for (layer, src) in crates().into_iter().skip(1) {
        for (file, code) in sources(&src) {
            if code.contains("std::env") || code.contains("env::var") {
                offenders.push(format!("{layer}: {}", file.display()));
            }
        }
    }
    assert!(offenders.is_empty(), "environment read outside cli: {offenders:?}");
}

#[test]
fn children_start_in_one_place_with_the_environment_they_are_handed() {
    let process = root().join("crates/infra/src/process/mod.rs");
    let mut offenders = Vec::new();
    for (_, src) in crates() {
        for (file, code) in sources(&src) {
            let spawns = code.contains("Command::new") || code.contains("process::Command");
            if spawns && file != process {
                offenders.push(file.display().to_string());
            }
        }
    }
    assert!(offenders.is_empty(), "child processes started outside infra::process: {offenders:?}");
    // A child that inherited our environment would read it behind the cli's back.
    let code = std::fs::read_to_string(&process).expect("process/mod.rs");
    assert!(code.contains(".env_clear()"), "infra::process must clear the inherited environment");
}

#[test]
fn the_async_runtime_stays_inside_the_mcp_client_and_the_acp_adapter() {
    // rmcp and the ACP crate need tokio; everything else stays blocking, so neither is
    // named elsewhere.
    let client = root().join("crates/infra/src/mcp.rs");
    let acp = root().join("src/cli/acp");
    let mut offenders = Vec::new();
    for (_, src) in crates() {
        for (file, code) in sources(&src) {
            let named = ["tokio::", "rmcp::", "reqwest::", "async fn", "async move", ".await;"]
                .iter()
                .any(|n| code.contains(n));
            if named && file != client && !file.starts_with(&acp) {
                offenders.push(file.display().to_string());
            }
        }
    }
    assert!(offenders.is_empty(), "tokio, rmcp or async code outside infra::mcp and cli::acp: {offenders:?}");
}

#[test]
fn file_tools_touch_files_only_through_the_door() {
    // Every file a tool reads or writes for an agent goes through `infra::door`
    // (beneath a directory handle, no link followed, no FIFO opened). `bash` keeps its
    // output records in the harness's step directory, which is not the agent's.
    let tools = root().join("crates/infra/src/tools");
    let forbidden = [
        "std::fs::read",
        "fs::read_to_string",
        "std::fs::write",
        "File::open",
        "File::create",
        "OpenOptions",
        "create_dir",
        "remove_file",
        "remove_dir",
        "std::fs::rename",
        "std::fs::copy",
        "hard_link",
        "set_permissions",
        "search_path",
    ];
    let mut offenders = Vec::new();
    for (file, code) in sources(&tools) {
        if file.file_name().is_some_and(|n| n == "bash.rs") {
            continue;
        }
        for f in forbidden.iter().filter(|f| code.contains(*f)) {
            offenders.push(format!("{}: {f}", file.display()));
        }
    }
    assert!(offenders.is_empty(), "file tools reaching files around the door:\n{}", offenders.join("\n"));
}

#[test]
fn no_file_or_function_outgrows_its_idea() {
    // A file past 700 lines holds more than one idea; a function past 120 lines, more
    // than one step of one.
    let mut over = Vec::new();
    for (_, src) in crates() {
        for (file, _) in sources(&src) {
            let text = std::fs::read_to_string(&file).expect("read");
            let lines: Vec<&str> = text.lines().collect();
            if lines.len() > 700 {
                over.push(format!("{}: {} lines", file.display(), lines.len()));
            }
            for (i, line) in lines.iter().enumerate() {
                let body = line.trim_start();
                let indent = line.len() - body.len();
                let unqualified = ["pub(crate) ", "pub(super) ", "pub ", "const ", "async ", "unsafe "]
                    .iter()
                    .fold(body, |b, q| b.strip_prefix(q).unwrap_or(b));
                let is_fn = unqualified.starts_with("fn ");
                if !is_fn || line.trim_end().ends_with(';') {
                    continue;
                }
                let close = format!("{}}}", " ".repeat(indent));
                let end = lines[i..].iter().position(|l| l.trim_end() == close).map_or(0, |n| n + 1);
                if end > 120 {
                    over.push(format!("{}:{}: a function of {end} lines", file.display(), i + 1));
                }
            }
        }
    }
    assert!(over.is_empty(), "too long:\n{}", over.join("\n"));
}

#[test]
fn the_harness_refs_are_named_in_one_place() {
    // `refs/offshoot/<kind>/<key>` is made by `infra::git::harness_ref` alone; everyone
    // else names a ref by its mark or shelf (`Mark::Stopped.ref_name(id)`).
    let home = root().join("crates/infra/src/git/marks.rs");
    let mut offenders = Vec::new();
    for (_, src) in crates() {
        for (file, code) in sources(&src) {
            let named = code.lines().any(|l| !l.trim_start().starts_with("//") && l.contains("refs/offshoot"));
            if named && file != home {
                offenders.push(file.display().to_string());
            }
        }
    }
    assert!(offenders.is_empty(), "refs/offshoot/… written by hand: {offenders:?}");
}

#[test]
fn every_test_file_is_part_of_the_test_binary() {
    // A file under tests/cli that no `mod` names is never compiled, so its tests never run.
    let tests = root().join("tests/cli");
    let mut forgotten = Vec::new();
    for (dir, module_root) in [(tests.clone(), "main.rs"), (tests.join("support"), "mod.rs")] {
        let declared = std::fs::read_to_string(dir.join(module_root)).expect("read the module root");
        for entry in std::fs::read_dir(&dir).expect("read tests").flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(stem) = name.strip_suffix(".rs") else { continue };
            if name == module_root {
                continue;
            }
            let named = declared.lines().any(|l| {
                let l = l.trim();
                l == format!("mod {stem};") || l == format!("pub mod {stem};")
            });
            if !named {
                forgotten.push(entry.path().display().to_string());
            }
        }
    }
    assert!(forgotten.is_empty(), "test files no `mod` declares (never compiled): {forgotten:?}");
}
