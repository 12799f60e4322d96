//! One ref's compare-and-swap over git's smart protocol, against a real `git daemon
//! --enable=receive-pack` on loopback (scale-out's building block): create-only, update
//! from the expected value, refusal when the ref is elsewhere, and of two racing
//! writers exactly one wins.

use std::path::Path;
use std::process::{Child, Command};

use offshoot::infra::git::remote::{Swap, compare_and_swap};

/// A `git daemon` serving the bare repositories under `base`, writable; killed on drop.
struct Daemon {
    child: Child,
    port: u16,
}

impl Daemon {
    fn start(base: &Path) -> Daemon {
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
        use std::os::unix::process::CommandExt;
        let child = Command::new("git")
            .process_group(0)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .args(["daemon", "--reuseaddr", "--export-all", "--enable=receive-pack", "--listen=127.0.0.1"])
            .arg(format!("--port={port}"))
            .arg(format!("--base-path={}", base.display()))
            .arg(base)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .spawn()
            .expect("git daemon");
        let started = std::time::Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(started.elapsed() < std::time::Duration::from_secs(10), "git daemon did not listen");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Daemon { child, port }
    }

    fn url(&self, repo: &str) -> String {
        format!("git://127.0.0.1:{}/{repo}", self.port)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // The daemon and the upload-pack and receive-pack it started: its whole group.
        let _ = Command::new("kill").args(["-TERM", "--", &format!("-{}", self.child.id())]).status();
        let _ = self.child.wait();
    }
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "safe.directory=*", "--git-dir"])
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn a_ref_moves_on_a_remote_only_from_where_it_was_expected_and_of_two_racers_one_wins() {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("remote-cas-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let (served, local) = (root.join("served"), root.join("local.git"));
    std::fs::create_dir_all(&served).expect("served");
    git(&served.join("shared.git"), &["init", "-q", "--bare"]);
    git(&local, &["init", "-q", "--bare"]);
    let blob = |text: &str| -> git2::Oid {
        git2::Repository::open_bare(&local).expect("local").blob(text.as_bytes()).expect("blob")
    };
    let daemon = Daemon::start(&served);
    let url = daemon.url("shared.git");
    let claim = "refs/offshoot/claims/a";
    let (first, second, third) = (blob("worker 1 until 10"), blob("worker 2 until 20"), blob("worker 3 until 30"));

    // Create-only.
    assert_eq!(compare_and_swap(&local, &url, claim, None, first).expect("create"), Swap::Done);
    assert_eq!(git(&served.join("shared.git"), &["rev-parse", claim]), first.to_string());
    assert_eq!(
        compare_and_swap(&local, &url, claim, None, second).expect("create again"),
        Swap::Moved { found: Some(first) },
        "a second create is refused and says where the ref is"
    );
    // From the expected value only.
    assert_eq!(compare_and_swap(&local, &url, claim, Some(first), second).expect("update"), Swap::Done);
    assert_eq!(
        compare_and_swap(&local, &url, claim, Some(first), third).expect("stale"),
        Swap::Moved { found: Some(second) }
    );
    assert_eq!(git(&served.join("shared.git"), &["rev-parse", claim]), second.to_string());

    // Two writers expecting the same value: exactly one moves it.
    let contenders: Vec<git2::Oid> = (0..2).map(|n| blob(&format!("racer {n}"))).collect();
    let outcomes: Vec<Swap> = std::thread::scope(|scope| {
        let racers: Vec<_> = contenders
            .iter()
            .map(|new| {
                let (local, url) = (&local, &url);
                scope.spawn(move || compare_and_swap(local, url, claim, Some(second), *new).expect("race"))
            })
            .collect();
        racers.into_iter().map(|r| r.join().expect("racer")).collect()
    });
    assert_eq!(outcomes.iter().filter(|o| **o == Swap::Done).count(), 1, "{outcomes:?}");
    let winner = git(&served.join("shared.git"), &["rev-parse", claim]);
    assert!(contenders.iter().any(|c| c.to_string() == winner));
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn remotes_are_added_listed_and_removed_and_bad_ones_refused_naming_the_rule() {
    let t = crate::support::workspace::TestWorkspace::new("remote-verbs");
    let added = t.run(&["remote", "add", "fleet", "git://127.0.0.1:9418/shared.git"]);
    added.ok();
    assert!(added.stderr.contains("added remote `fleet`"), "{}", added.stderr);
    t.run(&["remote", "add", "backup", "/srv/git/shared.git"]).ok();
    assert_eq!(
        t.run(&["remote", "list"]).ok(),
        "backup\t/srv/git/shared.git\nfleet\tgit://127.0.0.1:9418/shared.git\n"
    );
    let listed: Vec<serde_json::Value> =
        t.run(&["--json", "remote", "list"]).ok().lines().map(|l| serde_json::from_str(l).expect("json")).collect();
    assert_eq!(listed[1]["url"], "git://127.0.0.1:9418/shared.git");
    for (args, said) in [
        (vec!["remote", "add", "fleet", "git://other/x.git"], "exists already"),
        (vec!["remote", "add", "bad name", "git://h/x.git"], "is not one git takes"),
        (vec!["remote", "add", "bad..name", "git://h/x.git"], "is not one git takes"),
        (vec!["remote", "add", "pw", "https://me:secret@host/x.git"], "may not hold a password"),
        (vec!["remote", "add", "odd", "ftp://host/x.git"], "must use git://"),
        (vec!["remote", "add", "nohost", "git:///x.git"], "has no host"),
        (vec!["remote", "remove", "nowhere"], "there is no remote `nowhere`"),
    ] {
        let run = t.run(&args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(said), "{args:?}: {}", run.stderr);
    }
    assert_eq!(t.run(&["remote", "list"]).ok().lines().count(), 2, "nothing was added by a refusal");
    t.run(&["remote", "remove", "backup"]).ok();
    assert_eq!(t.run(&["remote", "list"]).ok(), "fleet\tgit://127.0.0.1:9418/shared.git\n");
    // It is the harness's repository's remote, as plain git sees it.
    assert_eq!(t.git(&["remote", "get-url", "fleet"]).trim(), "git://127.0.0.1:9418/shared.git");
}
