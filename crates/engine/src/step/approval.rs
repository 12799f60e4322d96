//! A call that needs a yes: who answers it. First the agent's ancestors, nearest
//! first, each by its own rules only (an ancestor answers for its subtree what its
//! rules say of the call, never more); then a standing yes for the tree (`approve
//! --for-tree`); then the `PermissionRequest` hooks; then a person (the `Notification`
//! hooks hear of it), through the
//! workspace's queue — if the run says someone listens (`--on-ask wait`). Otherwise it
//! is refused at once, saying so, or (`--on-ask fail`) it ends the run.

use std::time::Duration;

use serde_json::{Value, json};

use domain::agent::AgentFacts;
use domain::config::Config;
use domain::id::AgentId;
use domain::permissions::{self, Verdict};
use domain::question::{Answer, OnAsk, Policy, Question, Waiter};
use infra::time::Timestamp;

use crate::step::hooks;
use crate::step::tools::ToolContext;
use crate::store::queue::Queue;
use crate::store::snapshot;

/// What came of asking.
#[derive(Debug)]
pub(crate) enum Settled {
    /// Run it; who said so.
    Yes(String),
    /// Do not; what the model is told.
    No(String),
    /// End the run (`--on-ask fail`): what to say.
    Fail(String),
}

/// How often a waiting call looks for its answer.
const POLL: Duration = Duration::from_millis(100);

/// Settles `question` for the call `id` of `cx` (`hooks_said` runs the
/// `PermissionRequest` hooks). Writes what it did to the call's record through `note`.
pub(crate) fn settle(
    cx: &ToolContext,
    question: &Question,
    permission_hooks: &dyn Fn() -> Vec<hooks::Ran>,
    notify: &dyn Fn(&str) -> Vec<hooks::Ran>,
    note: &mut dyn FnMut(&str, Value),
) -> Settled {
    let Some(agent) = cx.agent else { return Settled::No(nobody(question)) };
    let Some(policy) = agent.policy else { return Settled::No(nobody(question)) };
    if question.escalation.is_none()
        && let Some(config) = agent.config
        && let Some(said) = ancestors_say(cx, config, agent.facts, question)
    {
        note("answer.json", json!({"by": said.0, "yes": said.1}));
        return if said.1 {
            Settled::Yes(said.0)
        } else {
            Settled::No(format!("{} said no to this call; nothing ran", said.0))
        };
    }
    let queue = Queue::new(agent.runtime.layout());
    // A call that asked before its driver stopped takes the answer of its question.
    let waiter = waiter(cx, policy);
    if queue.place(question, &waiter).is_some() {
        return wait(cx, &queue, question, &waiter, &|_| Vec::new(), note);
    }
    if let Some(grant) = queue.granted(question, &policy.root) {
        let by = format!("{} (for this tree, on question {})", grant.by, grant.question);
        note("answer.json", json!({"by": by, "yes": true}));
        return Settled::Yes(by);
    }
    let heard = permission_hooks();
    if !heard.is_empty() {
        note("permission-hooks.json", serde_json::to_value(&heard).unwrap_or(Value::Null));
    }
    for ran in &heard {
        match ran.outcome {
            hooks::Outcome::Allow => return Settled::Yes(format!("the hook `{}`", ran.command)),
            hooks::Outcome::Block => {
                return Settled::No(format!("refused by the hook `{}`: {}; nothing ran", ran.command, ran.said));
            }
            hooks::Outcome::Failed => {
                return Settled::No(format!(
                    "the hook `{}` failed ({}), and a failed guard refuses: nothing ran",
                    ran.command, ran.said
                ));
            }
            hooks::Outcome::Pass | hooks::Outcome::Ask => {}
        }
    }
    match policy.on_ask {
        OnAsk::Deny => Settled::No(nobody(question)),
        OnAsk::Fail => Settled::Fail(format!(
            "{} needs a person's yes, and this run was told to fail then (`--on-ask fail`)",
            question.why
        )),
        OnAsk::Wait => wait(cx, &queue, question, &waiter, notify, note),
    }
}

