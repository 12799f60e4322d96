//! Evaluations: a configuration measured on a suite of tasks.
//!
//! A suite is a directory with one directory per task: `prompt.md` (the goal), an
//! executable `check` whose exit code is the only verdict, optionally an executable
//! `setup` (run in an empty directory, it makes the repository the agent works on; the
//! agent then starts in project mode on it) and `task.toml` (`categories = [...]`,
//! `timeout_secs`). Each run gets a scratch directory and a fresh workspace whose config
//! is the template with the given config files laid over it; the agent runs the prompt
//! as `offshoot prompt` would (a real process of this binary), then `check` runs in the
//! agent's directory in the agent's own sandbox. A run whose agent did not end with an
//! answer (provider down, budget exhausted, an error) is an error, never a fail.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::store::workspace::{ConfigFiles, Workspace};
use domain::eval as stats;
use domain::id::AgentId;
use infra::process::{self, Ended, Finished, Group, Io, Limits, Spec};

use crate::Env;

/// How long a task may take when its `task.toml` does not say.
const DEFAULT_TIMEOUT_SECS: u64 = 600;

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("{path}: {rule}")]
    Suite { path: PathBuf, rule: String },
    #[error("config {path}: {reason}")]
    Config { path: PathBuf, reason: String },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path} is not an eval report: {reason}")]
    Report { path: PathBuf, reason: String },
}

type Result<T> = std::result::Result<T, EvalError>;

/// One task of a suite.
#[derive(Debug, Clone)]
pub struct Task {
    pub(crate) id: String,
    pub(crate) dir: PathBuf,
    pub(crate) prompt: String,
    pub(crate) categories: Vec<String>,
    pub(crate) timeout: Duration,
    pub(crate) setup: Option<PathBuf>,
    pub(crate) check: PathBuf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskToml {
    #[serde(default)]
    categories: Vec<String>,
    timeout_secs: Option<u64>,
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The tasks of the suite at `dir`, in order of their names; each checked whole before
/// any runs (the first problem found is said, naming the file and the rule).
pub fn load_suite(dir: &Path) -> Result<Vec<Task>> {
    let bad = |path: &Path, rule: &str| EvalError::Suite { path: path.to_owned(), rule: rule.to_owned() };
    // Absolute: the scripts run from other directories.
    let dir = &std::fs::canonicalize(dir).map_err(|_| bad(dir, "is not a directory of tasks"))?;
    let entries = std::fs::read_dir(dir).map_err(|_| bad(dir, "is not a directory of tasks"))?;
    let mut names: Vec<String> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    if names.is_empty() {
        return Err(bad(dir, "has no task (a task is a directory with prompt.md and an executable check)"));
    }
    let mut tasks = Vec::new();
    for name in names {
        let task = dir.join(&name);
        // The task's id names its agents (`eval-<id>-<run>`).
        if domain::id::validate_name(&agent_name(&name, 1)).is_err() {
            return Err(bad(&task, "is not a name an agent can have: use letters, digits, `-` and `_`"));
        }
        let prompt = std::fs::read_to_string(task.join("prompt.md"))
            .map_err(|_| bad(&task.join("prompt.md"), "is missing or not UTF-8 text: every task needs its goal"))?;
        if prompt.trim().is_empty() {
            return Err(bad(&task.join("prompt.md"), "is empty"));
        }
        let check = task.join("check");
        if !is_executable(&check) {
            return Err(bad(&check, "must be an executable file: its exit code is the verdict"));
        }
        let setup = task.join("setup");
        let setup = match setup.exists() {
            true if is_executable(&setup) => Some(setup),
            true => return Err(bad(&setup, "must be executable")),
            false => None,
        };
        let toml_path = task.join("task.toml");
        let parsed: TaskToml = match std::fs::read_to_string(&toml_path) {
            Ok(text) => toml::from_str(&text).map_err(|e| bad(&toml_path, &format!("does not read: {e}")))?,
            Err(_) => TaskToml::default(),
        };
        if parsed.timeout_secs == Some(0) {
            return Err(bad(&toml_path, "`timeout_secs` must be at least 1"));
        }
        tasks.push(Task {
            id: name,
            dir: task,
            prompt,
            categories: parsed.categories,
            timeout: Duration::from_secs(parsed.timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS)),
            setup,
            check,
        });
    }
    Ok(tasks)
}

/// The name of the agent of run `run` of task `id`.
fn agent_name(id: &str, run: u32) -> String {
    format!("eval-{id}-{run}")
}

/// `top` laid over `base` (TOML documents): tables merge key by key, anything else in
/// `top` replaces what `base` has.
pub(crate) fn overlay(base: &str, top: &str) -> std::result::Result<String, String> {
    let mut doc: toml_edit::DocumentMut = base.parse().map_err(|e| format!("the template: {e}"))?;
    let top: toml_edit::DocumentMut = top.parse().map_err(|e| format!("does not read as TOML: {e}"))?;
    fn merge(into: &mut dyn toml_edit::TableLike, from: &dyn toml_edit::TableLike) {
        for (key, item) in from.iter() {
            match (into.get_mut(key).and_then(|i| i.as_table_like_mut()), item.as_table_like()) {
                (Some(inner), Some(from_inner)) => merge(inner, from_inner),
                _ => {
                    into.insert(key, item.clone());
                }
            }
        }
    }
    merge(doc.as_table_mut(), top.as_table());
    Ok(doc.to_string())
}

/// The config files of a run: `template` with each of `configs` laid over its
/// `offshoot.toml`, and the `souls/*.md` beside a config file over the template's.
pub fn run_config(template: &ConfigFiles, configs: &[PathBuf]) -> Result<ConfigFiles> {
    let mut files = template.clone();
    for path in configs {
        let fail = |reason: String| EvalError::Config { path: path.clone(), reason };
        let top = std::fs::read_to_string(path).map_err(|e| fail(format!("cannot be read: {e}")))?;
        let file = domain::config::FILE;
        let base = files.iter().find(|(p, _)| p == file).map(|(_, b)| String::from_utf8_lossy(b).into_owned());
        let merged = overlay(&base.unwrap_or_default(), &top).map_err(fail)?;
        files.retain(|(p, _)| p != file);
        files.push((file.to_owned(), merged.into_bytes()));
        let souls = path.parent().unwrap_or(Path::new(".")).join("souls");
        for soul in std::fs::read_dir(&souls).into_iter().flatten().flatten() {
            let name = soul.file_name().to_string_lossy().into_owned();
            if name.ends_with(".md") {
                let bytes = std::fs::read(soul.path()).map_err(|e| fail(format!("{name}: {e}")))?;
                let rel = format!("souls/{name}");
                files.retain(|(p, _)| *p != rel);
                files.push((rel, bytes));
            }
        }
        crate::store::workspace::validate_files(&files).map_err(|e| fail(e.to_string()))?;
    }
    files.sort();
    Ok(files)
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Pass,
    Fail,
    /// The agent never came to an answer for a reason not its own (provider down,
    /// budget exhausted, the harness failing): neither pass nor fail.
    Error,
}

/// One run of one task.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunReport {
    pub task: String,
    pub run: u32,
    pub outcome: Outcome,
    /// Why it failed or erred, in words.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
    pub(crate) agent: String,
    pub wall_secs: f64,
    pub(crate) tokens: u64,
    pub(crate) cost_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) bundle: Option<PathBuf>,
}

