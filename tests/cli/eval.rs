//! `offshoot eval run` and `eval compare` on the example suite (`examples/eval`),
//! against the scripted server: a model that passes exactly two of the four tasks,
//! then one that passes all.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::server::{Server, Turn};
use crate::support::workspace::TestWorkspace;

fn suite() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/eval")
}

/// A model that does a task only when its goal names one of `able`'s files, then says
/// it is done.
fn model(server: &Server, able: &'static [(&'static str, &'static str)]) {
    server.respond_with(move |request| {
        if request.contains("\"tool_result\"") {
            return Turn::text("done");
        }
        match able.iter().find(|(goal, _)| request.contains(goal)) {
            Some((_, command)) => Turn::bash("c1", command),
            None => Turn::text("I cannot do that."),
        }
    });
}

const TWO: &[(&str, &str)] = &[
    ("hello.txt in this directory", "printf 'hello\\n' > hello.txt"),
    ("numbers 1 to 10 into numbers.txt", "seq 1 10 > numbers.txt"),
];

const ALL: &[(&str, &str)] = &[
    ("hello.txt in this directory", "printf 'hello\\n' > hello.txt"),
    ("numbers 1 to 10 into numbers.txt", "seq 1 10 > numbers.txt"),
    ("Fix calc.sh", "printf '#!/bin/sh\\necho $(( $1 + $2 ))\\n' > calc.sh"),
    ("first line of README.md", "printf '# Project\\n' | cat - README.md > t && mv t README.md"),
];