/// The call of `cx` as a waiter on a question.
fn waiter(cx: &ToolContext, policy: &Policy) -> Waiter {
    let facts = cx.agent.map(|a| a.facts);
    Waiter {
        agent: facts.map(|f| f.id.clone()).unwrap_or_default(),
        branch: facts.and_then(|f| f.name.clone()),
        root: policy.root.clone(),
        call: cx.key.clone().unwrap_or_default(),
        at: Timestamp::now().to_string(),
    }
}

/// What the model is told when no one can answer.
fn nobody(question: &Question) -> String {
    format!("{} asks for a person's yes first, and no one is here to answer: refused; nothing ran", question.why)
}

/// Puts the call on the queue and waits for its answer (or a stop).
fn wait(
    cx: &ToolContext,
    queue: &Queue,
    question: &Question,
    waiter: &Waiter,
    notify: &dyn Fn(&str) -> Vec<hooks::Ran>,
    note: &mut dyn FnMut(&str, Value),
) -> Settled {
    let Some(agent) = cx.agent else { return Settled::No(nobody(question)) };
    // (Noted before it is asked: a driver killed in between runs the call again, and
    // it finds its place.)
    note("asking.json", json!({}));
    let ask = || queue.ask(question, waiter);
    let mut id = match ask() {
        Ok(id) => id,
        Err(e) => return Settled::No(format!("{}; the question could not be asked ({e}): refused", question.why)),
    };
    note("question.json", json!({"id": id}));
    // (A desktop notifier, a pager: `Notification` hooks hear that a yes is wanted,
    // once a question, from its first asker.)
    let first = queue.entry(&id).is_some_and(|e| e.waiters.len() == 1);
    let heard = if !first {
        Vec::new()
    } else {
        notify(&format!("{} needs your permission to use {} (question {id})", waiter.agent, question.tool))
    };
    if !heard.is_empty() {
        note("notification-hooks.json", serde_json::to_value(&heard).unwrap_or(Value::Null));
    }
    let interrupt = agent.runtime.interrupt();
    loop {
        if let Some(answer) = queue.answer_of(&id) {
            note("answer.json", serde_json::to_value(&answer).unwrap_or(Value::Null));
            return match answer {
                Answer { yes: true, by, .. } => Settled::Yes(format!("{by} (question {id})")),
                no => Settled::No(no.refusal(&id)),
            };
        }
        // (Withdrawn by its last other waiter as this one joined: asked again.)
        if !queue.exists(&id)
            && let Ok(again) = ask()
        {
            id = again;
            note("question.json", json!({"id": id}));
        }
        if let Some(reason) = interrupt.reason() {
            queue.withdraw(&id, waiter);
            return Settled::No(format!(
                "{} while it waited for an answer to question {id}; nothing ran",
                reason.words()
            ));
        }
        std::thread::sleep(POLL);
    }
}

/// The nearest ancestor whose rules decide the call, and whether they let it run.
fn ancestors_say(cx: &ToolContext, config: &Config, facts: &AgentFacts, question: &Question) -> Option<(String, bool)> {
    let agent = cx.agent?;
    let ws = agent.workspace().ok()?;
    let (root, cwd) = (cx.env.root.to_string_lossy(), cx.env.cwd.to_string_lossy());
    let place = permissions::Place { root: &root, cwd: &cwd, home: agent.runtime.env().get("HOME") };
    let mut parent = facts.parent.clone();
    while let Some(id) = parent {
        let id = AgentId::parse(&id).ok()?;
        let tip = ws.repo.branch_tip(&id.branch()).ok()??;
        let above = snapshot::read_facts(&ws.repo, tip).ok()?;
        let sets = config.permissions(&above.role);
        let sets: Vec<(&str, &permissions::Permissions)> = sets.iter().map(|(k, p)| (k.as_str(), *p)).collect();
        match permissions::decide(&sets, &question.tool, &question.input, &place) {
            Some(d) if d.verdict == Verdict::Allow => return Some((format!("{id} (its rule `{}`)", d.rule), true)),
            Some(d) if d.verdict == Verdict::Deny => return Some((format!("{id} (its rule `{}`)", d.rule), false)),
            _ => {}
        }
        parent = above.parent;
    }
    None
}