/// Pass rates of a set of runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Rates {
    /// Runs with a verdict (errors left out), and those that passed.
    pub runs: u64,
    pub passed: u64,
    pub errors: u64,
    /// None when no run was judged (every run erred).
    pub pass_at_1: Option<f64>,
    /// Wilson 95% interval of pass@1.
    pub interval: (f64, f64),
    /// pass@k for each k every task of the set has runs for, by k (a JSON key).
    pub pass_at_k: BTreeMap<String, f64>,
    pub tokens: u64,
    pub cost_usd: Option<f64>,
    pub wall_secs: f64,
}

/// What `eval run` writes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub(crate) format: String,
    pub(crate) suite: PathBuf,
    pub(crate) configs: Vec<PathBuf>,
    pub(crate) runs_per_task: u32,
    pub(crate) jobs: u32,
    pub(crate) wall_secs: f64,
    pub tasks: BTreeMap<String, TaskRates>,
    pub categories: BTreeMap<String, Rates>,
    pub total: Rates,
    pub runs: Vec<RunReport>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskRates {
    pub(crate) categories: Vec<String>,
    #[serde(flatten)]
    pub rates: Rates,
}

/// The rates of `runs` (grouped by task for pass@k).
fn rates(runs: &[&RunReport]) -> Rates {
    let judged: Vec<&&RunReport> = runs.iter().filter(|r| r.outcome != Outcome::Error).collect();
    let passed = judged.iter().filter(|r| r.outcome == Outcome::Pass).count() as u64;
    let total = judged.len() as u64;
    let mut by_task: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for run in &judged {
        let slot = by_task.entry(run.task.as_str()).or_default();
        slot.1 += 1;
        slot.0 += u64::from(run.outcome == Outcome::Pass);
    }
    let fit = by_task.values().map(|(_, n)| *n).min().unwrap_or(0);
    let pass_at_k = (1..=fit)
        .map(|k| {
            let each: Vec<f64> = by_task.values().filter_map(|(c, n)| stats::pass_at_k(*c, *n, k)).collect();
            (k.to_string(), each.iter().sum::<f64>() / each.len().max(1) as f64)
        })
        .collect();
    let costs: Vec<Option<f64>> = runs.iter().map(|r| r.cost_usd).collect();
    Rates {
        runs: total,
        passed,
        errors: runs.len() as u64 - total,
        pass_at_1: (total > 0).then(|| passed as f64 / total as f64),
        interval: stats::wilson(passed, total),
        pass_at_k,
        tokens: runs.iter().map(|r| r.tokens).sum(),
        cost_usd: costs.iter().copied().sum::<Option<f64>>(),
        wall_secs: runs.iter().map(|r| r.wall_secs).sum(),
    }
}

