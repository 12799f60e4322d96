//! Running a suite: every task's runs, `jobs` at once, each in a scratch directory and
//! a fresh workspace of its own, its agent a process of this binary, its check in the
//! agent's sandbox.

use crate::Cause;
use std::collections::VecDeque;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use domain::id::AgentId;
use infra::process::{self, Ended, Finished, Group, Io, Limits, Spec};

use super::{Outcome, RunReport, Task, agent_name};
use crate::Env;
use crate::store::workspace::{ConfigFiles, Workspace};

/// Everything a run needs.
pub struct Plan<'a> {
    pub tasks: &'a [Task],
    pub files: &'a ConfigFiles,
    pub runs: u32,
    pub jobs: u32,
    /// This binary: each agent runs in a process of its own, as `offshoot prompt`.
    pub exe: &'a Path,
    pub env: &'a Env,
    /// Where runs' scratch directories go (removed after each run): the repositories
    /// `setup` makes.
    pub scratch: &'a Path,
    /// Where runs' workspaces go: a directory of the data root's `workspaces/`, whose
    /// other workspaces every agent's sandbox hides — so no run's agent or check reads
    /// another's.
    pub workspaces: &'a Path,
    /// The data root's `workspaces/`, hidden from checks as from agents.
    pub hidden: &'a Path,
    /// Where failing runs are bundled, if anywhere.
    pub bundle_dir: Option<&'a Path>,
    /// Told of each run as it ends.
    pub on_run: &'a (dyn Fn(&RunReport) + Sync),
    /// Set when the user asked to stop: no run starts after it.
    pub stopping: &'a AtomicBool,
    /// The processes at work (the agents' and the scripts'), for whoever stops them.
    pub live: &'a Mutex<Vec<u32>>,
}

/// Runs every task `plan.runs` times, `plan.jobs` at once.
pub fn run(plan: &Plan) -> Vec<RunReport> {
    let queue: Mutex<VecDeque<(usize, u32)>> =
        Mutex::new((0..plan.tasks.len()).flat_map(|t| (1..=plan.runs).map(move |r| (t, r))).collect());
    let done = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        let total = plan.tasks.len() as u64 * u64::from(plan.runs);
        for _ in 0..u64::from(plan.jobs.max(1)).min(total.max(1)) {
            scope.spawn(|| {
                loop {
                    if plan.stopping.load(Ordering::SeqCst) {
                        break;
                    }
                    let next = queue.lock().ok().and_then(|mut q| q.pop_front());
                    let Some((t, r)) = next else { break };
                    let report = run_one(plan, &plan.tasks[t], r);
                    (plan.on_run)(&report);
                    if let Ok(mut d) = done.lock() {
                        d.push(report);
                    }
                }
            });
        }
    });
    let mut runs = done.into_inner().unwrap_or_default();
    runs.sort_by(|a, b| (a.task.as_str(), a.run).cmp(&(b.task.as_str(), b.run)));
    runs
}

/// One run of `task`: scratch directory, setup, workspace, agent, check.
fn run_one(plan: &Plan, task: &Task, run: u32) -> RunReport {
    let started = Instant::now();
    let scratch = plan.scratch.join(format!("{}-{run}", task.id));
    let _ = std::fs::remove_dir_all(&scratch);
    let ws_path = plan.workspaces.join(format!("{}-{run}", task.id));
    let _ = std::fs::remove_dir_all(&ws_path);
    let mut report = RunReport {
        task: task.id.clone(),
        run,
        outcome: Outcome::Error,
        detail: String::new(),
        agent: String::new(),
        wall_secs: 0.0,
        tokens: 0,
        cost_usd: None,
        bundle: None,
    };
    match attempt(plan, task, run, &scratch, &ws_path, &mut report) {
        Ok(()) => {}
        Err(detail) => {
            report.outcome = Outcome::Error;
            report.detail = detail.to_string();
        }
    }
    report.wall_secs = started.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&scratch);
    let _ = std::fs::remove_dir_all(&ws_path);
    report
}

