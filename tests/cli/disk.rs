//! A full disk: a workspace on a small tmpfs (mounted in a user and mount namespace of
//! its own, so no privilege is needed) whose agent fills it. The step fails saying so,
//! the branch stays sound (`doctor`), and once space is freed the agent goes on. And
//! disk that grows with what was said: step records without the request, objects
//! packed as the driver goes, finished records folded into one file each.

use std::process::Command;

use crate::support::server::{Server, Turn};
use crate::support::workspace::{Dialect, TestWorkspace};

#[test]
fn a_long_run_packs_its_objects_and_keeps_no_request_in_its_records() {
    let (server, t) = TestWorkspace::served("disk-packed", Dialect::Anthropic);
    server.endless_steps(80);
    let run = t.run(&["prompt", "--name", "Long", "count"]);
    run.ok();
    let id = t.only_agent();
    assert!(t.step_records(&id).len() >= 80);
    // The driver packed as it went: packs hold what the steps wrote, few objects are
    // left loose, and every object still reads.
    let packs: Vec<_> = std::fs::read_dir(t.ws.join("repo.git/objects/pack"))
        .expect("packs")
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "pack"))
        .collect();
    assert!(!packs.is_empty(), "no pack after 80 steps");
    let counted = t.git(&["count-objects", "-v"]);
    let value = |key: &str| -> u64 {
        counted.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
    };
    // (A batch may wait while an idle-priority packer is starved: up to ~50 steps loose.)
    assert!(value("count:") < 400, "{counted}");
    assert!(value("in-pack:") > 200, "{counted}");
    t.git(&["fsck", "--strict"]);
    t.run(&["doctor"]).ok();
    // No step record holds its request; the last one is shown as it was sent.
    let last = t.step_records(&id).len();
    assert!((1..=last).all(|n| t.step_file(&id, n, "request.json").is_none()));
    // The steps that were over when the driver packed are one file each, which reads as
    // the directory did. (At least the first batch of 31: under load an idle-priority
    // packer may still be at work when the next batch comes, which then waits.)
    let folded = t.step_records(&id).iter().filter(|r| r.is_file()).count();
    assert!(folded >= 31 && folded < last, "{folded} of {last} records folded");
    assert!(t.step_records(&id)[0].is_file());
    assert_eq!(t.step_json(&id, 1, "meta.json")["outcome"], "ok");
    let shown = t.run(&["show", &id, "--step", "1", "--request"]);
    assert_eq!(shown.ok().as_bytes(), &server.requests()[0].raw[..]);
    let first = t.run(&["--json", "show", &id, "--step", "1"]);
    assert!(first.ok().contains("\"outcome\""), "{}", first.stdout);
    let shown = t.run(&["show", &id, "--step", &last.to_string(), "--request"]);
    assert_eq!(shown.ok().as_bytes(), &server.requests()[last - 1].raw[..]);
}

