//! `offshoot push` and `offshoot pull`: what this workspace holds of its agents sent to,
//! and taken from, one of its remotes (`offshoot remote`).

use serde_json::json;

use crate::cli::{CliError, Ctx};
use engine::fleet::remote::{self, RemoteError};

/// Send every agent, config lineage and step record to a remote, each only forward
#[derive(Debug, clap::Args)]
pub(crate) struct PushArgs {
    /// The remote (default: the only one, or `origin`)
    pub(crate) remote: Option<String>,
}

/// Take every agent, config lineage and step record a remote has, each only forward
#[derive(Debug, clap::Args)]
pub(crate) struct PullArgs {
    /// The remote (default: the only one, or `origin`)
    pub(crate) remote: Option<String>,
    /// Keep pulling (every `--every-ms`) until Ctrl-C, saying what came
    #[arg(long, short = 'f')]
    pub(crate) follow: bool,
    /// How long `--follow` waits between pulls, in milliseconds
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(100..=3_600_000), requires = "follow")]
    pub(crate) every_ms: u64,
    /// Run the remote's config lineages as pushed, its providers, MCP servers, tool
    /// environment and sandbox included (by default those stay yours, and what differed
    /// is said)
    #[arg(long)]
    pub(crate) trust_config: bool,
}

pub(crate) fn error(e: RemoteError) -> CliError {
    match e {
        RemoteError::Unknown(_)
        | RemoteError::Which(_)
        | RemoteError::None
        | RemoteError::Unsupported { .. }
        | RemoteError::NotThere { .. }
        | RemoteError::NotHanded { .. } => CliError::usage_from(e),
        _ => CliError::runtime_from(e),
    }
}

pub(crate) fn push(ctx: &Ctx, args: &PushArgs) -> Result<(), CliError> {
    let ws = ctx.workspace()?;
    let remote = remote::resolve(&ws, args.remote.as_deref()).map_err(error)?;
    let pushed = remote::push(&ws, &remote).map_err(error)?;
    if ctx.out.json {
        ctx.out.event(&json!({"type": "pushed", "remote": remote.name, "sent": pushed.sent,
            "behind": pushed.behind, "refused": pushed.refused.iter().map(|(r, w)| json!({"ref": r, "why": w})).collect::<Vec<_>>()}));
    } else {
        ctx.out.progress(&format!("· sent {} refs to `{}`", pushed.sent.len(), remote.name));
        for name in &pushed.behind {
            ctx.out.progress(&format!(
                "· not sent: `{name}` has moved on `{}` since this workspace last saw it",
                remote.name
            ));
        }
        for (name, why) in &pushed.refused {
            ctx.out.progress(&format!("· refused by `{}`: `{name}`: {why}", remote.name));
        }
    }
    if !pushed.behind.is_empty() {
        return Err(CliError::runtime(format!("{} refs were not sent: the remote has moved on", pushed.behind.len()))
            .hint(format!("`offshoot pull {}` takes what it has, then push again", remote.name)));
    }
    if !pushed.refused.is_empty() {
        return Err(CliError::runtime(format!("`{}` refused {} refs", remote.name, pushed.refused.len())));
    }
    Ok(())
}

pub(crate) fn pull(ctx: &Ctx, args: &PullArgs) -> Result<(), CliError> {
    let ws = ctx.workspace()?;
    let remote = remote::resolve(&ws, args.remote.as_deref()).map_err(error)?;
    let template = ctx.template_config()?;
    let config = remote::ConfigFrom { template: &template, trust: args.trust_config };
    if !args.follow {
        let pulled = remote::pull(&ws, &remote, false, config).map_err(error)?;
        report_pulled(ctx, &remote.name, &pulled, args.trust_config);
        return Ok(());
    }
    let stopping = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let stopping = stopping.clone();
        infra::signals::watch(move |_| stopping.store(true, std::sync::atomic::Ordering::SeqCst));
    }
    let every = std::time::Duration::from_millis(args.every_ms);
    let mut trouble: Option<String> = None;
    while !stopping.load(std::sync::atomic::Ordering::SeqCst) {
        let started = std::time::Instant::now();
        match remote::pull(&ws, &remote, false, config) {
            Ok(pulled) => {
                trouble = None;
                // Only what changed is said.
                if !pulled.agents.is_empty() || !pulled.lineages.is_empty() || pulled.records > 0 {
                    report_pulled(ctx, &remote.name, &pulled, args.trust_config);
                }
            }
            // Out of reach for a while: said once, tried again.
            Err(e) => {
                let words = e.to_string();
                if trouble.as_deref() != Some(words.as_str()) {
                    ctx.out.progress(&format!("· {words}; trying again"));
                }
                trouble = Some(words);
            }
        }
        while started.elapsed() < every && !stopping.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    Ok(())
}

/// Per config lineage taken from `from`, the settings where it differed from the user's:
/// kept as the user's, or (`trusted`) taken as `from`'s.
pub(crate) fn say_config(ctx: &Ctx, from: &str, config: &[(String, Vec<String>)], trusted: bool) {
    for (lineage, keys) in config.iter().filter(|(_, k)| !k.is_empty()) {
        let keys = keys.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
        ctx.out.progress(&match trusted {
            true => format!("· config lineage `{lineage}`: took {from}'s {keys} over yours (--trust-config)"),
            false => format!(
                "· config lineage `{lineage}`: kept your {keys}, which {from} has otherwise (`--trust-config` takes theirs)"
            ),
        });
    }
}

pub(crate) fn report_pulled(ctx: &Ctx, remote: &str, pulled: &remote::Pulled, trusted: bool) {
    let config: Vec<serde_json::Value> =
        pulled.config.iter().map(|(l, keys)| json!({"lineage": l, "settings": keys})).collect();
    if ctx.out.json {
        let said = if trusted { "config_taken" } else { "config_kept" };
        ctx.out.event(&json!({"type": "pulled", "remote": remote, "agents": pulled.agents,
            "lineages": pulled.lineages, "records": pulled.records,
            "kept": pulled.kept.iter().map(|(r, w)| json!({"ref": r, "why": w})).collect::<Vec<_>>(),
            said: config}));
        return;
    }
    say_config(ctx, &format!("`{remote}`"), &pulled.config, trusted);
    ctx.out.progress(&format!(
        "· from `{remote}`: {} and {} new or moved on, {}",
        infra::words::count(pulled.agents.len() as u64, "agent", "agents"),
        infra::words::count(pulled.lineages.len() as u64, "config lineage", "config lineages"),
        infra::words::count(pulled.records as u64, "step record", "step records")
    ));
    for (name, why) in &pulled.kept {
        ctx.out.progress(&format!("· kept as it is here: `{name}`: {why}"));
    }
}