fn attempt(
    plan: &Plan,
    task: &Task,
    run: u32,
    scratch: &Path,
    ws_path: &Path,
    report: &mut RunReport,
) -> std::result::Result<(), Cause> {
    let repo = scratch.join("repo");
    std::fs::create_dir_all(&repo).map_err(|e| format!("cannot make {}: {e}", repo.display()))?;
    let user_env: Vec<(String, String)> = plan.env.vars().map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
    // The suite's own scripts run as the user's, without the keys.
    let keys: Vec<String> = crate::store::workspace::validate_files(plan.files)
        .map(|c| c.api_key_variables().into_iter().map(str::to_owned).collect())
        .unwrap_or_default();
    let script_env: Vec<(String, String)> =
        user_env.iter().filter(|(k, _)| !domain::tool_env::is_secret_name(k) && !keys.contains(k)).cloned().collect();
    let ws = match &task.setup {
        Some(setup) => {
            let ran = spawn(plan.live, setup, &[], &repo, &script_env, None, Some(Duration::from_secs(600)))?;
            if !ran.exit.success() || ran.ended != Ended::Exited {
                return Err(format!("setup failed ({}): {}", ran.exit, last_line(&kept(&ran.stderr))).into());
            }
            let user = infra::git::UserRepo::open(&repo)
                .map_err(|e| format!("setup made no git repository in its directory: {e}"))?;
            Workspace::create_for_project(ws_path, plan.files, &user)?
        }
        None => Workspace::create(ws_path, plan.files)?,
    };
    // The agent, as `offshoot prompt` runs it: a process of its own.
    let name = agent_name(&task.id, run);
    let ws_arg = ws_path.display().to_string();
    let agent_env: Vec<(String, String)> =
        user_env.iter().filter(|(k, _)| k != "OFFSHOOT_WORKSPACE").cloned().collect();
    let ran = spawn(
        plan.live,
        plan.exe,
        &["-w", &ws_arg, "--json", "prompt", "--name", &name, "-"],
        &repo,
        &agent_env,
        Some(task.prompt.as_bytes()),
        Some(task.timeout),
    )?;
    let timed_out = ran.ended == Ended::TimedOut;
    if timed_out || plan.stopping.load(Ordering::SeqCst) {
        // Its process is gone; the drivers of the agents below it (detached) stop too.
        let stop = ["-w", ws_arg.as_str(), "stop", name.as_str()];
        let _ = spawn(plan.live, plan.exe, &stop, &repo, &agent_env, None, Some(Duration::from_secs(60)));
    }
    let events = String::from_utf8_lossy(&kept(&ran.stdout)).into_owned();
    let errors = kept(&ran.stderr);
    let lines: Vec<serde_json::Value> = events.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    // The first event names the agent driven (those below it come later).
    let agent = lines.iter().find_map(|l| l["agent"].as_str()).unwrap_or("").to_owned();
    report.agent = agent.clone();
    let id = AgentId::parse(&agent).map_err(|_| format!("the agent did not start: {}", last_line(&errors)))?;
    if ws.repo.branch_tip(&id.branch()).ok().flatten().is_none() {
        // Its first call failed and it was removed again: nothing to check or count.
        return Err(format!("the agent did not start: {}", last_line(&errors)).into());
    }
    let (tokens, cost) = spend(&ws, &id);
    report.tokens = tokens;
    report.cost_usd = cost;
    if timed_out {
        report.outcome = Outcome::Fail;
        report.detail = format!("timed out after {} s", task.timeout.as_secs());
        return bundle_failure(plan, &ws, &id, task, run, report);
    }
    let end = lines.iter().rev().find(|l| l["type"] == "end" && l["agent"] == agent.as_str());
    let outcome = end.and_then(|e| e["outcome"].as_str()).unwrap_or("");
    if outcome != "final-response" {
        let why = end.and_then(|e| e["error"].as_str().or(e["reason"].as_str())).unwrap_or("");
        let said = if why.is_empty() { last_line(&errors) } else { why.to_owned() };
        return Err(format!(
            "the agent did not answer ({}): {said}",
            if outcome.is_empty() { "no end" } else { outcome }
        )
        .into());
    }
    let (passed, said) = check(plan, &ws, &id, task)?;
    report.outcome = if passed { Outcome::Pass } else { Outcome::Fail };
    if !passed {
        report.detail = said;
        return bundle_failure(plan, &ws, &id, task, run, report);
    }
    Ok(())
}

/// Runs `program` unconfined (this binary, or the suite's own scripts) and waits for it.
/// Its process is in `live` while it runs.
fn spawn(
    live: &Mutex<Vec<u32>>,
    program: &Path,
    args: &[&str],
    cwd: &Path,
    env: &[(String, String)],
    stdin: Option<&[u8]>,
    timeout: Option<Duration>,
) -> std::result::Result<Finished, Cause> {
    let args: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
    let spec = Spec { program, args: &args, cwd, env, group: Group::Own, stdin, sandbox: None, pgid_record: None };
    let limits = Limits { head: 64 << 20, tail: 1 << 20, record_max: 0, timeout, idle: None };
    let pid = std::sync::OnceLock::new();
    let on_spawn = |p: u32| {
        let _ = pid.set(p);
        if let Ok(mut l) = live.lock() {
            l.push(p);
        }
    };
    let ran = process::run(&spec, &limits, Io { on_spawn: Some(&on_spawn), ..Io::default() });
    if let (Some(p), Ok(mut l)) = (pid.get(), live.lock()) {
        l.retain(|x| x != p);
    }
    Ok(ran?)
}

