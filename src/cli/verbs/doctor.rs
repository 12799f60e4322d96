use serde_json::json;

use crate::cli::{CliError, Ctx};
use engine::ops::doctor::{self, Finding, Fix};

/// Check every invariant of the workspace: transcripts valid on the wire, inboxes,
/// marks, stray and lock files, every object reachable; exit 0 only when all hold
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Make the safe repairs (stray temporary and lock files, marks of missing agents)
    /// and check again
    #[arg(long)]
    pub(crate) repair: bool,
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    let ws = ctx.workspace()?;
    let (mut findings, mut checked) = doctor::check(&ws)?;
    if args.repair && !findings.is_empty() {
        for done in doctor::repair(&ws, &findings) {
            if ctx.out.json {
                ctx.out.event(&json!({"type": "repaired", "what": done}));
            } else {
                ctx.out.progress(&format!("· {done}"));
            }
        }
        (findings, checked) = doctor::check(&ws)?;
    }
    for f in &findings {
        say(ctx, f);
    }
    let count = |n: usize, one, many| infra::words::count(n as u64, one, many);
    let summary = [
        count(checked.agents, "agent", "agents"),
        count(checked.entries, "transcript entry", "transcript entries"),
        count(checked.inbox_files, "inbox file", "inbox files"),
        count(checked.commits, "commit", "commits"),
        count(checked.objects, "object", "objects"),
    ]
    .join(", ");
    if ctx.out.json {
        ctx.out.event(&json!({"type": "checked", "findings": findings.len(), "agents": checked.agents,
            "entries": checked.entries, "inbox_files": checked.inbox_files, "commits": checked.commits,
            "objects": checked.objects, "spans_dropped": checked.spans_dropped}));
    } else if checked.spans_dropped > 0 {
        ctx.out.progress(&format!(
            "· {} not sent to the trace collector (it was out of reach, or they came faster than it took them)",
            infra::words::count(checked.spans_dropped, "span was", "spans were")
        ));
    }
    if findings.is_empty() {
        if !ctx.out.json {
            ctx.out.progress(&format!("· healthy: checked {summary}"));
        }
        return Ok(());
    }
    let repairable = findings.iter().filter(|f| !matches!(f.fix, Fix::Manual(_))).count();
    let mut err = CliError::runtime(format!("{} (checked {summary})", count(findings.len(), "finding", "findings")));
    if repairable > 0 {
        err = err.hint(format!("`offshoot doctor --repair` makes the {repairable} safe repairs"));
    }
    if ctx.out.json {
        ctx.out.ended();
    }
    Err(err)
}

fn say(ctx: &Ctx, f: &Finding) {
    let (fix, how) = match &f.fix {
        Fix::RemoveFile(p) => ("repair", format!("`--repair` removes {}", p.display())),
        Fix::PutBackGit(id) => ("repair", format!("`--repair` puts back agent `{id}`'s git as the harness keeps it")),
        Fix::RemoveDir(p) => ("repair", format!("`--repair` removes {} and what is in it", p.display())),
        Fix::DeleteRef(r) => ("repair", format!("`--repair` deletes {r}")),
        Fix::TakeBase(c) => ("repair", format!("`--repair` copies commit {c} from project.git, which holds it")),
        Fix::Manual(m) => ("manual", m.clone()),
    };
    if ctx.out.json {
        ctx.out.event(&json!({"type": "finding", "what": f.what, "fix": fix, "how": how}));
    } else {
        ctx.out.line(&format!("✗ {}\n  → {how}", f.what));
    }
}
