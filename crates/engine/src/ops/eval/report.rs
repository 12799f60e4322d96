//! What a suite's runs come to: pass rates with their intervals per task, per category
//! and in total, the report file, and two reports compared.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{EvalError, Outcome, Result, RunReport, Task};
use domain::eval as stats;

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

/// A report read back.
pub fn read_report(path: &Path) -> Result<Report> {
    let bytes = std::fs::read(path).map_err(|source| EvalError::Io { path: path.to_owned(), source })?;
    let report: Report =
        serde_json::from_slice(&bytes).map_err(|e| EvalError::Report { path: path.to_owned(), reason: e.into() })?;
    if report.format != "offshoot-eval-1" {
        return Err(EvalError::Report {
            path: path.to_owned(),
            reason: format!("its format is `{}`", report.format).into(),
        });
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
