//! `offshoot worker`: this workspace (made by `new --from`) drives agents of a remote,
//! beside whatever other workers there are, until Ctrl-C or SIGTERM.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::cli::{CliError, Ctx};
use engine::fleet::remote;
use engine::fleet::worker::{Event, Options, Worker};

/// Drive agents of a remote: claim those with work, drive them here, send each step
/// there; many workers on many machines share one remote (Ctrl-C lets go of them)
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The remote (default: the only one, or `origin`)
    pub(crate) remote: Option<String>,
    /// How many agents it drives at once
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) max_agents: u32,
    /// How long its claim of an agent lives without renewal before another worker may
    /// take the agent over, in milliseconds (it renews every quarter of that)
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(200..=3_600_000))]
    pub(crate) lease_ms: u64,
    /// How long it waits between rounds (fetch, send, claim), in milliseconds
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    pub(crate) interval_ms: u64,
    /// Its name in its claims (default: the host's name, the pid and a random number)
    #[arg(long)]
    pub(crate) name: Option<String>,
}

fn default_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host: String = host.trim().chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
    format!("{}-{}-{:08x}", if host.is_empty() { "host" } else { &host }, std::process::id(), engine::random_u32())
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    let ws = ctx.workspace()?;
    let name = args.name.clone().unwrap_or_else(default_name);
    // (A ref name on the remote too: no `.` at either end, no `..`, no `.lock` ending.)
    let ref_safe = !name.starts_with('.') && !name.ends_with('.') && !name.contains("..") && !name.ends_with(".lock");
    if name.is_empty()
        || name.len() > 100
        || !ref_safe
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(CliError::usage(format!(
            "worker name `{name}` must be 1 to 100 letters, digits, `-`, `_` or `.`, with no `.` at either end, no `..` and no `.lock` ending"
        )));
    }
    let remote = remote::resolve(&ws, args.remote.as_deref()).map_err(super::sync::error)?;
    // Before any thread starts: no network call of a round outlives a quarter lease.
    let lease = Duration::from_millis(args.lease_ms);
    let bound = (lease / 4).clamp(Duration::from_millis(100), Duration::from_secs(30));
    infra::git::remote::set_timeouts(bound, bound);
    let stopping = Arc::new(AtomicBool::new(false));
    {
        let stopping = stopping.clone();
        infra::signals::watch(move |_| stopping.store(true, Ordering::SeqCst));
    }
    let rt = ctx.runtime(&ws);
    let mine = ctx.template_config()?;
    let options = Options { name: name.clone(), max_agents: args.max_agents as usize, lease, mine };
    let mut worker = Worker::new(&ws, &rt, remote.clone(), options).map_err(CliError::runtime_from)?;
    ctx.out.progress(&format!(
        "· worker `{name}` of `{}` ({}): up to {} agents, lease {} ms; Ctrl-C lets go of them",
        remote.name,
        infra::git::remote::shown_url(&remote.url),
        args.max_agents,
        args.lease_ms
    ));
    let mut say = |e: Event| {
        if ctx.out.json {
            ctx.out.event(&serde_json::to_value(&e).unwrap_or_default());
            return;
        }
        let line = match &e {
            Event::Claimed { agent, took_over: false } => format!("claimed `{agent}`"),
            Event::Claimed { agent, took_over: true } => format!("took `{agent}` over (its lease ran out)"),
            Event::Lost { agent } => format!("lost `{agent}` to another worker; its driver here was killed"),
            Event::Dropped { agent } => format!(
                "let go of `{agent}`: its claim went unrenewed for half a lease twice in a row (the remote is too slow or out of reach); its driver here was killed"
            ),
            Event::Released { agent } => format!("let go of `{agent}`"),
            Event::Pushed { agent, tip } => format!("sent `{agent}` at {}", &tip[..12.min(tip.len())]),
            Event::Forwarded { to, from } => format!("sent a message from `{from}` to `{to}`"),
            Event::Delivered { agent, from } => format!("delivered a message from `{from}` to `{agent}`"),
            Event::Started { agent } => format!("started a driver for `{agent}`"),
            Event::Stopped { agent } => format!("stopped `{agent}` as asked through the remote"),
            Event::Paused { agent, why } => {
                format!(
                    "paused `{agent}`: its provider stayed down past the retries ({why}); its driver starts again after a lease"
                )
            }
            Event::Died { agent } => {
                format!("`{agent}` died three times at the same step (its parent, if any, was told)")
            }
        };
        ctx.out.progress(&format!("· {line}"));
    };
    let interval = Duration::from_millis(args.interval_ms);
    let mut trouble: Option<String> = None;
    while !stopping.load(Ordering::SeqCst) {
        let started = Instant::now();
        match worker.round(&mut say) {
            Ok(()) => trouble = None,
            Err(e) => {
                let words = e.to_string();
                if trouble.as_deref() != Some(words.as_str()) {
                    ctx.out.progress(&format!("· {words}; trying again"));
                }
                trouble = Some(words);
            }
        }
        while started.elapsed() < interval && !stopping.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(10).min(interval));
        }
    }
    let shut = worker.shut_down(&mut say);
    let tally = &worker.tally;
    if ctx.out.json {
        ctx.out.event(&json!({"type": "tally", "worker": name, "tally": tally}));
    } else {
        ctx.out.progress(&format!(
            "· worker `{name}` stopped: {} claimed ({} taken over), {} lost, {} let go unrenewed, {} steps sent, {} messages sent, {} delivered, {} conflicts",
            tally.claimed,
            tally.took_over,
            tally.lost,
            tally.dropped,
            tally.steps_pushed,
            tally.sent,
            tally.delivered,
            tally.conflicts
        ));
    }
    shut.map_err(|e| CliError::runtime(format!("letting go of its agents: {e}")))
}
