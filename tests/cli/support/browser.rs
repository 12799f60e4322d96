//! Headless Chromium on a page, through tests/serve/browser.py (the DevTools protocol
//! over PyPI's websockets, both unpacked by `.ci/tools`): for the serve tests and the
//! serve bench.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The browser `.ci/tools` unpacked, if it did.
pub fn unpacked() -> Option<PathBuf> {
    Some(root().join("target/test-tools/bin/chromium-headless-shell")).filter(|b| b.exists())
}

/// `browser` on `url` through `steps` (see tests/serve/browser.py): what it saw, a JSON
/// value per step.
pub fn browse(browser: &Path, url: &str, steps: Value) -> Vec<Value> {
    let plan = json!({"browser": browser, "url": url, "steps": steps});
    let mut python = Command::new("python3")
        .arg(root().join("tests/serve/browser.py"))
        .env("PYTHONPATH", root().join("target/test-tools/py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    python.stdin.take().expect("stdin").write_all(plan.to_string().as_bytes()).expect("plan");
    let out = python.wait_with_output().expect("browser");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the browser failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect()
}
