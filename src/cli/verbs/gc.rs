use serde_json::json;

use crate::cli::{CliError, Ctx};
use crate::engine::gc;
use crate::infra::git::pack::Packing;

/// Give back disk without losing anything: remove the directories of agents with
/// nothing to do (each is made again from its branch when it next runs) and make the
/// harness's repositories one pack each
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(ctx: &Ctx, _args: &Args) -> Result<(), CliError> {
    let ws = ctx.workspace()?;
    let here = std::env::current_dir().ok().and_then(|d| std::fs::canonicalize(d).ok());
    let collected = gc::collect(&ws, here.as_deref())?;
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
                    "bytes_before": p.loose_bytes, "bytes_after": p.pack_bytes}),
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
                "· {name}: {} objects in one pack, {:.1} MiB before, {:.1} MiB after",
                p.objects,
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
