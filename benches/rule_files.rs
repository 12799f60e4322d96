#![expect(clippy::print_stdout, reason = "a benchmark's report is its output")]

//! What a full scan's check of rule files costs (`.gitignore` and `.gitattributes`
//! that are not files are removed before libgit2 reads them): a directory of 1,200
//! work directories, with and without an ignored `node_modules/` of 12,000 more.
//!
//! Run: `cargo bench --bench rule_files -- [ROUNDS]` (default 15).

#[path = "support/median.rs"]
mod median;

use std::path::Path;
use std::time::{Duration, Instant};

use infra::git::{Repo, Scan, Tracked, TreeEdit};
use median::median_ms;

fn main() {
    let rounds: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(15);
    let dir = std::env::temp_dir().join(format!("offshoot-bench-rule-files-{}", std::process::id()));
    let repo = Repo::init(&dir.join("repo.git")).expect("init");
    let edits = [
        TreeEdit::Write { path: ".offshoot/goal.md".into(), bytes: b"goal".to_vec() },
        TreeEdit::Write { path: ".gitignore".into(), bytes: b"node_modules/\n".to_vec() },
    ];
    let first = repo.commit_edits(&[], None, &edits, "dispatch").expect("commit");
    repo.create_branch("agents/a", first, "dispatch").expect("branch");
    let root = dir.join("agents/a");
    std::fs::create_dir_all(&root).expect("dir");
    let tracked = Tracked::open(&dir.join("repo.git"), &root, &dir.join("index"), ".offshoot", ".offshoot/messages")
        .expect("open");
    tracked.checkout(first).expect("checkout");
    fill(&root.join("src"), 200);
    fill(&root.join("node_modules"), 2000);
    let ignored = time(&tracked, rounds);
    std::fs::remove_dir_all(root.join("node_modules")).expect("remove");
    let plain = time(&tracked, rounds);
    println!("rule-file check before a full scan, median of {rounds}:");
    println!("  1,200 work directories + ignored node_modules/ (12,000): {:.2} ms", median_ms(&ignored));
    println!("  1,200 work directories, nothing ignored:                {:.2} ms", median_ms(&plain));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `n` directories of five with a file each under `at`.
fn fill(at: &Path, n: usize) {
    for i in 0..n {
        for j in 0..5 {
            let d = at.join(format!("p{i}/d{j}"));
            std::fs::create_dir_all(&d).expect("dirs");
            std::fs::write(d.join("f"), "x").expect("file");
        }
    }
}

fn time(tracked: &Tracked, rounds: usize) -> Vec<Duration> {
    (0..rounds)
        .map(|_| {
            let started = Instant::now();
            let cleared = tracked.clear_rule_files(Scan::All).expect("check");
            assert!(cleared.is_empty());
            started.elapsed()
        })
        .collect()
}