/// The report of `runs` of `tasks`.
pub fn report(tasks: &[Task], runs: Vec<RunReport>, head: ReportHead) -> Report {
    let of = |pred: &dyn Fn(&RunReport) -> bool| -> Vec<&RunReport> { runs.iter().filter(|r| pred(r)).collect() };
    let mut per_task = BTreeMap::new();
    let mut categories: BTreeMap<String, Rates> = BTreeMap::new();
    for task in tasks {
        per_task.insert(
            task.id.clone(),
            TaskRates { categories: task.categories.clone(), rates: rates(&of(&|r| r.task == task.id)) },
        );
    }
    let names: BTreeSet<&String> = tasks.iter().flat_map(|t| &t.categories).collect();
    for name in names {
        let members: BTreeSet<&str> =
            tasks.iter().filter(|t| t.categories.contains(name)).map(|t| t.id.as_str()).collect();
        categories.insert(name.clone(), rates(&of(&|r| members.contains(r.task.as_str()))));
    }
    let total = rates(&of(&|_| true));
    Report {
        format: "offshoot-eval-1".into(),
        suite: head.suite,
        configs: head.configs,
        runs_per_task: head.runs_per_task,
        jobs: head.jobs,
        wall_secs: head.wall_secs,
        tasks: per_task,
        categories,
        total,
        runs,
    }
}

/// What a report says of how it was made.
pub struct ReportHead {
    pub suite: PathBuf,
    pub configs: Vec<PathBuf>,
    pub runs_per_task: u32,
    pub jobs: u32,
    pub wall_secs: f64,
}

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
            report.detail = detail;
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
) -> std::result::Result<(), String> {
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
                return Err(format!("setup failed ({}): {}", ran.exit, last_line(&kept(&ran.stderr))));
            }
            let user = infra::git::UserRepo::open(&repo)
                .map_err(|e| format!("setup made no git repository in its directory: {e}"))?;
            Workspace::create_for_project(ws_path, plan.files, &user).map_err(|e| e.to_string())?
        }
        None => Workspace::create(ws_path, plan.files).map_err(|e| e.to_string())?,
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
        return Err(format!("the agent did not start: {}", last_line(&errors)));
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
        ));
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
) -> std::result::Result<Finished, String> {
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
    ran.map_err(|e| e.to_string())
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
) -> std::result::Result<(), String> {
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
fn check(plan: &Plan, ws: &Workspace, id: &AgentId, task: &Task) -> std::result::Result<(bool, String), String> {
    let commands = crate::agents::containment::commands_for(ws, id, plan.exe, plan.env, Some(plan.hidden))
        .map_err(|e| e.to_string())?;
    let own = std::fs::canonicalize(ws.layout.worktree(id)).map_err(|e| format!("the agent's directory: {e}"))?;
    let env = infra::tools::ToolEnv { cwd: own.clone(), root: own, commands, record: None, paths: None };
    let bash = crate::step::tools::handler("bash").ok_or("no bash tool")?;
    let quoted = format!("'{}'", task.check.display().to_string().replace('\'', "'\\''"));
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
        return Err(format!("the check could not be run in the agent's sandbox ({})", output.summary));
    }
    let said: String =
        output.streams.iter().map(|s| s.text.trim()).filter(|t| !t.is_empty()).collect::<Vec<_>>().join(" | ");
    Ok((
        code == Some(0),
        format!("check: {}{}", output.summary, if said.is_empty() { String::new() } else { format!(": {said}") }),
    ))
}

/// A report read back.
pub fn read_report(path: &Path) -> Result<Report> {
    let bytes = std::fs::read(path).map_err(|source| EvalError::Io { path: path.to_owned(), source })?;
    let report: Report = serde_json::from_slice(&bytes)
        .map_err(|e| EvalError::Report { path: path.to_owned(), reason: e.to_string() })?;
    if report.format != "offshoot-eval-1" {
        return Err(EvalError::Report { path: path.to_owned(), reason: format!("its format is `{}`", report.format) });
    }
    Ok(report)
}

