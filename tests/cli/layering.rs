//! The layers point down: cli → engine → domain → infra, never upward; only cli
//! reads the environment; every child process starts in one place, with the
//! environment it is handed.

use std::path::{Path, PathBuf};

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
    out
}

/// The layers a piece of code names through `crate::`: plain paths
/// (`crate::engine::x`) and grouped imports (`use crate::{engine, domain::y}`).
fn layers_named(code: &str) -> Vec<String> {
    let mut named = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let body = &group[..group.find('}').unwrap_or(group.len())];
            for item in body.split(',') {
                let first = item.trim().split("::").next().unwrap_or("").trim();
                if !first.is_empty() {
                    named.push(first.to_owned());
                }
            }
        } else {
            let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
            named.push(rest[..end].to_owned());
        }
    }
    named
}

#[test]
fn no_layer_reaches_upward() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let rules =
        [("infra", &["domain", "engine", "cli"][..]), ("domain", &["engine", "cli"][..]), ("engine", &["cli"][..])];
    let mut violations = Vec::new();
    for (layer, forbidden) in rules {
        for (file, code) in sources(&src.join(layer)) {
            for named in layers_named(&code) {
                if forbidden.contains(&named.as_str()) {
                    violations.push(format!("{}: crate::{named}", file.display()));
                }
            }
        }
    }
    assert!(violations.is_empty(), "upward uses:\n{}", violations.join("\n"));
}

#[test]
fn grouped_imports_are_seen() {
    assert_eq!(layers_named("use crate::{engine, domain::x};\nlet y = crate::cli::run;"), ["engine", "domain", "cli"]);
}

#[test]
fn only_cli_reads_the_environment() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut offenders = Vec::new();
    for layer in ["engine", "domain", "infra"] {
        for (file, code) in sources(&src.join(layer)) {
            if code.contains("std::env") || code.contains("env::var") {
                offenders.push(file.display().to_string());
            }
        }
    }
    assert!(offenders.is_empty(), "environment read outside cli: {offenders:?}");
}

#[test]
fn children_start_in_one_place_with_the_environment_they_are_handed() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let process = src.join("infra/process/mod.rs");
    let mut offenders = Vec::new();
    for (file, code) in sources(&src) {
        let spawns = code.contains("Command::new") || code.contains("process::Command");
        if spawns && file != process {
            offenders.push(file.display().to_string());
        }
    }
    assert!(offenders.is_empty(), "child processes started outside infra::process: {offenders:?}");
    // A child that inherited our environment would read it behind the cli's back.
    let code = std::fs::read_to_string(&process).expect("process.rs");
    assert!(code.contains(".env_clear()"), "infra::process must clear the inherited environment");
}

#[test]
fn the_async_runtime_stays_inside_the_mcp_client() {
    // rmcp needs tokio; everything else stays blocking, so neither is named elsewhere.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let client = src.join("infra/mcp.rs");
    let mut offenders = Vec::new();
    for (file, code) in sources(&src) {
        let named =
            ["tokio::", "rmcp::", "reqwest::", "async fn", "async move", ".await;"].iter().any(|n| code.contains(n));
        if named && file != client {
            offenders.push(file.display().to_string());
        }
    }
    assert!(offenders.is_empty(), "tokio, rmcp or async code outside infra::mcp: {offenders:?}");
}

#[test]
fn file_tools_touch_files_only_through_the_door() {
    // Every file a tool reads or writes for an agent goes through `infra::door`
    // (beneath a directory handle, no link followed, no FIFO opened). `bash` keeps its
    // output records in the harness's step directory, which is not the agent's.
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/infra/tools");
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

/// The engine modules `code` names through `prefix` (`crate::engine::`, or the
/// `super::` that reaches the engine from where the file is): plain and grouped.
fn engine_modules_named(code: &str, prefix: &str) -> Vec<String> {
    let mut named = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        // `super::` inside `super::super::` is not the engine seen from here.
        let before = &rest[..at];
        rest = &rest[at + prefix.len()..];
        if prefix == "super::"
            && (before.ends_with("super::") || before.ends_with(|c: char| c.is_alphanumeric() || c == '_'))
        {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let body = &group[..group.find('}').unwrap_or(group.len())];
            named.extend(body.split(',').map(|i| i.trim().split("::").next().unwrap_or("").trim().to_owned()));
        } else {
            let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
            named.push(rest[..end].to_owned());
        }
    }
    named.retain(|n| !n.is_empty());
    named
}

#[test]
fn no_engine_module_imports_in_a_circle() {
    let engine = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine");
    let module_of = |file: &Path| -> (String, bool) {
        let rel = file.strip_prefix(&engine).expect("under engine");
        let parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
        let top = parts[0].trim_end_matches(".rs").to_owned();
        // A file one level down (`driver/record.rs`) reaches the engine with `super::super::`.
        let nested = parts.len() > 1 && parts[1] != "mod.rs";
        (top, nested)
    };
    let mut edges: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> = Default::default();
    let files = sources(&engine);
    let modules: std::collections::BTreeSet<String> = files.iter().map(|(f, _)| module_of(f).0).collect();
    for (file, code) in &files {
        let (from, nested) = module_of(file);
        let mut named = engine_modules_named(code, "crate::engine::");
        named.extend(engine_modules_named(code, if nested { "super::super::" } else { "super::" }));
        let to = edges.entry(from.clone()).or_default();
        to.extend(named.into_iter().filter(|n| *n != from && modules.contains(n)));
    }
    // A depth-first walk that finds a way back to where it started.
    fn back_to<'a>(
        edges: &'a std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
        start: &str,
        at: &'a str,
        path: &mut Vec<&'a str>,
        seen: &mut std::collections::BTreeSet<&'a str>,
    ) -> bool {
        for next in edges.get(at).into_iter().flatten() {
            if next == start {
                path.push(next);
                return true;
            }
            if seen.insert(next) {
                path.push(next);
                if back_to(edges, start, next, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    for start in edges.keys() {
        let mut path = vec![start.as_str()];
        if back_to(&edges, start, start, &mut path, &mut Default::default()) {
            panic!("engine modules import in a circle: {}", path.join(" → "));
        }
    }
    assert!(edges.get("driver").is_some_and(|d| d.contains("agents")), "the walk sees imports: {edges:?}");
}

#[test]
fn every_test_file_is_part_of_the_test_binary() {
    // A file under tests/cli that no `mod` names is never compiled, so its tests never run.
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cli");
    let mut forgotten = Vec::new();
    for (dir, root) in [(tests.clone(), "main.rs"), (tests.join("support"), "mod.rs")] {
        let declared = std::fs::read_to_string(dir.join(root)).expect("read the module root");
        for entry in std::fs::read_dir(&dir).expect("read tests").flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(stem) = name.strip_suffix(".rs") else { continue };
            if name == root {
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
