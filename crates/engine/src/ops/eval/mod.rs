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

mod report;
mod run;

use crate::Cause;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::Env;
use crate::store::workspace::ConfigFiles;

pub use report::{Comparison, Difference, Paired, Rates, Report, ReportHead, TaskRates, compare, read_report, report};
pub use run::{Plan, run};

/// How long a task may take when its `task.toml` does not say.
const DEFAULT_TIMEOUT_SECS: u64 = 600;

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("{path}: {rule}")]
    Suite { path: PathBuf, rule: String },
    #[error("config {path}: {reason}")]
    Config {
        path: PathBuf,
        #[source]
        reason: Cause,
    },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path} is not an eval report: {reason}")]
    Report {
        path: PathBuf,
        #[source]
        reason: Cause,
    },
    #[error("a suite is run at least once, at least one run at a time")]
    NoRuns,
    #[error("{}: exists already", .0.display())]
    ReportExists(PathBuf),
    #[error("{} is not a directory", dir.display())]
    ReportDir { report: PathBuf, dir: PathBuf },
    #[error("{}: cannot be a directory of bundles ({source})", path.display())]
    BundleDir { path: PathBuf, source: std::io::Error },
    #[error("cannot make {}: {source}", path.display())]
    Make { path: PathBuf, source: std::io::Error },
    #[error("cannot write {}: {source}", path.display())]
    Write { path: PathBuf, source: std::io::Error },
}

type Result<T> = std::result::Result<T, EvalError>;

/// One task of a suite.
#[derive(Debug, Clone)]
pub struct Task {
    pub(crate) id: String,
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
        let fail = |reason: String| EvalError::Config { path: path.clone(), reason: reason.into() };
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
        crate::store::workspace::validate_files(&files).map_err(|e| fail(e.cited_in(path, &top).to_string()))?;
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

/// `files` with `path` among the paths its tools never read (`tool_env.hidden_paths`,
/// the default stores kept when the config lists none).
fn hide(files: &mut ConfigFiles, path: &Path) -> std::result::Result<(), String> {
    let file = domain::config::FILE;
    let Some((_, bytes)) = files.iter_mut().find(|(p, _)| p == file) else { return Ok(()) };
    let mut doc: toml_edit::DocumentMut =
        String::from_utf8_lossy(bytes).parse().map_err(|e| format!("does not read as TOML: {e}"))?;
    let table = doc
        .entry("tool_env")
        .or_insert_with(toml_edit::table)
        .as_table_like_mut()
        .ok_or("`tool_env` is not a table")?;
    let hidden = table.entry("hidden_paths").or_insert_with(|| {
        toml_edit::value(domain::config::HIDDEN_PATHS.iter().copied().collect::<toml_edit::Array>())
    });
    let list = hidden.as_array_mut().ok_or("`tool_env.hidden_paths` is not a list")?;
    list.push(path.display().to_string());
    *bytes = doc.to_string().into_bytes();
    Ok(())
}

/// `eval run`, resolved: what to run and where everything goes.
pub struct Suite<'a> {
    pub suite: &'a Path,
    /// Laid over `template`, in order.
    pub configs: &'a [PathBuf],
    pub template: &'a ConfigFiles,
    pub runs: u32,
    pub jobs: u32,
    /// Where the report goes: a path that does not exist yet, in a directory that does.
    pub report: &'a Path,
    /// Where failing runs are bundled, if anywhere.
    pub bundle_dir: Option<&'a Path>,
    /// This binary: each agent runs in a process of its own, as `offshoot prompt`.
    pub exe: &'a Path,
    pub env: &'a Env,
    /// The system's temporary directory: the runs' scratch directories go there.
    pub temp: &'a Path,
    /// The data root's `workspaces/`: the runs' workspaces go in a directory of it,
    /// where every agent's sandbox hides the others.
    pub workspaces: &'a Path,
}

/// What stops a suite's runs: once asked, no run starts and the agents at work stop;
/// the report then holds the runs that ended.
#[derive(Clone, Default)]
pub struct Stopper {
    stopping: Arc<AtomicBool>,
    live: Arc<Mutex<Vec<u32>>>,
}

impl Stopper {
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        for pid in self.live.lock().map(|l| l.clone()).unwrap_or_default() {
            let _ = infra::process::terminate(pid);
        }
    }

    pub fn stopped(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }
}

/// A directory only this user can enter, made new (never one someone else made ready,
/// nor through a link).
fn private_dir(path: &Path, recursive: bool) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(recursive)
        .create(path)
        .map_err(|source| EvalError::Make { path: path.to_owned(), source })
}

/// Runs every task of `s.suite` `s.runs` times and writes the report, telling `on_run`
/// of each run as it ends. Everything is checked before anything runs.
pub fn run_suite(s: &Suite, stopper: &Stopper, on_run: &(dyn Fn(&RunReport) + Sync)) -> Result<Report> {
    if s.runs == 0 || s.jobs == 0 {
        return Err(EvalError::NoRuns);
    }
    let tasks = load_suite(s.suite)?;
    let mut files = run_config(s.template, s.configs)?;
    // No run's agent reads the suite (its checks, other tasks' answers): its commands and
    // file tools have it hidden, as the user's credential stores are.
    let suite = std::fs::canonicalize(s.suite).map_err(|source| EvalError::Io { path: s.suite.to_owned(), source })?;
    hide(&mut files, &suite).map_err(|reason| EvalError::Config { path: s.suite.to_owned(), reason: reason.into() })?;
    if std::fs::symlink_metadata(s.report).is_ok() {
        return Err(EvalError::ReportExists(s.report.to_owned()));
    }
    let dir = s.report.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(EvalError::ReportDir { report: s.report.to_owned(), dir: dir.to_owned() });
    }
    if let Some(bundles) = s.bundle_dir {
        std::fs::create_dir_all(bundles).map_err(|source| EvalError::BundleDir { path: bundles.to_owned(), source })?;
    }
    // What evals killed mid-way left (their scratch and workspaces) goes first.
    crate::sweep_left_by_dead(s.temp, |n| crate::pid_after(n, "offshoot-eval-", "offshoot-eval-"));
    crate::sweep_left_by_dead(s.workspaces, |n| crate::pid_after(n, ".eval-", ".eval-"));
    let scratch = s.temp.join(format!("offshoot-eval-{}-{:08x}", std::process::id(), crate::random_u32()));
    private_dir(&scratch, false)?;
    let workspaces = s.workspaces.join(format!(".eval-{}-{:08x}", std::process::id(), crate::random_u32()));
    private_dir(&workspaces, true)?;
    let started = Instant::now();
    let plan = Plan {
        tasks: &tasks,
        files: &files,
        runs: s.runs,
        jobs: s.jobs,
        exe: s.exe,
        env: s.env,
        scratch: &scratch,
        bundle_dir: s.bundle_dir,
        on_run,
        workspaces: &workspaces,
        hidden: s.workspaces,
        stopping: &stopper.stopping,
        live: &stopper.live,
    };
    let runs = run(&plan);
    let _ = std::fs::remove_dir_all(&scratch);
    let _ = std::fs::remove_dir_all(&workspaces);
    let head = ReportHead {
        suite: s.suite.to_owned(),
        configs: s.configs.to_vec(),
        runs_per_task: s.runs,
        jobs: s.jobs,
        wall_secs: started.elapsed().as_secs_f64(),
    };
    let report = report(&tasks, runs, head);
    let text = serde_json::to_vec_pretty(&report).unwrap_or_default();
    std::fs::write(s.report, &text).map_err(|source| EvalError::Write { path: s.report.to_owned(), source })?;
    Ok(report)
}
