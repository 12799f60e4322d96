//! A person's side of the attention queue: the questions waiting (`offshoot pending`),
//! and their answers (`offshoot approve`, `offshoot deny`, the chat's y/n/a). A yes
//! `--for-tree` also stands for the same call from the waiters' trees; `--always`
//! writes an allow rule into the waiters' config lineage as a commit saying who, when
//! and from which question.

use domain::id::AgentId;
use domain::question::{Answer, Scope};
use infra::time::Timestamp;

use crate::Cause;
use crate::store::queue::{Entry, Grant, Queue, QueueError};
use crate::store::snapshot;
use crate::store::workspace::Workspace;

#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error("question `{id}` cannot be answered `--always`: {why}")]
    NoRule { id: String, why: String },
    #[error("the answer is yes, but the rule `{rule}` could not be written into config lineage `{lineage}`")]
    Config {
        rule: String,
        lineage: String,
        #[source]
        source: Cause,
    },
}

/// The questions no one has answered yet, oldest first.
pub fn pending(ws: &Workspace) -> Vec<Entry> {
    Queue::new(&ws.layout).list().into_iter().filter(|e| e.answer.is_none() && !e.waiters.is_empty()).collect()
}

/// The question `id` names: itself, or the one open question it begins.
pub fn find(ws: &Workspace, id: &str) -> Result<String, ApprovalError> {
    let queue = Queue::new(&ws.layout);
    if queue.entry(id).is_some() {
        return Ok(id.to_owned());
    }
    let open: Vec<Entry> = pending(ws).into_iter().filter(|e| !id.is_empty() && e.id.starts_with(id)).collect();
    match open.as_slice() {
        [one] => Ok(one.id.clone()),
        _ => Err(QueueError::Unknown(id.to_owned()).into()),
    }
}

/// A person's answer to question `id`. An `--always` yes writes its rule first, so a
/// rule that cannot be written leaves the question open.
pub fn answer(
    ws: &Workspace,
    id: &str,
    yes: bool,
    scope: Scope,
    reason: Option<String>,
) -> Result<Entry, ApprovalError> {
    let id = find(ws, id)?;
    let queue = Queue::new(&ws.layout);
    let entry = queue.entry(&id).ok_or_else(|| QueueError::Unknown(id.clone()))?;
    let now = Timestamp::now().to_string();
    // An `--always` no rule can carry is refused before anything is answered; the
    // answer is given (the first stands) before the rule is written, so no rule is
    // written for a question someone else answered.
    if yes && scope == Scope::Always {
        carried(&entry)?;
    }
    let answer = Answer { yes, scope, by: "user".to_owned(), at: now.clone(), reason };
    let entry = queue.answer(&id, &answer)?;
    if yes && scope == Scope::Always {
        always(ws, &entry, &now)?;
    }
    if yes && scope == Scope::ForTree {
        let mut roots: Vec<&str> = entry.waiters.iter().map(|w| w.root.as_str()).collect();
        roots.sort_unstable();
        roots.dedup();
        for root in roots {
            let sameness = entry.asked.question.sameness();
            let grant =
                Grant { sameness, root: root.to_owned(), question: id.clone(), by: "user".into(), at: now.clone() };
            queue.grant(&grant)?;
        }
    }
    Ok(entry)
}

/// The rule an `--always` yes to `entry` writes; why it cannot have one otherwise.
fn carried(entry: &Entry) -> Result<String, ApprovalError> {
    let question = &entry.asked.question;
    let no_rule = |why: &str| ApprovalError::NoRule { id: entry.id.clone(), why: why.to_owned() };
    if question.escalation.is_some() {
        return Err(no_rule(
            "it asks beyond the sandbox, which no rule grants; answer it `--for-tree`, or give the role what it needs (`network = true`)",
        ));
    }
    if question.by_rule {
        return Err(no_rule(&format!(
            "{} asked it, and an ask rule beats an allow rule, so one would not answer it; answer it `--for-tree`, or take the ask rule out",
            question.why
        )));
    }
    question.rule.clone().ok_or_else(|| no_rule("no rule says exactly this call and nothing more"))
}

/// Writes the allow rule of `entry` into the role of each waiter, in its lineage.
fn always(ws: &Workspace, entry: &Entry, now: &str) -> Result<(), ApprovalError> {
    let rule = carried(entry)?;
    let mut places: Vec<(String, String)> = entry
        .waiters
        .iter()
        .filter_map(|w| {
            let id = AgentId::parse(&w.agent).ok()?;
            let tip = ws.repo.branch_tip(&id.branch()).ok()??;
            let facts = snapshot::read_facts(&ws.repo, tip).ok()?;
            Some((facts.lineage, facts.role))
        })
        .collect();
    places.sort_unstable();
    places.dedup();
    for (lineage, role) in places {
        let key = format!("roles.{role}.permissions.allow");
        let message = format!("{key} += {rule}\n\nanswered always by user at {now}, on question {}", entry.id);
        let fail = |source: Cause| ApprovalError::Config { rule: rule.clone(), lineage: lineage.clone(), source };
        ws.edit_config_keys(&lineage, &message, &|before: &str| {
            let config = toml::from_str::<toml::Table>(before).unwrap_or_default();
            let mut allow: Vec<String> = config
                .get("roles")
                .and_then(|r| r.get(&role))
                .and_then(|r| r.get("permissions"))
                .and_then(|p| p.get("allow"))
                .and_then(|a| a.as_array())
                .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
                .unwrap_or_default();
            if !allow.contains(&rule) {
                allow.push(rule.clone());
            }
            let value = toml::Value::Array(allow.into_iter().map(toml::Value::String).collect()).to_string();
            crate::store::workspace::set_key(before, &key, &value).map_err(|reason| {
                crate::store::workspace::WorkspaceError::ConfigKey {
                    verb: "set",
                    key: key.clone(),
                    reason: reason.into(),
                }
            })
        })
        .map_err(|e| fail(Box::new(e)))?;
    }
    Ok(())
}