/// Two reports side by side.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// Tasks in only one of the two.
    pub only_a: Vec<String>,
    pub only_b: Vec<String>,
    /// Tasks with no judged run (every run erred) in either: left out.
    pub unjudged: Vec<String>,
    pub tasks: BTreeMap<String, Difference>,
    pub categories: BTreeMap<String, Difference>,
    pub total: Difference,
    /// McNemar's exact test on runs paired by task and run number (both judged).
    pub paired_runs: Paired,
    /// The sign test on tasks whose pass rate differs.
    pub tasks_test: Paired,
}

#[derive(Debug, Clone, Serialize)]
pub struct Difference {
    pub a: f64,
    pub b: f64,
    /// `b - a`.
    pub delta: f64,
    pub cost_a: Option<f64>,
    pub cost_b: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Paired {
    /// Pairs (or tasks) where b did better, and where a did.
    pub b_better: u64,
    pub a_better: u64,
    pub p_value: f64,
}

/// `b` against `a`, over the tasks both ran.
pub fn compare(a: &Report, b: &Report) -> Comparison {
    let only = |x: &Report, y: &Report| x.tasks.keys().filter(|k| !y.tasks.contains_key(*k)).cloned().collect();
    let unjudged: Vec<String> = a
        .tasks
        .iter()
        .chain(b.tasks.iter())
        .filter(|(_, t)| t.rates.runs == 0)
        .map(|(k, _)| k.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let diff = |ra: &Rates, rb: &Rates| Difference {
        a: ra.pass_at_1.unwrap_or(0.0),
        b: rb.pass_at_1.unwrap_or(0.0),
        delta: rb.pass_at_1.unwrap_or(0.0) - ra.pass_at_1.unwrap_or(0.0),
        cost_a: ra.cost_usd,
        cost_b: rb.cost_usd,
    };
    // Tasks both judged: one that only erred in either has no rate to compare.
    let judged_in = |r: &Report, k: &str| r.tasks.get(k).is_some_and(|t| t.rates.runs > 0);
    let shared: Vec<&String> = a.tasks.keys().filter(|k| judged_in(a, k) && judged_in(b, k)).collect();
    let tasks: BTreeMap<String, Difference> =
        shared.iter().map(|k| ((*k).clone(), diff(&a.tasks[*k].rates, &b.tasks[*k].rates))).collect();
    let runs_of = |r: &Report, pred: &dyn Fn(&str) -> bool| -> Vec<RunReport> {
        r.runs.iter().filter(|x| pred(&x.task)).cloned().collect()
    };
    let in_shared = |t: &str| shared.iter().any(|s| s.as_str() == t);
    let rates_of = |r: &Report, pred: &dyn Fn(&str) -> bool| {
        let runs = runs_of(r, pred);
        rates(&runs.iter().collect::<Vec<_>>())
    };
    let mut categories = BTreeMap::new();
    let names: BTreeSet<&String> = a.categories.keys().chain(b.categories.keys()).collect();
    for name in names {
        let member =
            |t: &str| in_shared(t) && a.tasks.get(t).or(b.tasks.get(t)).is_some_and(|x| x.categories.contains(name));
        categories.insert(name.clone(), diff(&rates_of(a, &member), &rates_of(b, &member)));
    }
    let total = diff(&rates_of(a, &in_shared), &rates_of(b, &in_shared));
    let judged = |r: &RunReport| r.outcome != Outcome::Error;
    let (mut b_better, mut a_better) = (0, 0);
    for ra in a.runs.iter().filter(|r| in_shared(&r.task) && judged(r)) {
        if let Some(rb) = b.runs.iter().find(|x| x.task == ra.task && x.run == ra.run && judged(x)) {
            match (ra.outcome, rb.outcome) {
                (Outcome::Fail, Outcome::Pass) => b_better += 1,
                (Outcome::Pass, Outcome::Fail) => a_better += 1,
                _ => {}
            }
        }
    }
    let paired_runs = Paired { b_better, a_better, p_value: stats::sign_test(b_better, a_better) };
    let up = tasks.values().filter(|d| d.delta > 0.0).count() as u64;
    let down = tasks.values().filter(|d| d.delta < 0.0).count() as u64;
    Comparison {
        only_a: only(a, b),
        only_b: only(b, a),
        unjudged,
        tasks,
        categories,
        total,
        paired_runs,
        tasks_test: Paired { b_better: up, a_better: down, p_value: stats::sign_test(up, down) },
    }
}
