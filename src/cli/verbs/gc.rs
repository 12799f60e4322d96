use serde_json::json;

use crate::cli::{CliError, Ctx};
use engine::ops::gc;
use infra::git::pack::Packing;

/// Give back disk: remove the directories of agents with nothing to do (each is made
/// again from its branch when it next runs), fold finished step records, make the
/// harness's repositories one pack each and let go of old objects nothing reaches
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// How old an object nothing reaches (a removed agent's history, a crashed step's
    /// commit) must be before it goes: a number and s, m, h, d or w; at least 1h
    #[arg(long, value_name = "AGE", default_value = "14d")]
    prune_after: String,
}

/// The least grace: a driver at work writes objects before its branch names them.
const LEAST_GRACE: std::time::Duration = std::time::Duration::from_secs(3600);

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    let grace = crate::cli::input::parse_age(&args.prune_after)
        .filter(|d| *d >= LEAST_GRACE)
        .ok_or_else(|| {
            CliError::usage(format!(
                "--prune-after `{}`: give an age of at least 1h, as a number and s, m, h, d or w (e.g. 14d): a driver at work writes objects before its branch names them",
                args.prune_after
            ))
        })?;
    let ws = ctx.workspace()?;
    let here = std::env::current_dir().ok().and_then(|d| std::fs::canonicalize(d).ok());
    let collected = gc::collect(&ws, here.as_deref(), grace)?;
    let mib = |bytes: u64| bytes as f64 / 1_048_576.0;
    if ctx.out.json {
        for (id, bytes) in &collected.dropped {
            ctx.out.event(&json!({"type": "dropped", "agent": id.as_str(), "bytes": bytes}));
        }
        for (id, why) in &collected.kept {
            ctx.out.event(&json!({"type": "kept", "agent": id.as_str(), "why": why}));
        }
        ctx.out.event(&json!({"type": "folded", "records": collected.folded}));
        for (name, packing) in [("repo.git", &collected.repo), ("project.git", &collected.project)] {
            let event = match packing {
                Packing::Done(p) => json!({"type": "packed", "repository": name, "objects": p.objects,
                    "pruned": p.pruned, "bytes_before": p.loose_bytes, "bytes_after": p.pack_bytes}),
                Packing::Nothing => json!({"type": "packed", "repository": name, "objects": 0}),
                Packing::Busy => json!({"type": "busy", "repository": name}),
            };
            ctx.out.event(&event);
        }
        return Ok(());
    }
    let freed: u64 = collected.dropped.iter().map(|(_, b)| b).sum();
    if !collected.dropped.is_empty() {
        ctx.out.progress(&format!(
            "· removed the directories of {} agents with nothing to do ({:.1} MiB); each is made again from its branch when it next runs (ignored files such as build output are not in its history and are gone)",
            collected.dropped.len(),
            mib(freed)
        ));
    }
    for (id, why) in &collected.kept {
        ctx.out.progress(&format!("· kept the directory of `{id}`: {why}"));
    }
    if collected.folded > 0 {
        ctx.out.progress(&format!("· folded {} finished step records into one file each", collected.folded));
    }
    for (name, packing) in [("repo.git", &collected.repo), ("project.git", &collected.project)] {
        match packing {
            Packing::Done(p) => ctx.out.progress(&format!(
                "· {name}: {} objects in one pack{}, {:.1} MiB before, {:.1} MiB after",
                p.objects,
                match p.pruned {
                    0 => String::new(),
                    n => format!(", {n} that nothing reached for {} let go", args.prune_after),
                },
                mib(p.loose_bytes),
                mib(p.pack_bytes)
            )),
            Packing::Nothing => ctx.out.progress(&format!("· {name}: nothing to merge")),
            Packing::Busy => ctx.out.progress(&format!(
                "· {name}: not merged: another packer (a driver's, or another gc) is at work; run gc again later"
            )),
        }
    }
    Ok(())
}
