use crate::cli::progress;
use crate::cli::{CliError, Ctx};
use domain::config::FILE;
use engine::agents::{self, Start};
use engine::random_u32;
use engine::store::workspace::{Workspace, set_key, validate_files};
use infra::time::Timestamp;

const GOAL: &str = include_str!("../../../templates/demo/goal.md");

/// The recorded parts: (provider, role, recording, the role's soul). The parent's
/// role is the default `worker`; it dispatches one helper of each scout role, and a
/// compactor (with the default soul) summarises its first steps.
const PARTS: &[(&str, &str, &str, Option<&str>)] = &[
    ("demo", "worker", include_str!("../../../templates/demo/recording.jsonl"), None),
    (
        "demo-cpu",
        "cpu-scout",
        include_str!("../../../templates/demo/cpu.jsonl"),
        Some("You find facts about this machine's processor and write them down exactly as the commands print them."),
    ),
    ("demo-compactor", "compactor", include_str!("../../../templates/demo/compactor.jsonl"), None),
    (
        "demo-memory",
        "memory-scout",
        include_str!("../../../templates/demo/memory.jsonl"),
        Some("You find facts about this machine's memory and write them down exactly as the commands print them."),
    ),
];

/// Run a recorded session in a fresh workspace, then show where to look
#[derive(Debug, clap::Args)]
pub(crate) struct Args {}

pub(crate) fn run(ctx: &Ctx, _args: &Args) -> Result<(), CliError> {
    progress::watch_signals(ctx);
    let root = match ctx.explicit_workspace() {
        Some(path) => path.clone(),
        None => {
            let stamp = Timestamp::now().to_string().replace([':', '-'], "").to_lowercase();
            ctx.data_root.join("workspaces").join(format!("demo-{stamp}-{:04x}", random_u32() & 0xffff))
        }
    };
    let mut files = ctx.template()?;
    let mut text =
        files.iter().find(|(p, _)| p == FILE).map(|(_, b)| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
    files.retain(|(p, _)| p != FILE);
    // A compaction after six steps: its compactor replays a summary of the first four.
    for (key, value) in [("compaction.trigger", "every_n_steps"), ("compaction.steps", "6")] {
        text = set_key(&text, key, value).map_err(CliError::runtime)?;
    }
    for (provider, role, recording, soul) in PARTS {
        let path = format!("recordings/{provider}.jsonl");
        let mut keys = vec![
            (format!("providers.{provider}.protocol"), "replay".to_owned()),
            (format!("providers.{provider}.recording"), path.clone()),
            (format!("roles.{role}.provider"), (*provider).to_owned()),
            (format!("roles.{role}.model"), format!("recorded-{provider}")),
        ];
        if let Some(soul) = soul {
            keys.push((format!("roles.{role}.tools"), "[\"bash\"]".to_owned()));
            files.push((format!("souls/{role}.md"), format!("{soul}\n").into_bytes()));
        }
        for (key, value) in keys {
            text = set_key(&text, &key, &value).map_err(CliError::runtime)?;
        }
        files.push((path, recording.as_bytes().to_vec()));
    }
    files.push((FILE.to_owned(), text.into_bytes()));
    validate_files(&files).map_err(engine::store::workspace::WorkspaceError::from)?;
    let ws = Workspace::create(&root, &files).map_err(|e| {
        let taken = matches!(e, engine::store::workspace::WorkspaceError::NotEmpty(_));
        let mut err = CliError::from(e);
        if taken {
            // (Without `-w` the demo makes a workspace of its own.)
            err.hints = vec!["give a new or empty directory (or leave `-w` out)".into()];
        }
        err
    })?;
    ctx.out.progress(&format!(
        "· demo workspace {} (model outputs are replayed from a recording; the tools really run)",
        root.display()
    ));
    let spawn = Start {
        message: GOAL.trim(),
        name: Some("DemoReport"),
        now: Timestamp::now(),
        random: random_u32(),
        env: &ctx.env,
        project: None,
        model: None,
        reasoning: None,
        copy_ignored: &[],
        mode: None,
        on_ask: None,
    };
    let id = agents::create_root(&ws, "worker", "default", &spawn)?;
    progress::launch(ctx, &ws, &id, false, false)?;
    let w = root.display();
    // Short, and runnable as printed once the first line has pointed the shell at the
    // workspace.
    let lines = [
        String::new(),
        format!("Where to look (the demo's workspace is {w}):"),
        format!(
            "  agents/{id}/            the agent's directory (REPORT.md and CHECK.md are its work; CPU.md and MEMORY.md its helpers')"
        ),
        format!("  agents/{id}/.offshoot/  goal, soul, tool schemas and the transcript"),
        format!("  steps/{id}/             each step's request, raw response and tool output"),
        "Try (the first line points this shell at the demo's workspace):".into(),
        format!("  export OFFSHOOT_WORKSPACE={w}"),
        "  offshoot tree                                   # the agent and its two helpers".into(),
        "  offshoot log DemoReport".into(),
        "  offshoot show DemoReport --step 2 --request".into(),
        "  offshoot show DemoReport --compaction 1         # what its compaction replaced".into(),
        format!("  git --git-dir \"$OFFSHOOT_WORKSPACE/repo.git\" log --oneline --stat agents/{id}"),
        format!("  git -C \"$OFFSHOOT_WORKSPACE/agents/{id}\" status   # the agent's own git"),
        "  offshoot fork --from DemoReport~2 \"Check the report once more\"".into(),
    ];
    for line in lines {
        ctx.out.progress(&line);
    }
    Ok(())
}