/// What was kept of a stream, head and tail.
fn kept(stream: &process::Kept) -> Vec<u8> {
    [stream.head.as_slice(), stream.tail.as_slice()].concat()
}

/// What a process said last: its `error:` line when it has one, else its last line.
fn last_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let error = text.lines().rev().find_map(|l| l.trim().strip_prefix("error: "));
    let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
    error.unwrap_or(last).trim().to_owned()
}

/// Tokens and cost the tree of `id` spent.
fn spend(ws: &Workspace, id: &AgentId) -> (u64, Option<f64>) {
    let Ok((_, config)) = ws.config("default") else { return (0, None) };
    let (spent, _) = crate::agents::budget::check(&mut Default::default(), &ws.layout, id, &config);
    (spent.tokens, spent.cost_usd)
}

/// A failing run's agent bundled to the plan's directory, if it has one.
fn bundle_failure(
    plan: &Plan,
    ws: &Workspace,
    id: &AgentId,
    task: &Task,
    run: u32,
    report: &mut RunReport,
) -> std::result::Result<(), Cause> {
    if let Some(dir) = plan.bundle_dir {
        let _ = std::fs::create_dir_all(dir);
        let file = dir.join(format!("{}-{run}.offshoot", task.id));
        let _ = std::fs::remove_file(&file);
        match crate::fleet::bundle::make(ws, id, false, plan.env, &file) {
            Ok(_) => report.bundle = Some(file),
            Err(e) => report.detail.push_str(&format!(" (not bundled: {e})")),
        }
    }
    Ok(())
}

/// Runs `task`'s check in agent `id`'s directory, in the agent's sandbox, as its bash
/// would; whether it exited 0, and what it said.
fn check(plan: &Plan, ws: &Workspace, id: &AgentId, task: &Task) -> std::result::Result<(bool, String), Cause> {
    // The check runs from a copy of its task, made now the agent is done, where no
    // agent of this eval reads (beside the runs' workspaces); its jail reads the copy.
    let task_dir = task.check.parent().ok_or("the check has no directory")?;
    let copy = plan
        .workspaces
        .join(format!("{}.task", ws.layout.root().file_name().map(|n| n.to_string_lossy()).unwrap_or_default()));
    let _ = std::fs::remove_dir_all(&copy);
    copy_tree(task_dir, &copy).map_err(|e| format!("cannot copy the task for its check: {e}"))?;
    let copy = std::fs::canonicalize(&copy)?;
    let checked = check_from(plan, ws, id, task, &copy);
    let _ = std::fs::remove_dir_all(&copy);
    checked
}

/// `from` (a directory) copied to `to`, following links: the files the user's suite holds.
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        if std::fs::metadata(&source)?.is_dir() {
            copy_tree(&source, &target)?;
        } else {
            std::fs::copy(&source, &target)?;
        }
    }
    Ok(())
}

fn check_from(
    plan: &Plan,
    ws: &Workspace,
    id: &AgentId,
    task: &Task,
    copy: &Path,
) -> std::result::Result<(bool, String), Cause> {
    let commands =
        crate::agents::containment::commands_for(ws, id, plan.exe, plan.env, Some(plan.hidden), &[copy.to_owned()])?;
    let check = copy.join(task.check.file_name().ok_or("the check has no name")?);
    let own = std::fs::canonicalize(ws.layout.worktree(id)).map_err(|e| format!("the agent's directory: {e}"))?;
    let env = infra::tools::ToolEnv { cwd: own.clone(), root: own, commands, record: None, paths: None };
    let bash = crate::step::tools::handler("bash").ok_or("no bash tool")?;
    let quoted = format!("'{}'", check.display().to_string().replace('\'', "'\\''"));
    let output = bash
        .run(
            &crate::step::tools::ToolContext { env, agent: None, key: None },
            // As long as the task may take; the check is stopped past it (a fail).
            &serde_json::json!({ "command": quoted, "timeout_secs": task.timeout.as_secs().min(3600) }),
        )
        .map_err(|e| format!("the check could not run: {e:?}"))?;
    // `exit code N`, then anything the tool adds (a limit met, a process left).
    let code = output.summary.strip_prefix("exit code ").and_then(|c| {
        let digits: String = c.chars().take_while(|ch| ch.is_ascii_digit() || *ch == '-').collect();
        digits.parse::<i32>().ok()
    });
    if matches!(code, Some(126 | 127)) {
        return Err(format!("the check could not be run in the agent's sandbox ({})", output.summary).into());
    }
    let said: String =
        output.streams.iter().map(|s| s.text.trim()).filter(|t| !t.is_empty()).collect::<Vec<_>>().join(" | ");
    Ok((
        code == Some(0),
        format!("check: {}{}", output.summary, if said.is_empty() { String::new() } else { format!(": {said}") }),
    ))
}
