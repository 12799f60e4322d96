#![expect(clippy::print_stdout, reason = "a benchmark's report is its output")]

//! The grep tool over a 100,000-file tree, through the same entry point the step
//! loop uses. The tree (1,000 directories of 100 small source-like files, 10 of
//! which hold the needle, plus a .gitignore'd directory) is made once and reused.
//!
//! Run: `cargo bench --bench grep -- [FILES]` (default 100000); the tree lives under
//! `OFFSHOOT_BENCH_DIR` (default the system temp directory).

use std::path::PathBuf;
use std::time::Instant;

use infra::tools::{self, ToolEnv};
use serde_json::json;

fn main() {
    let files: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(100_000);
    let base = std::env::var_os("OFFSHOOT_BENCH_DIR").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let root = base.join(format!("offshoot-grep-tree-{files}"));
    let made = Instant::now();
    let fresh = make_tree(&root, files);
    let grep = tools::builtin("grep").expect("grep is built in");
    let env = ToolEnv { cwd: root.clone(), root: root.clone(), ..Default::default() };
    let input = json!({"pattern": "needle_[0-9]+"});
    let mut times = Vec::new();
    let mut summary = String::new();
    for _ in 0..5 {
        let t = Instant::now();
        let out = grep.run(&env, &input).expect("grep runs");
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        summary = out.summary;
    }
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    println!("grep over {files} files in {} ({})", root.display(), if fresh { "made now" } else { "reused" });
    if fresh {
        println!("tree made in {:.1} s", made.elapsed().as_secs_f64());
    }
    println!("result: {summary}");
    let runs: Vec<String> = times.iter().map(|t| format!("{t:.0}")).collect();
    println!("5 runs (ms): {}; median {:.0} ms, best {:.0} ms", runs.join(", "), sorted[2], sorted[0]);
}

/// Makes the tree unless a finished one is there; returns whether it made it.
fn make_tree(root: &std::path::Path, files: usize) -> bool {
    let done = root.join(".complete");
    if done.exists() {
        return false;
    }
    let _ = std::fs::remove_dir_all(root);
    std::fs::create_dir_all(root.join("ignored")).expect("tree root");
    std::fs::write(root.join(".gitignore"), "ignored/\n").expect("gitignore");
    std::fs::write(root.join("ignored/needle_0.txt"), "needle_0 must not be found\n").expect("ignored file");
    let per_dir = 100;
    for i in 0..files {
        let dir = root.join(format!("d{:04}", i / per_dir));
        if i % per_dir == 0 {
            std::fs::create_dir_all(&dir).expect("dir");
        }
        let mut text = format!("// file {i}\nfn f{i}(x: u32) -> u32 {{\n    x + {i}\n}}\n");
        text.push_str(&"// filler line of an ordinary source file\n".repeat(8));
        if i % (files / 10).max(1) == 0 {
            text.push_str(&format!("let needle_{i} = true;\n"));
        }
        std::fs::write(dir.join(format!("f{i}.rs")), text).expect("file");
    }
    std::fs::write(&done, "").expect("marker");
    true
}
