use crate::cli::{CliError, Ctx};
use engine::step::compaction::{self, CompactionError};
use engine::{ops::inspect, step::driver};

/// Show one step's record (the latest unless `--step` says which), or the request
/// re-assembled from its commit, or what a compaction removed and the summary it left
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) agent: crate::cli::input::AgentArg,
    /// The step number (1 is the agent's first model call; default: its latest)
    #[arg(long, conflicts_with = "compaction")]
    pub(crate) step: Option<u32>,
    /// Print the request body the provider received, assembled again from the step's
    /// recorded commit and config and checked against the digest the step kept
    #[arg(long, conflicts_with = "compaction")]
    pub(crate) request: bool,
    /// With `--request`: offshoot's canonical form of the request instead of the body
    #[arg(long, requires = "request")]
    pub(crate) canonical: bool,
    /// The landed compaction to show (1 is the first)
    #[arg(long)]
    pub(crate) compaction: Option<u32>,
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    let ws = ctx.workspace()?;
    let id = args.agent.resolve(ctx, &ws)?;
    if let Some(number) = args.compaction {
        let all = compaction::landed(&ws, &id)?;
        let Some(landed) = all.iter().find(|l| l.landing.number == number) else {
            let e = CompactionError::NoLanding { agent: id.to_string(), number, have: all.len() };
            return Err(e.into());
        };
        if ctx.out.json {
            ctx.out.event(&crate::cli::out::compaction_json(landed));
            return Ok(());
        }
        ctx.out.line(&format!(
            "compaction {number} of `{id}` by `{}` (commit {}): {} paths removed",
            landed.landing.compactor,
            landed.commit,
            landed.removed.len()
        ));
        for path in &landed.removed {
            ctx.out.line(&format!("  - {path}"));
        }
        ctx.out.line(&format!("summary `{}`:", landed.landing.summary));
        ctx.out.line(landed.summary.trim_end());
        return Ok(());
    }
    let step = match args.step {
        Some(step) => step,
        None => match inspect::step_count(&ws, &id) {
            0 => {
                return Err(CliError::usage(format!(
                    "agent `{id}` has made no model call yet: it has no step to show"
                )));
            }
            latest => {
                if !ctx.out.json {
                    ctx.out.progress(&format!("· step {latest}, its latest (`--step N` shows another)"));
                }
                latest
            }
        },
    };
    if args.request {
        let resent = inspect::resend(&ws, &id, step)?;
        if resent.matches == Some(false) {
            let by = resent.version.map(|v| format!(" (offshoot {v} assembled it)")).unwrap_or_default();
            ctx.out.progress(&format!(
                "· warning: assembled again, the request of step {step} differs from what was sent{by}: this offshoot ({}) assembles or encodes it differently",
                env!("CARGO_PKG_VERSION")
            ));
        }
        let bytes = match (args.canonical, resent.body) {
            (false, Some(body)) => body,
            _ => driver::request_json(&resent.request),
        };
        if ctx.out.json {
            // The same bytes as one line: JSON lines, like every `--json` output.
            let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
            ctx.out.event(&value);
        } else {
            ctx.out.stream(&String::from_utf8_lossy(&bytes));
        }
        return Ok(());
    }
    let meta = inspect::step_meta(&ws, &id, step)?;
    let policy = inspect::decisions(&ws, &id, step)?;
    if ctx.out.json {
        let mut value = serde_json::to_value(&meta).unwrap_or_default();
        if !policy.is_empty() {
            value["policy"] = serde_json::to_value(&policy).unwrap_or_default();
        }
        ctx.out.event(&value);
        return Ok(());
    }
    ctx.out.line(&serde_json::to_string_pretty(&meta).unwrap_or_default());
    for call in &policy {
        ctx.out.line(&format!("{} ({}):", call.call, call.tool));
        for line in policy_lines(call) {
            ctx.out.line(&format!("  {line}"));
        }
    }
    Ok(())
}

/// What the gate decided for one call, a line each: the rule, each hook, the question
/// and who answered it.
fn policy_lines(call: &inspect::CallPolicy) -> Vec<String> {
    let text = |v: &serde_json::Value, k: &str| v[k].as_str().unwrap_or_default().to_owned();
    let mut lines = Vec::new();
    if let Some(d) = &call.decision {
        lines.push(format!("{} by the rule `{}` ({})", text(d, "verdict"), text(d, "rule"), text(d, "key")));
    }
    for hooks in [&call.hooks, &call.permission_hooks].into_iter().flatten() {
        for ran in hooks.as_array().into_iter().flatten() {
            let said = text(ran, "said");
            let said = if said.is_empty() {
                String::new()
            } else {
                format!(": {}", super::super::progress::one_line(&said, 120))
            };
            lines.push(format!(
                "{} hook `{}`: {}{said}",
                text(ran, "event"),
                text(ran, "command"),
                text(ran, "outcome")
            ));
        }
    }
    if let Some(q) = &call.question {
        lines.push(format!("asked question {}", text(q, "id")));
    }
    if let Some(a) = &call.answer {
        let word = if a["yes"] == true { "yes" } else { "no" };
        let reason = a["reason"].as_str().map(|r| format!(" ({r})")).unwrap_or_default();
        lines.push(format!("{} said {word}{reason}", text(a, "by")));
    }
    lines
}
