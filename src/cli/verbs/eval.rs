use std::path::PathBuf;

use crate::cli::{CliError, Ctx};
use engine::ops::eval::{self, Comparison, Outcome, Rates, Report};

/// Measure a configuration on a suite of tasks, and compare two such measurements
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Args {
    /// Run every task of a suite N times (each in a fresh workspace) and report pass@1
    /// with its Wilson 95% interval, pass@k, tokens, cost and time, per task, per
    /// category and in total
    Run(RunArgs),
    /// Compare two reports: pass rates per task, per category and in total, with
    /// McNemar's exact test on paired runs and the sign test on tasks, and the cost
    Compare {
        /// The report to compare against
        a: PathBuf,
        /// The report compared
        b: PathBuf,
    },
}

#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    /// The suite: a directory with one directory per task (`prompt.md`, an executable
    /// `check`, optionally an executable `setup` and `task.toml`)
    #[arg(long)]
    pub(crate) suite: PathBuf,
    /// A config file laid over the default (`offshoot.toml` keys: model, budgets,
    /// tools; `souls/*.md` beside it replace the souls); repeatable, in order
    #[arg(long)]
    pub(crate) config: Vec<PathBuf>,
    /// Runs of each task
    #[arg(long, default_value_t = 1)]
    pub(crate) runs: u32,
    /// Runs at once
    #[arg(long, default_value_t = 1)]
    pub(crate) jobs: u32,
    /// Where the report goes (default: `eval-<time>.json` here)
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// Where failing runs are bundled (`<task>-<run>.offshoot`)
    #[arg(long)]
    pub(crate) bundle_dir: Option<PathBuf>,
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    match args {
        Args::Run(run) => run_suite(ctx, run),
        Args::Compare { a, b } => compare(ctx, a, b),
    }
}

/// What the user reads when a suite cannot be run or read.
fn error(e: eval::EvalError) -> CliError {
    use eval::EvalError as E;
    match e {
        E::NoRuns => CliError::usage("--runs and --jobs must be at least 1"),
        E::ReportExists(ref path) => {
            CliError::usage_error(format!("{}: exists already; give --out a new path", path.display()), e)
        }
        E::ReportDir { ref report, ref dir } => {
            CliError::usage_error(format!("--out {}: {} is not a directory", report.display(), dir.display()), e)
        }
        E::BundleDir { ref path, ref source } => CliError::usage_error(
            format!("--bundle-dir {}: cannot be a directory of bundles ({source})", path.display()),
            e,
        ),
        E::Make { .. } | E::Write { .. } => CliError::runtime_from(e),
        _ => CliError::usage_from(e),
    }
}

fn run_suite(ctx: &Ctx, args: &RunArgs) -> Result<(), CliError> {
    let report = args.out.clone().unwrap_or_else(|| {
        PathBuf::from(format!("eval-{}.json", infra::time::Timestamp::now().to_string().replace(':', "")))
    });
    let template = ctx.template()?;
    let temp = std::env::temp_dir();
    let workspaces = ctx.data_root.join("workspaces");
    let suite = eval::Suite {
        suite: &args.suite,
        configs: &args.config,
        template: &template,
        runs: args.runs,
        jobs: args.jobs,
        report: &report,
        bundle_dir: args.bundle_dir.as_deref(),
        exe: &ctx.exe,
        env: &ctx.env,
        temp: &temp,
        workspaces: &workspaces,
    };
    // Ctrl-C (or SIGTERM, SIGHUP): no run starts after it, the agents at work stop, and
    // the report holds the runs that ended.
    let stopper = eval::Stopper::default();
    {
        let stopper = stopper.clone();
        infra::signals::watch(move |_| stopper.stop());
    }
    // Each run is said as it ends, from this thread (the output is not shared).
    let (sender, ended) = std::sync::mpsc::channel::<eval::RunReport>();
    let sender = std::sync::Mutex::new(sender);
    let on_run = |r: &eval::RunReport| {
        if let Ok(s) = sender.lock() {
            let _ = s.send(r.clone());
        }
    };
    let result = std::thread::scope(|scope| {
        let running = scope.spawn(|| eval::run_suite(&suite, &stopper, &on_run));
        while !running.is_finished() {
            if let Ok(r) = ended.recv_timeout(std::time::Duration::from_millis(100)) {
                say(ctx, &r);
            }
        }
        while let Ok(r) = ended.try_recv() {
            say(ctx, &r);
        }
        running.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    });
    let report_json = result.map_err(error)?;
    if ctx.out.json {
        ctx.out.event(&serde_json::to_value(&report_json).unwrap_or_default());
    } else {
        print_report(ctx, &report_json);
    }
    ctx.out.progress(&format!("· report: {}", report.display()));
    let erred = report_json.runs.iter().filter(|r| r.outcome == eval::Outcome::Error).count();
    if !stopper.stopped() && erred > 0 && erred == report_json.runs.len() {
        let first = report_json.runs.first().map(|r| r.detail.as_str()).unwrap_or_default();
        return Err(CliError::runtime(format!(
            "every run ({erred}) ended in an error, so nothing was judged; the first: {first}"
        ))
        .hint("the report holds each run's error; fix what they name and run the suite again"));
    }
    if stopper.stopped() {
        return Err(CliError::runtime(format!(
            "stopped: {} of {} runs ended; the report holds those",
            report_json.runs.len(),
            report_json.tasks.len() as u64 * u64::from(args.runs)
        )));
    }
    Ok(())
}

