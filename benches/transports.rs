#![expect(clippy::print_stdout, reason = "a benchmark's report is its output")]

//! Remote transports: what `push`, `pull` and `new --from` cost over `git://` (libgit2's
//! own transport, to `git daemon`), ssh (ours: the system's `ssh` process and its pipes;
//! here a stand-in named by `GIT_SSH_COMMAND` running `git-upload-pack` and
//! `git-receive-pack` on this machine, so no network and no ssh crypto) and https (ours:
//! ureq and rustls to `git http-backend` behind python's TLS server, one request per
//! exchange, Basic authentication through git's `store` credential helper). AGENTS agents
//! run first on the laptop (one scripted model call each), so a push carries their
//! branches, step records and marks. For each transport: the first push (everything),
//! a push with nothing new, `new --from` (a whole fetch and a workspace made) and a pull
//! with nothing new — the last two the median of REPEATS.
//!
//! Run: `cargo bench --bench transports -- [AGENTS] [REPEATS]` (default 50 5).

#[path = "../tests/cli/support/clean.rs"]
mod clean;
#[path = "../tests/cli/support/daemon.rs"]
mod daemon;
#[path = "../tests/cli/support/https.rs"]
mod https;
#[path = "../tests/cli/support/server.rs"]
mod server;
#[path = "../tests/cli/support/ssh.rs"]
mod ssh;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// What a transport's commands need in their environment.
type Env = Vec<(String, String)>;

struct Bench {
    root: PathBuf,
    home: PathBuf,
}

impl Bench {
    fn command(&self, env: &[(String, String)]) -> Command {
        let mut c = clean::offshoot(&self.home, &self.root);
        c.env("GIT_TERMINAL_PROMPT", "0").env("ANTHROPIC_API_KEY", "bench-key");
        for (k, v) in env {
            c.env(k, v);
        }
        c
    }

    /// Runs `args`; how long it took, in milliseconds.
    fn timed(&self, env: &[(String, String)], args: &[&str]) -> f64 {
        let started = Instant::now();
        let out = self.command(env).args(args).output().expect("offshoot");
        assert!(out.status.success(), "offshoot {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        started.elapsed().as_secs_f64() * 1000.0
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn bare(path: &Path) {
    let init = Command::new("git").arg("init").arg("-q").arg("--bare").arg(path).status().expect("git");
    assert!(init.success());
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let (agents, repeats) = (args.first().copied().unwrap_or(50), args.get(1).copied().unwrap_or(5).max(1));
    let root = std::env::temp_dir().join(format!("offshoot-bench-transports-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let (served, home) = (root.join("served"), root.join("home"));
    std::fs::create_dir_all(&served).expect("served");
    std::fs::create_dir_all(&home).expect("home");
    let bench = Bench { root: root.clone(), home: home.clone() };
    let server = server::Server::start_with(false);
    server.endless_text("done");

    let laptop = root.join("laptop");
    let laptop_arg = laptop.to_str().expect("utf-8").to_owned();
    bench.timed(&[], &["new", &laptop_arg]);
    bench.timed(&[], &["-w", &laptop_arg, "config", "set", "providers.anthropic.base_url", &server.url()]);
    for n in 0..agents {
        bench.timed(&[], &["-w", &laptop_arg, "prompt", "--name", &format!("Agent{n}"), "Say done."]);
    }

    // The transports, each with its remote and what its commands need.
    for name in ["warm.git", "git.git", "ssh.git", "https.git"] {
        bare(&served.join(name));
    }
    let daemon = daemon::Daemon::start(&served);
    // The laptop's step records are gathered at its first push: not any transport's cost.
    bench.timed(&[], &["-w", &laptop_arg, "remote", "add", "warm", &daemon.url("warm.git")]);
    bench.timed(&[], &["-w", &laptop_arg, "push", "warm"]);
    let https = https::HttpsGit::start(&served, "bench:s3cret");
    let store = root.join("credentials");
    std::fs::write(&store, format!("https://bench:s3cret@127.0.0.1:{}\n", https.port)).expect("store");
    let gitconfig = root.join("gitconfig");
    std::fs::write(&gitconfig, format!("[credential]\n\thelper = store --file={}\n", store.display())).expect("config");
    let text = |p: &Path| p.to_str().expect("utf-8").to_owned();
    let transports: Vec<(&str, String, Env)> = vec![
        ("git://", daemon.url("git.git"), Vec::new()),
        ("ssh (stand-in)", "benchhost:ssh.git".to_owned(), ssh::stand_in(&root, &served)),
        (
            "https",
            https.url("https.git"),
            vec![("GIT_SSL_CAINFO".into(), text(&https::ca())), ("GIT_CONFIG_GLOBAL".into(), text(&gitconfig))],
        ),
    ];
    println!("transports: {agents} agents pushed, medians of {repeats}");
    println!();
    println!("transport        first push ms  push (nothing new) ms  new --from ms  pull (nothing new) ms");
    for (i, (label, url, env)) in transports.iter().enumerate() {
        let remote = format!("r{i}");
        bench.timed(env, &["-w", &laptop_arg, "remote", "add", &remote, url]);
        let first = bench.timed(env, &["-w", &laptop_arg, "push", &remote]);
        let again = median((0..repeats).map(|_| bench.timed(env, &["-w", &laptop_arg, "push", &remote])).collect());
        let made: Vec<f64> = (0..repeats)
            .map(|r| {
                let ws = root.join(format!("from-{i}-{r}"));
                let took = bench.timed(env, &["new", "--from", url, &text(&ws)]);
                if r + 1 < repeats {
                    let _ = std::fs::remove_dir_all(&ws);
                }
                took
            })
            .collect();
        let ws = text(&root.join(format!("from-{i}-{}", repeats - 1)));
        let pulled = median((0..repeats).map(|_| bench.timed(env, &["-w", &ws, "pull"])).collect());
        println!("{label:<16} {first:>13.0}  {again:>21.0}  {:>13.0}  {pulled:>21.0}", median(made));
    }
    drop(https);
    drop(daemon);
    let _ = std::fs::remove_dir_all(&root);
}