#[test]
fn a_full_disk_fails_the_step_and_corrupts_nothing() {
    let server = Server::start();
    let t = TestWorkspace::new("disk-full");
    server.push_turns([
        Turn::bash("c1", "head -c 30000000 /dev/zero > big; echo wrote"),
        Turn::text("after the space came back"),
    ]);
    let mnt = t.root.join("small");
    std::fs::create_dir_all(&mnt).expect("mount point");
    let bin = env!("CARGO_BIN_EXE_offshoot");
    let ws = mnt.join("ws");
    let (ws, mnt) = (ws.to_str().expect("utf-8"), mnt.to_str().expect("utf-8"));
    let script = format!(
        "set -u\n\
         mount -t tmpfs -o size=6m tmpfs {mnt} || exit 90\n\
         o={bin}\n\
         $o new {ws} >/dev/null 2>&1 || exit 91\n\
         $o -w {ws} config set providers.anthropic.base_url {url} >/dev/null 2>&1 || exit 92\n\
         $o -w {ws} prompt --name Fill 'fill the disk' >/dev/null 2>{mnt}/../first.err; echo \"first=$?\"\n\
         $o -w {ws} doctor >{mnt}/../doctor1.out 2>&1; echo \"doctor1=$?\"\n\
         rm -f {ws}/agents/*/big\n\
         $o -w {ws} run Fill >{mnt}/../second.out 2>&1; echo \"second=$?\"\n\
         $o -w {ws} doctor >{mnt}/../doctor2.out 2>&1; echo \"doctor2=$?\"\n\
         $o -w {ws} log Fill > {mnt}/../log.out 2>&1\n",
        url = server.url()
    );
    let mut cmd = Command::new("unshare");
    cmd.env_clear();
    for (k, v) in t.command_bare().get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    let out = cmd.env("ANTHROPIC_API_KEY", "k").args(["-Urm", "sh", "-c", &script]).output().expect("unshare");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let read = |name: &str| std::fs::read_to_string(t.root.join(name)).unwrap_or_default();
    assert!(
        out.status.success(),
        "the namespace or its mount failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first = read("first.err");
    assert!(stdout.contains("first=1"), "{stdout}\n{first}");
    assert!(first.contains("No space left on device"), "{first}");
    // Sound but for the call the failure cut short, which the next run settles.
    let doctor1 = read("doctor1.out");
    assert!(stdout.contains("doctor1=1"), "{stdout}\n{doctor1}");
    assert!(
        doctor1.contains("error: 1 finding (") && doctor1.contains("has calls without results and no driver: bash c1"),
        "{doctor1}"
    );
    assert!(stdout.contains("second=0"), "{stdout}\n{}", read("second.out"));
    assert!(read("second.out").contains("after the space came back"), "{}", read("second.out"));
    assert!(stdout.contains("doctor2=0"), "{stdout}\n{}", read("doctor2.out"));
}

#[test]
fn gc_folds_an_idle_agents_finished_records_but_one_the_model_was_pointed_into() {
    let (server, t) = TestWorkspace::served("disk-fold", Dialect::Anthropic);
    server.push_turns([Turn::bash("big", "seq 1 50000"), Turn::bash("small", "echo small-output"), Turn::text("done")]);
    t.run(&["prompt", "go"]).ok();
    let id = t.only_agent();
    let pointer = format!("steps/{id}/0001/tools/big/stdout");
    assert!(server.result_text(1).contains(&pointer), "{}", server.result_text(1));
    let before = t.run(&["show", &id, "--step", "2"]).ok().to_owned();

    let gc = t.run(&["gc"]);
    gc.ok();
    assert!(gc.stderr.contains("folded 1 finished step record"), "{}", gc.stderr);
    let records = t.step_records(&id);
    let names: Vec<String> =
        records.iter().map(|r| r.file_name().expect("name").to_string_lossy().into_owned()).collect();
    // Step 1 told the model where its output is; step 3 is the newest.
    assert_eq!(names, ["0001", "0002.json", "0003"]);
    assert!(t.ws.join(&pointer).is_file(), "the path the model was given stays true");
    let output = t.step_json(&id, 2, "tools/small/output.json");
    assert!(output.to_string().contains("small-output"), "{output}");
    assert_eq!(
        t.run(&["show", &id, "--step", "2"]).ok(),
        before,
        "show reads the folded record as it read the directory"
    );
    let shown = t.run(&["show", &id, "--step", "2", "--request"]);
    assert_eq!(shown.ok().as_bytes(), &server.requests()[1].raw[..]);
    assert!(t.run(&["ls"]).ok().contains(" 3 "), "{}", t.run(&["ls"]).stdout);
    t.run(&["doctor"]).ok();
    // Again: nothing left to fold.
    let again = t.run(&["--json", "gc"]);
    assert!(again.ok().contains("{\"type\":\"folded\",\"records\":0}"), "{}", again.stdout);
    // The agent goes on from there.
    server.push_turns([Turn::text("more")]);
    assert!(t.run(&["send", &id, "and more"]).ok().contains("more"));
    assert_eq!(t.step_records(&id).len(), 4);
}
