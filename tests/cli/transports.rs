//! ssh and https remotes, carried by offshoot's own subtransports under libgit2, against
//! git's own servers: `git-upload-pack` and `git-receive-pack` reached through an `ssh`
//! stand-in that runs them here (named by `GIT_SSH_COMMAND`, as git honours it), and
//! `git http-backend` behind TLS and Basic authentication (`support/git_https.py`).

use std::path::Path;
use std::process::Command;

use crate::remote::{
    described, each_result_once, fleet_at, machine_with, made_from, served_root, spawn_worker, stop_worker, tree_done,
};
use crate::support::https::HttpsGit;
use crate::support::server::Turn;
use crate::support::workspace::{Dialect, TestWorkspace};

/// What the commands of a workspace reaching `root` over the stand-in need.
fn ssh_env(root: &Path) -> Vec<(String, String)> {
    crate::support::ssh::stand_in(root, root)
}

fn pairs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

fn rev_parse(git_dir: &Path, name: &str) -> String {
    let out = Command::new("git").arg("--git-dir").arg(git_dir).args(["rev-parse", name]).output().expect("git");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn agents_travel_over_ssh_as_git_would_carry_them_and_a_failing_ssh_is_said() {
    let root = served_root("ssh-sync");
    let env = ssh_env(&root);
    let (server, mut laptop) = TestWorkspace::served("ssh-laptop", Dialect::Anthropic);
    for (k, v) in pairs(&env) {
        laptop.env(k, v);
    }
    server.push_turns([Turn::bash("b1", "echo hi > hi.txt"), Turn::text("said hi")]);
    laptop.run(&["prompt", "--name", "Solo", "say hi"]).ok();
    // scp-like: the path as written, relative to the login's home.
    laptop.run(&["remote", "add", "origin", "fakehost:fleet.git"]).ok();
    laptop.run(&["push"]).ok();
    let id = laptop.id_of("Solo");
    let branch = format!("refs/heads/agents/{id}");
    assert_eq!(rev_parse(&root.join("fleet.git"), &branch), laptop.git(&["rev-parse", &branch]).trim());

    // Another machine, from an ssh:// URL with a user and a port.
    let served = root.join("fleet.git");
    let mut other = TestWorkspace::new("ssh-other");
    for (k, v) in pairs(&env) {
        other.env(k, v);
    }
    made_from(&mut other, &format!("ssh://me@fakehost:2222{}", served.display())).ok();
    other.env("ANTHROPIC_API_KEY", "test-key");
    assert_eq!(described(&other), described(&laptop));
    let said = std::fs::read_to_string(root.join("ssh.log")).expect("ssh log");
    assert!(said.contains("fakehost git-receive-pack 'fleet.git'"), "{said}");
    assert!(!said.contains("keys=1"), "a provider's key reached ssh: {said}");
    assert!(said.contains(&format!("-p 2222 me@fakehost git-upload-pack '{}'", served.display())), "{said}");

    // A host ssh cannot reach: ssh's own words, then how it ended; nothing half done.
    laptop.run(&["remote", "add", "broken", "nowhere:fleet.git"]).ok();
    let failed = laptop.run(&["push", "broken"]);
    assert_ne!(failed.code, 0, "{}", failed.stderr);
    assert!(failed.stderr.contains("Connection refused"), "{}", failed.stderr);
    assert!(failed.stderr.contains("ssh to nowhere ended with exit code 255"), "{}", failed.stderr);
    assert!(!laptop.ws.join("repo.git/mirrors/broken").exists());
    laptop.run(&["doctor"]).ok();
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_worker_over_ssh_drives_what_a_laptop_hands_over() {
    let root = served_root("ssh-fleet");
    let env = ssh_env(&root);
    let url = "fakehost:fleet.git";
    let (_server, laptop) = fleet_at("ssh-fleet", 2, url, &pairs(&env));
    let w = machine_with("ssh-fleet-worker", url, &laptop, &pairs(&env));
    let worker = spawn_worker(&w, "w1", 3_000);
    laptop.run(&["prompt", "--on", "origin", "--name", "Lead", "lead the kids"]).ok();
    crate::support::wait::wait_for_within("the tree done over ssh", std::time::Duration::from_secs(60), || {
        tree_done(&laptop, 2)
    });
    stop_worker(worker);
    each_result_once(&laptop, "Lead", 2);
    // The worker's claims and branches went over ssh too.
    let said = std::fs::read_to_string(root.join("ssh.log")).expect("ssh log");
    assert!(said.matches("git-receive-pack 'fleet.git'").count() > 4, "{said}");
    for t in [&laptop, &w] {
        t.run(&["doctor"]).ok();
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn agents_travel_over_https_trusting_the_roots_named_and_asking_the_users_credential_helper() {
    let root = served_root("https-sync");
    let https = HttpsGit::start(&root, "fleet:s3cret");
    let url = https.url("fleet.git");
    let (server, mut laptop) = TestWorkspace::served("https-laptop", Dialect::Anthropic);
    laptop.env("GIT_TERMINAL_PROMPT", "0");
    server.push_turns([Turn::bash("b1", "echo hi > hi.txt"), Turn::text("said hi")]);
    laptop.run(&["prompt", "--name", "Solo", "say hi"]).ok();
    laptop.run(&["remote", "add", "origin", &url]).ok();

    // A server no trusted root vouches for is refused.
    let untrusted = laptop.run(&["push"]);
    assert_ne!(untrusted.code, 0, "{}", untrusted.stderr);
    assert!(untrusted.stderr.contains("certificate"), "{}", untrusted.stderr);
    assert!(untrusted.stderr.contains("GIT_SSL_CAINFO"), "the way out is named: {}", untrusted.stderr);
    let ca = crate::support::https::ca();
    laptop.env("GIT_SSL_CAINFO", ca.to_str().expect("utf-8"));

    // Trusted, but no credentials anywhere: said so.
    let anonymous = laptop.run(&["push"]);
    assert_ne!(anonymous.code, 0, "{}", anonymous.stderr);
    assert!(anonymous.stderr.contains("asks for credentials"), "{}", anonymous.stderr);

    // The user's credential helper (git's `store`) has them.
    let store = root.join("credentials");
    let gitconfig = root.join("gitconfig");
    std::fs::write(&gitconfig, format!("[credential]\n\thelper = store --file={}\n", store.display())).expect("config");
    std::fs::write(&store, format!("https://fleet:s3cret@127.0.0.1:{}\n", https.port)).expect("store");
    laptop.env("GIT_CONFIG_GLOBAL", gitconfig.to_str().expect("utf-8"));
    laptop.run(&["push"]).ok();
    let id = laptop.id_of("Solo");
    let branch = format!("refs/heads/agents/{id}");
    assert_eq!(rev_parse(&root.join("fleet.git"), &branch), laptop.git(&["rev-parse", &branch]).trim());
    let mut other = TestWorkspace::new("https-other");
    other.env("GIT_SSL_CAINFO", ca.to_str().expect("utf-8"));
    other.env("GIT_CONFIG_GLOBAL", gitconfig.to_str().expect("utf-8"));
    made_from(&mut other, &url).ok();
    other.env("ANTHROPIC_API_KEY", "test-key");
    assert_eq!(described(&other), described(&laptop));

    // Credentials the server refuses: said, and the helper told to forget them.
    std::fs::write(&store, format!("https://fleet:wrong@127.0.0.1:{}\n", https.port)).expect("store");
    let refused = laptop.run(&["pull"]);
    assert_ne!(refused.code, 0, "{}", refused.stderr);
    assert!(refused.stderr.contains("refused the credentials"), "{}", refused.stderr);
    assert!(!std::fs::read_to_string(&store).unwrap_or_default().contains("wrong"), "the helper still has them");
    laptop.run(&["doctor"]).ok();
    let _ = std::fs::remove_dir_all(&root);
}