/// One run, said as it ends.
fn say(ctx: &Ctx, r: &eval::RunReport) {
    let verdict = match r.outcome {
        Outcome::Pass => "pass",
        Outcome::Fail => "FAIL",
        Outcome::Error => "error",
    };
    let detail = if r.detail.is_empty() { String::new() } else { format!(" — {}", r.detail) };
    ctx.out.progress(&format!("· {} run {}: {verdict} in {:.1} s{detail}", r.task, r.run, r.wall_secs));
}

fn rate_line(name: &str, r: &Rates) -> String {
    let k: Vec<String> =
        r.pass_at_k.iter().filter(|(k, _)| *k != "1").map(|(k, v)| format!("pass@{k} {v:.2}")).collect();
    let cost = r.cost_usd.map_or("cost unknown".to_owned(), |c| format!("${c:.4}"));
    let errors = if r.errors > 0 { format!(", {} errors", r.errors) } else { String::new() };
    let rate = r.pass_at_1.map_or("  - ".to_owned(), |p| format!("{p:.2}"));
    format!(
        "{name:<24} pass@1 {rate} [{:.2}, {:.2}] ({}/{}{errors}){}  {} tokens, {cost}, {:.1} s",
        r.interval.0,
        r.interval.1,
        r.passed,
        r.runs,
        if k.is_empty() { String::new() } else { format!("  {}", k.join(" ")) },
        infra::words::thousands(r.tokens),
        r.wall_secs
    )
}

fn print_report(ctx: &Ctx, report: &Report) {
    ctx.out.line("task                     pass@1 [Wilson 95%]");
    for (id, t) in &report.tasks {
        ctx.out.line(&rate_line(id, &t.rates));
    }
    for (name, r) in &report.categories {
        ctx.out.line(&rate_line(&format!("[{name}]"), r));
    }
    ctx.out.line(&rate_line("total", &report.total));
}

fn compare(ctx: &Ctx, a: &std::path::Path, b: &std::path::Path) -> Result<(), CliError> {
    let ra = eval::read_report(a).map_err(error)?;
    let rb = eval::read_report(b).map_err(error)?;
    let c = eval::compare(&ra, &rb);
    if c.tasks.is_empty() {
        let why = match c.unjudged.is_empty() {
            true => "the reports share no task".to_owned(),
            false => format!("every run erred in a or b of each task they share ({})", c.unjudged.join(", ")),
        };
        return Err(CliError::usage(format!("nothing to compare: {why}"))
            .hint("compare reports of suites whose runs were judged (`eval run` says how many erred)"));
    }
    if ctx.out.json {
        ctx.out.event(&serde_json::to_value(&c).unwrap_or_default());
        return Ok(());
    }
    print_comparison(ctx, &c);
    Ok(())
}

fn print_comparison(ctx: &Ctx, c: &Comparison) {
    if !c.unjudged.is_empty() {
        ctx.out.line(&format!("left out, every run erred in a or b: {}", c.unjudged.join(", ")));
    }
    if !c.only_a.is_empty() || !c.only_b.is_empty() {
        ctx.out.line(&format!(
            "the suites differ: only in a: {}; only in b: {} (compared on the tasks both ran)",
            if c.only_a.is_empty() { "none".into() } else { c.only_a.join(", ") },
            if c.only_b.is_empty() { "none".into() } else { c.only_b.join(", ") }
        ));
    }
    // (A sum of nothing is 0, never -0.)
    let cost = |x: Option<f64>| x.map_or("?".to_owned(), |v| format!("${:.4}", if v == 0.0 { 0.0 } else { v }));
    let line = |name: &str, d: &eval::Difference| {
        format!(
            "{name:<24} a {:.2}  b {:.2}  b-a {:+.2}   cost a {}  b {}",
            d.a,
            d.b,
            d.delta,
            cost(d.cost_a),
            cost(d.cost_b)
        )
    };
    for (id, d) in &c.tasks {
        ctx.out.line(&line(id, d));
    }
    for (name, d) in &c.categories {
        ctx.out.line(&line(&format!("[{name}]"), d));
    }
    ctx.out.line(&line("total", &c.total));
    ctx.out.line(&format!(
        "paired runs (McNemar, exact): b better in {}, a better in {}: p = {:.4}",
        c.paired_runs.b_better, c.paired_runs.a_better, c.paired_runs.p_value
    ));
    ctx.out.line(&format!(
        "tasks (sign test): b better on {}, a better on {}: p = {:.4}",
        c.tasks_test.b_better, c.tasks_test.a_better, c.tasks_test.p_value
    ));
}