fn run_eval(t: &TestWorkspace, suite: &Path, config: &Path, out: &Path, bundles: Option<&Path>) -> Value {
    let mut args = vec![
        "eval".to_owned(),
        "run".into(),
        "--suite".into(),
        suite.display().to_string(),
        "--config".into(),
        config.display().to_string(),
        "--runs".into(),
        "3".into(),
        "--jobs".into(),
        "4".into(),
        "--out".into(),
        out.display().to_string(),
    ];
    if let Some(dir) = bundles {
        args.extend(["--bundle-dir".into(), dir.display().to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = t.run_bare(&args);
    run.ok();
    assert!(run.stderr.contains("hello-file run 1: pass"), "{}", run.stderr);
    serde_json::from_slice(&std::fs::read(out).expect("report")).expect("json")
}

fn close(v: &Value, x: f64) -> bool {
    v.as_f64().is_some_and(|f| (f - x).abs() < 1e-3)
}

#[test]
fn a_suite_where_the_model_passes_two_of_four_tasks_is_measured_and_compared() {
    let server = Server::start();
    let mut t = TestWorkspace::new("eval-suite");
    t.env("ANTHROPIC_API_KEY", "test-key");
    let config = t.root.join("eval.toml");
    std::fs::write(&config, format!("[providers.anthropic]\nbase_url = \"{}\"\n", server.url())).expect("config");
    let bundles = t.root.join("failing");

    model(&server, TWO);
    let half = t.root.join("half.json");
    let report = run_eval(&t, &suite(), &config, &half, Some(&bundles));
    let total = &report["total"];
    assert_eq!(
        (total["passed"].as_u64(), total["runs"].as_u64(), total["errors"].as_u64()),
        (Some(6), Some(12), Some(0))
    );
    assert!(close(&total["pass_at_1"], 0.5), "{total}");
    // Wilson 95% of 6 in 12.
    assert!(close(&total["interval"][0], 0.2538) && close(&total["interval"][1], 0.7462), "{total}");
    // pass@3: the two tasks always passed, the two never.
    assert!(close(&total["pass_at_k"]["3"], 0.5), "{total}");
    let category = |name: &str| report["categories"][name]["pass_at_1"].clone();
    assert!(close(&category("files"), 1.0) && close(&category("code"), 0.5) && close(&category("docs"), 0.0));
    assert!(close(&report["tasks"]["fix-add"]["pass_at_1"], 0.0));
    let runs = report["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 12);
    assert!(runs.iter().all(|r| r["tokens"].as_u64().unwrap_or(0) > 0 && r["wall_secs"].as_f64().unwrap_or(0.0) > 0.0));
    // Every failing run, and only those, is bundled.
    let mut bundled: Vec<String> = std::fs::read_dir(&bundles)
        .expect("bundles")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    bundled.sort();
    let expected: Vec<String> = ["fix-add", "readme-title"]
        .iter()
        .flat_map(|task| (1..=3).map(move |n| format!("{task}-{n}.offshoot")))
        .collect();
    assert_eq!(bundled, expected);
    let replayed = t.run_bare(&["replay", bundles.join("fix-add-1.offshoot").to_str().expect("utf-8")]);
    replayed.ok();

    model(&server, ALL);
    let full = t.root.join("full.json");
    // A suite named relative to where eval runs (its scripts then run elsewhere).
    let relative = Path::new("../../..").join("examples/eval");
    assert!(t.root.join(&relative).join("hello-file").is_dir(), "{}", t.root.display());
    let report = run_eval(&t, &relative, &config, &full, None);
    assert!(close(&report["total"]["pass_at_1"], 1.0), "{}", report["total"]);

    let compared =
        t.run_bare(&["--json", "eval", "compare", half.to_str().expect("utf-8"), full.to_str().expect("utf-8")]);
    let c: Value = serde_json::from_str(compared.ok().trim()).expect("json");
    assert!(close(&c["total"]["delta"], 0.5), "{c}");
    assert_eq!(c["paired_runs"]["b_better"], 6);
    assert_eq!(c["paired_runs"]["a_better"], 0);
    assert!(close(&c["paired_runs"]["p_value"], 0.03125), "McNemar exact: 2 * 0.5^6");
    assert_eq!(c["tasks_test"]["b_better"], 2);
    assert!(close(&c["categories"]["docs"]["delta"], 1.0));
    let text = t.run_bare(&["eval", "compare", half.to_str().expect("utf-8"), full.to_str().expect("utf-8")]);
    assert!(text.ok().contains("p = 0.0313"), "{}", text.stdout);
    // Suites that differ are said to, and compared on the tasks both ran.
    let mut fewer: Value = serde_json::from_slice(&std::fs::read(&full).expect("full")).expect("json");
    fewer["tasks"].as_object_mut().expect("tasks").remove("readme-title");
    fewer["runs"].as_array_mut().expect("runs").retain(|r| r["task"] != "readme-title");
    let fewer_path = t.root.join("fewer.json");
    std::fs::write(&fewer_path, fewer.to_string()).expect("write");
    let differ = t.run_bare(&["eval", "compare", half.to_str().expect("utf-8"), fewer_path.to_str().expect("utf-8")]);
    assert!(differ.ok().contains("the suites differ: only in a: readme-title"), "{}", differ.stdout);
}

#[test]
fn runs_whose_provider_is_down_are_errors_not_fails() {
    let mut t = TestWorkspace::new("eval-down");
    t.env("ANTHROPIC_API_KEY", "test-key");
    let config = t.root.join("down.toml");
    std::fs::write(&config, "[providers.anthropic]\nbase_url = \"http://127.0.0.1:9\"\n\n[retry]\nmax_attempts = 1\n")
        .expect("config");
    let out = t.root.join("down.json");
    let run = t.run_bare(&[
        "eval",
        "run",
        "--suite",
        suite().to_str().expect("utf-8"),
        "--config",
        config.to_str().expect("utf-8"),
        "--jobs",
        "4",
        "--out",
        out.to_str().expect("utf-8"),
    ]);
    // Every run erred: nothing was judged, and the suite's run fails saying so.
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("hello-file run 1: error"), "{}", run.stderr);
    let report: Value = serde_json::from_slice(&std::fs::read(&out).expect("report")).expect("json");
    let total = &report["total"];
    assert_eq!(
        (total["runs"].as_u64(), total["passed"].as_u64(), total["errors"].as_u64()),
        (Some(0), Some(0), Some(4))
    );
    assert!(report["runs"][0]["detail"].as_str().is_some_and(|d| d.contains("127.0.0.1:9")), "{}", report["runs"][0]);
    assert!(run.stderr.contains("every run (4) ended in an error"), "{}", run.stderr);

    // Such a report has nothing to compare: refused, not a table of zeros.
    let r = out.to_str().expect("utf-8");
    let compared = t.run_bare(&["eval", "compare", r, r]);
    assert_eq!(compared.code, 2, "{}{}", compared.stdout, compared.stderr);
    assert!(compared.stderr.contains("nothing to compare"), "{}", compared.stderr);
    assert!(compared.stdout.is_empty(), "{}", compared.stdout);
}

#[test]
fn a_suite_that_is_not_one_is_refused_naming_the_file_and_the_rule() {
    let t = TestWorkspace::new("eval-bad-suite");
    let suite = t.root.join("suite");
    std::fs::create_dir_all(suite.join("one")).expect("task");
    std::fs::write(suite.join("one/prompt.md"), "do it").expect("prompt");
    let run = t.run_bare(&["eval", "run", "--suite", suite.to_str().expect("utf-8")]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("one/check") && run.stderr.contains("executable"), "{}", run.stderr);
    let missing = t.run_bare(&["eval", "compare", "/nonexistent/a.json", "/nonexistent/b.json"]);
    assert_eq!(missing.code, 2, "{}", missing.stderr);
}

#[test]
fn runs_at_work_together_cannot_read_each_others_answers() {
    let server = Server::start();
    let mut t = TestWorkspace::new("eval-apart");
    t.env("ANTHROPIC_API_KEY", "test-key");
    let suite = t.root.join("suite");
    for (task, goal, check) in [
        ("hide", "HIDE-TASK", "#!/bin/sh\ngrep -q SECRET-ANSWER secret.txt\n"),
        ("spy", "SPY-TASK", "#!/bin/sh\ntest -f found.txt && ! grep -q SECRET-ANSWER found.txt\n"),
    ] {
        std::fs::create_dir_all(suite.join(task)).expect("task");
        std::fs::write(suite.join(task).join("prompt.md"), goal).expect("prompt");
        let path = suite.join(task).join("check");
        std::fs::write(&path, check).expect("check");
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    }
    server.respond_with(|request| {
        if request.contains("\"tool_result\"") {
            Turn::text("done")
        } else if request.contains("HIDE-TASK") {
            Turn::bash("c1", "echo SECRET-ANSWER > secret.txt && sleep 4")
        } else {
            // Looks for the other run's answer beside its own workspace while it is there
            // (its name guessed: a directory it may not list).
            Turn::bash(
                "c1",
                "sleep 2; cat \"$OFFSHOOT_WORKSPACE\"/../hide-1/agents/*/secret.txt > found.txt 2>&1; true",
            )
        }
    });
    let config = t.root.join("eval.toml");
    std::fs::write(&config, format!("[providers.anthropic]\nbase_url = \"{}\"\n", server.url())).expect("config");
    let out = t.root.join("apart.json");
    let run = t.eval_run(&suite, &[&config], &out, &["--jobs", "2"]);
    run.ok();
    let report: Value = serde_json::from_slice(&std::fs::read(&out).expect("report")).expect("json");
    assert_eq!(report["tasks"]["hide"]["passed"], 1, "{}", report["runs"]);
    assert_eq!(report["tasks"]["spy"]["passed"], 1, "the spy read the other run's answer: {}", report["runs"]);
}

#[test]
fn ctrl_c_stops_the_runs_reports_those_that_ended_and_leaves_nothing_behind() {
    let server = Server::start();
    server.latency(std::time::Duration::from_secs(30));
    server.endless_text("done");
    let mut t = TestWorkspace::new("eval-interrupted");
    t.env("ANTHROPIC_API_KEY", "test-key");
    let config = t.root.join("eval.toml");
    std::fs::write(&config, format!("[providers.anthropic]\nbase_url = \"{}\"\n", server.url())).expect("config");
    let out = t.root.join("stopped.json");
    let mut command = t.command_bare();
    command
        .args(["eval", "run", "--suite"])
        .arg(suite())
        .arg("--config")
        .arg(&config)
        .args(["--jobs", "2", "--out"])
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = command.spawn().expect("eval");
    // Both agents at work, waiting on the model.
    crate::support::wait::wait_for("two model calls", || server.requests().len() >= 2);
    let started = std::time::Instant::now();
    let pid = child.id();
    let sent = std::process::Command::new("kill").args(["-INT", &pid.to_string()]).status().expect("kill");
    assert!(sent.success());
    let status = child.wait().expect("wait");
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "took {:?}", started.elapsed());
    assert_eq!(status.code(), Some(1));
    let report: Value = serde_json::from_slice(&std::fs::read(&out).expect("a report of what ended")).expect("json");
    assert!(report["runs"].as_array().expect("runs").len() <= 2, "no run started after the stop");
    // No agent left at work, nothing left in the data root's workspaces or the temp dir.
    let workspaces = t.home.join("workspaces");
    let left: Vec<_> = std::fs::read_dir(&workspaces).into_iter().flatten().flatten().map(|e| e.path()).collect();
    assert!(left.iter().all(|p| !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(".eval-"))), "{left:?}");
    let scratch = std::fs::read_dir(std::env::temp_dir())
        .expect("tmp")
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with(&format!("offshoot-eval-{pid}-")));
    assert!(!scratch, "the scratch directory went");
    // (This test's: other tests' evals may be at work beside it.)
    let mine = workspaces.join(".eval-").display().to_string();
    let agents_at_work = std::fs::read_dir("/proc").expect("proc").flatten().any(|e| {
        std::fs::read(e.path().join("cmdline")).is_ok_and(|c| {
            let line = String::from_utf8_lossy(&c).replace('\0', " ");
            line.contains(&mine) && line.contains("prompt")
        })
    });
    assert!(!agents_at_work, "an agent's process outlived the stop");
}
