//! A workspace of one root and its children, made as the inspect bench makes them:
//! with their dispatch commits, not run (what the chat_tree and serve benches show).

use std::path::Path;

use domain::id::AgentId;
use engine::Env;
use engine::agents::{self, Child, Start};
use engine::store::workspace::{Workspace, template_files};
use infra::time::Timestamp;

/// A new workspace at `at` with a root named `Lead` and `children` below it.
pub fn make(at: &Path, children: usize) -> (Workspace, AgentId, Vec<AgentId>) {
    let ws = Workspace::create(at, &template_files(None).expect("template")).expect("workspace");
    let env = Env::new([("ANTHROPIC_API_KEY".to_owned(), "bench".to_owned())]);
    let spawn = Start {
        message: "Lead a big team.",
        name: Some("Lead"),
        now: Timestamp::now(),
        random: 1,
        env: &env,
        project: None,
        model: None,
        reasoning: None,
        copy_ignored: &[],
        mode: None,
        on_ask: None,
    };
    let root = agents::create_root(&ws, "worker", "default", &spawn).expect("root");
    let made = (0..children)
        .map(|c| {
            let child = Child {
                role: "worker",
                goal: &format!("task {c}"),
                name: None,
                from: None,
                now: Timestamp::now(),
                random: c as u32 + 7,
                env: &env,
                compactor: false,
                key: None,
            };
            agents::create_child(&ws, &root, &child).expect("child")
        })
        .collect();
    (ws, root, made)
}
