//! The layers point down: cli → engine → domain → infra, never upward.

use std::path::Path;

fn uses_in(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).expect("read src").flatten() {
        let path = entry.path();
        if path.is_dir() {
            uses_in(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("read");
            for line in text.lines() {
                let line = line.trim();
                if line.starts_with("use crate::") || line.starts_with("pub use crate::") || line.contains(" crate::") {
                    out.push((path.display().to_string(), line.to_owned()));
                }
            }
        }
    }
}

#[test]
fn no_layer_reaches_upward() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let rules =
        [("infra", &["domain", "engine", "cli"][..]), ("domain", &["engine", "cli"][..]), ("engine", &["cli"][..])];
    let mut violations = Vec::new();
    for (layer, forbidden) in rules {
        let mut uses = Vec::new();
        uses_in(&src.join(layer), &mut uses);
        for (file, line) in uses {
            for f in forbidden {
                if line.contains(&format!("crate::{f}")) {
                    violations.push(format!("{file}: {line}"));
                }
            }
        }
    }
    assert!(violations.is_empty(), "upward uses:\n{}", violations.join("\n"));
}

#[test]
fn only_cli_reads_the_environment() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut offenders = Vec::new();
    for layer in ["engine", "domain", "infra"] {
        let mut stack = vec![src.join(layer)];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("read").flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                let text = std::fs::read_to_string(&path).expect("read");
                let code = text.split("#[cfg(test)]").next().unwrap_or("");
                if code.contains("std::env::var") {
                    offenders.push(path.display().to_string());
                }
            }
        }
    }
    assert!(offenders.is_empty(), "environment read outside cli: {offenders:?}");
}
