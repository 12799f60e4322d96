//! `offshoot bundle` and `offshoot replay`: an agent and those below it in one file,
//! made into a workspace elsewhere (another home) where every log and request reads
//! as it did and the agent goes on; no secret in the file; a bad file refused with
//! nothing left behind.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::support::server::Turn;
use crate::support::workspace::{Dialect, TestWorkspace};

/// A key that looks like one (a placeholder is not looked for).
const KEY: &str = "sk-ant-api03-bundle-test-0123456789abcdef";

/// Every file below `dir`, with its bytes.
fn files_below(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() && !path.is_symlink() {
            out.extend(files_below(&path));
        } else if path.is_file() {
            out.push((path.clone(), std::fs::read(&path).unwrap_or_default()));
        }
    }
    out
}

/// Every object of the repository at `git_dir`, printed whole.
fn all_objects(git_dir: &Path) -> Vec<u8> {
    let out = std::process::Command::new("git")
        .args(["-c", "safe.directory=*", "--git-dir"])
        .arg(git_dir)
        .args(["cat-file", "--batch-all-objects", "--batch"])
        .output()
        .expect("git");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// Nothing a cut-short bundle or replay makes (`.<name>.partial-<pid>`) is left in `dir`.
fn no_partial_left(dir: &Path) {
    let left: Vec<String> = std::fs::read_dir(dir)
        .expect("dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("partial"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

fn holds(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn an_agent_with_children_replays_under_another_home_reads_the_same_and_goes_on() {
    let (server, mut t) = TestWorkspace::served("bundle-tree", Dialect::Anthropic);
    t.env("ANTHROPIC_API_KEY", KEY);
    server.push_turns([
        Turn::tool("d1", "dispatch", json!({"role": "worker", "goal": "write kid.txt", "name": "Kid"})),
        Turn::text("dispatched"),
    ]);
    server.push_for("Kid", [Turn::bash("k1", "echo kid > kid.txt && echo $ANTHROPIC_API_KEY"), Turn::text("kid done")]);
    server.push_turns([Turn::text("lead done")]);
    t.run(&["prompt", "--name", "Lead", "lead the work"]).ok();
    let (lead, kid) = (t.id_of("Lead"), t.id_of("Kid"));
    let file = t.root.join("lead.offshoot");
    let made = t.run(&["bundle", "Lead", file.to_str().expect("utf-8")]);
    made.ok();
    assert!(made.stderr.contains("bundled 2 agents"), "{}", made.stderr);
    assert!(
        made.stderr.contains("no secret in it") && made.stderr.contains("ANTHROPIC_API_KEY"),
        "it says which secrets it looked for: {}",
        made.stderr
    );
    let again = t.run(&["bundle", "Lead", file.to_str().expect("utf-8")]);
    assert_eq!(again.code, 2, "an existing file is not replaced: {}", again.stderr);
    // A file cut short is refused, and leaves nothing.
    let bytes = std::fs::read(&file).expect("bundle");
    let cut = t.root.join("cut.offshoot");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).expect("cut");
    let into = t.root.join("from-cut");
    let refused = t.run_bare(&["replay", cut.to_str().expect("utf-8"), "--into", into.to_str().expect("utf-8")]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(refused.stderr.contains("is not an offshoot bundle"), "{}", refused.stderr);
    assert!(!into.exists());

    // Elsewhere: another home, the same key in its environment.
    let mut other = TestWorkspace::new("bundle-elsewhere");
    other.env("ANTHROPIC_API_KEY", KEY);
    // This user's own way to the provider (the bundle's config named the same server by
    // its base_url; a replay takes the replaying user's providers, not the bundle's).
    other.env("ANTHROPIC_BASE_URL", &server.url());
    let replayed = other.run_bare(&["replay", file.to_str().expect("utf-8")]);
    let place = PathBuf::from(replayed.ok().trim());
    assert!(place.starts_with(&other.home), "under the other home's data root: {}", place.display());
    let w = place.to_str().expect("utf-8").to_owned();
    for id in [&lead, &kid] {
        assert_eq!(other.run_bare(&["-w", &w, "log", id]).ok(), t.run(&["log", id]).ok(), "log of {id}");
        let steps = t.step_records(id).len();
        assert!(steps >= 2);
        for step in 1..=steps {
            let n = step.to_string();
            let here = t.run(&["show", id, "--step", &n, "--request"]).ok().to_owned();
            assert_eq!(other.run_bare(&["-w", &w, "show", id, "--step", &n, "--request"]).ok(), here, "{id} step {n}");
        }
    }
    assert_eq!(
        other.run_bare(&["-w", &w, "tree", &lead]).ok().lines().count(),
        t.run(&["tree", &lead]).ok().lines().count()
    );
    other.run_bare(&["-w", &w, "doctor"]).ok();
    let config = std::process::Command::new("git")
        .args(["-c", "safe.directory=*", "--git-dir"])
        .arg(place.join("repo.git"))
        .args(["show", "config/default:offshoot.toml"])
        .output()
        .expect("git");
    let config = String::from_utf8_lossy(&config.stdout).into_owned();
    assert!(
        config.contains("https://api.anthropic.com") && !config.contains(&server.url()),
        "the replayed lineage's last config has this user's providers: {config}"
    );
    // No key anywhere in what came over.
    assert!(!holds(&std::fs::read(&file).expect("file"), KEY));
    for git in ["repo.git", "project.git"] {
        assert!(!holds(&all_objects(&place.join(git)), KEY), "the key is in an object of {git}");
    }
    for (path, bytes) in files_below(&place) {
        assert!(!holds(&bytes, KEY), "the key is in {}", path.display());
    }

    // It goes on there, with the keys of the one who replayed it.
    server.push_turns([Turn::bash("c1", "cat kid.txt 2>/dev/null; echo on"), Turn::text("continued elsewhere")]);
    let sent = other.run_bare(&["-w", &w, "send", "Lead", "go on"]);
    assert!(sent.ok().contains("continued elsewhere"), "{}", sent.stderr);
    let last = server.requests().last().cloned().expect("request");
    assert_eq!(last.header("x-api-key"), Some(KEY));
    let ran = other.run_bare(&["-w", &w, "run", "Lead"]);
    assert_eq!(ran.code, 0, "nothing left to do is fine: {}", ran.stderr);
}

#[test]
fn a_bundle_with_a_secret_in_its_history_or_a_bad_file_is_refused_and_nothing_is_left() {
    let (server, t) = TestWorkspace::served("bundle-refused", Dialect::Anthropic);
    // A literal header value is in the config every later agent descends from.
    t.run(&[
        "mcp",
        "add",
        "remote",
        "--url",
        "http://127.0.0.1:9/mcp",
        "--header",
        "X-Api-Key=literal-secret-0123456789",
    ])
    .ok();
    server.push_turns([Turn::text("done")]);
    t.run(&["prompt", "--name", "Held", "work"]).ok();
    let file = t.root.join("held.offshoot");
    let refused = t.run(&["bundle", "Held", file.to_str().expect("utf-8")]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("not bundled") && refused.stderr.contains("remote header X-Api-Key"),
        "{}",
        refused.stderr
    );
    assert!(!file.exists(), "nothing written");
    no_partial_left(&t.root);

    // Files that are not bundles.
    let other = TestWorkspace::new("bundle-bad-files");
    let missing = other.run_bare(&["replay", "/nonexistent/x.offshoot"]);
    assert_eq!(missing.code, 2);
    assert!(missing.stderr.contains("there is no such file"), "{}", missing.stderr);
    let garbage = other.root.join("garbage.offshoot");
    std::fs::write(&garbage, b"not an archive at all").expect("write");
    let into = other.root.join("replayed");
    let bad = other.run_bare(&["replay", garbage.to_str().expect("utf-8"), "--into", into.to_str().expect("utf-8")]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("is not an offshoot bundle"), "{}", bad.stderr);
    assert!(!into.exists(), "nothing half-made");
    no_partial_left(&other.root);
}

/// The entries of the bundle `file`, by name.
fn entries(file: &Path) -> Vec<(String, Vec<u8>)> {
    use std::io::Read;
    let mut archive = tar::Archive::new(std::fs::File::open(file).expect("bundle"));
    let mut out = Vec::new();
    for entry in archive.entries().expect("entries") {
        let mut entry = entry.expect("entry");
        let name = entry.path().expect("name").to_string_lossy().into_owned();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).expect("read");
        out.push((name, bytes));
    }
    out
}

/// A bundle file of `entries`.
fn write_entries(file: &Path, entries: &[(String, Vec<u8>)]) {
    let mut tar = tar::Builder::new(std::fs::File::create(file).expect("file"));
    for (name, bytes) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        tar.append_data(&mut header, name, bytes.as_slice()).expect("append");
    }
    tar.finish().expect("finish");
}

#[test]
fn a_crafted_bundle_cannot_bring_refs_it_does_not_name_nor_a_broken_history_and_secrets_set_for_tools_stay_out() {
    let (server, t) = TestWorkspace::served("bundle-crafted", Dialect::Anthropic);
    server.push_turns([Turn::text("one")]);
    t.run(&["prompt", "--name", "Named", "work"]).ok();
    server.push_turns([Turn::text("two")]);
    t.run(&["prompt", "--name", "Unnamed", "other work"]).ok();
    let (named, unnamed) = (t.id_of("Named"), t.id_of("Unnamed"));
    let file = t.root.join("named.offshoot");
    t.run(&["bundle", "Named", file.to_str().expect("utf-8")]).ok();
    let good = entries(&file);
    let replace = |name: &str, bytes: Vec<u8>| -> Vec<(String, Vec<u8>)> {
        good.iter().map(|(n, b)| (n.clone(), if n == name { bytes.clone() } else { b.clone() })).collect()
    };
    let git_bundle = |refs: &[&str]| -> Vec<u8> {
        let out = t.root.join("crafted.bundle");
        let _ = std::fs::remove_file(&out);
        let mut args = vec!["bundle", "create", out.to_str().expect("utf-8")];
        args.extend(refs);
        t.git(&args);
        std::fs::read(&out).expect("bundle")
    };
    let refused = |entries: Vec<(String, Vec<u8>)>, said: &str| {
        let crafted = t.root.join("crafted.offshoot");
        write_entries(&crafted, &entries);
        let into = t.root.join("from-crafted");
        let run = t.run_bare(&["replay", crafted.to_str().expect("utf-8"), "--into", into.to_str().expect("utf-8")]);
        assert_eq!(run.code, 2, "{}", run.stderr);
        assert!(run.stderr.contains(said), "{said}: {}", run.stderr);
        assert!(!into.exists());
    };
    // Another agent's branch smuggled in: it would run on a config nobody rebased.
    let other = git_bundle(&[&format!("agents/{named}"), &format!("agents/{unnamed}"), "config/default"]);
    refused(replace("repo.bundle", other), &format!("holds `refs/heads/agents/{unnamed}`"));
    // A history whose objects are not all there.
    let mut cut = git_bundle(&[&format!("agents/{named}"), "config/default"]);
    let pack = cut.windows(4).position(|w| w == b"PACK").expect("pack");
    cut.truncate(pack + (cut.len() - pack) / 2);
    refused(replace("repo.bundle", cut), "is not an offshoot bundle");
    // The same entry twice.
    let mut twice = good.clone();
    twice.push(good.iter().find(|(n, _)| n.starts_with("steps/")).expect("a record").clone());
    refused(twice, "twice");

    // A value set for tools under a secret name is a secret.
    t.set("tool_env.set.GITHUB_TOKEN", "ghp_secret0123456789abcdef");
    server.push_turns([Turn::text("three")]);
    t.run(&["prompt", "--name", "Later", "later work"]).ok();
    let later = t.root.join("later.offshoot");
    let run = t.run(&["bundle", "Later", later.to_str().expect("utf-8")]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("GITHUB_TOKEN"), "{}", run.stderr);
    assert!(!later.exists());
}
