//! Inspection: the state of agents for `ls`, the conversation for `log`, and a
//! step's request re-assembled from its recorded commit for `show`.

use crate::Cause;
use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;

use crate::step::events::{End, Record};
use domain::agent::AgentFacts;
use domain::config::Config;
use domain::context;
use domain::id::AgentId;
use domain::step::StepMeta;
use domain::transcript::{self, Entry};
use infra::git::{CommitId, GitError};
use infra::lock::LockGuard;
use infra::provider::{Request, Usage};

use crate::agents::budget::Records;
use crate::agents::{self, AgentError};
use crate::store::inbox;
use crate::store::snapshot::{Loader, SnapshotError};
use crate::store::workspace::{Workspace, WorkspaceError};

#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error("agent `{id}` has no step {step} (it has {have})")]
    NoStep { id: AgentId, step: u32, have: u32 },
    #[error("the record of step {step} is unreadable ({path}): {reason}")]
    BadRecord {
        step: u32,
        path: PathBuf,
        #[source]
        reason: Cause,
    },
    #[error(transparent)]
    Agent(#[from] AgentError),
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
}

type Result<T> = std::result::Result<T, InspectError>;

/// One agent's state for `ls`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AgentState {
    pub id: String,
    pub name: Option<String>,
    pub role: String,
    /// `running` (a driver holds it), `stopped` (by `offshoot stop`, Ctrl-C or its
    /// tree's budget, until the user's message or a run revives it), `waiting` (messages
    /// undelivered and no driver yet), `failed` (a call is due and no driver holds
    /// it: its last call failed or its driver died; `offshoot run` goes on), `done`
    /// (nothing is due), or `damaged` (its branch's tip is not a valid agent commit;
    /// only possible by hand).
    pub state: &'static str,
    /// Model calls made, as `show --step N` numbers them.
    pub steps: u32,
    /// The model of its last call (before its first, its role's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Of its own calls (a fork's inherited history is its origin's).
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Of its own calls at the configured prices; absent when a model has no price.
    pub cost_usd: Option<f64>,
    /// The prompt tokens its last model call reported, and its role's window.
    pub context_tokens: Option<u64>,
    pub context_window: Option<u64>,
    pub goal: String,
    /// When it was made (RFC 3339, UTC; empty for a damaged agent).
    pub created: String,
    /// The agent above it, for children.
    pub parent: Option<String>,
    /// For a fork, the agent it was forked from (read from the commit it continued).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// For a `failed` or `stopped` agent, why, in one line: how its last run ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// Its landed compactions, oldest first: how many passes (compactors started) each took.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub compactions: Vec<u32>,
    /// The worker of its remote driving it, as this workspace last saw the remote (a
    /// tree handed to a fleet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
}

pub fn states(ws: &Workspace) -> Result<Vec<AgentState>> {
    states_kept(ws, &mut StatesKept::default())
}

/// What [`states_kept`] keeps between calls: each agent's state, with what it was made
/// of.
#[derive(Default)]
pub struct StatesKept(HashMap<String, (Print, AgentState)>);

/// What an agent's state is made of, in a few reads: its tip (transcript, facts, goal,
/// ledger), the length of its events file (every step, usage, call, result and end its
/// drivers write lengthens it), whether a driver holds it, a stop mark, mail waiting,
/// and its lineage's config (prices, windows).
#[derive(PartialEq)]
pub struct Print {
    tip: CommitId,
    events: u64,
    running: bool,
    stopped: bool,
    pending: bool,
    config: Option<(String, Option<CommitId>)>,
}

/// [`states`] for a reader that asks again and again (`serve`): an agent's state is
/// read again only when what it is made of changed since `kept` was last given it.
pub fn states_kept(ws: &Workspace, kept: &mut StatesKept) -> Result<Vec<AgentState>> {
    let mut loader = Loader::default();
    let mut records = Records::default();
    let mut configs: HashMap<String, Option<Rc<Config>>> = HashMap::new();
    let mut config_tips: HashMap<String, Option<CommitId>> = HashMap::new();
    let mut config_tip =
        |lineage: &str| *config_tips.entry(lineage.to_owned()).or_insert_with(|| ws.config_tip(lineage).ok());
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (branch, tip) in ws.repo.branches("agents/")? {
        let Ok(id) = AgentId::parse(branch.trim_start_matches("agents/")) else { continue };
        seen.insert(id.to_string());
        let mut print = Print {
            tip,
            events: std::fs::metadata(ws.layout.steps(&id).join(crate::step::events::FILE)).map_or(0, |m| m.len()),
            running: LockGuard::is_held(&ws.layout.lock(&id)).unwrap_or(false),
            stopped: ws.repo.mark(crate::agents::lifecycle::STOPPED, id.as_str())?.is_some(),
            pending: inbox::has_pending(&ws.layout, &id),
            config: None,
        };
        if let Some((old, state)) = kept.0.get(id.as_str()) {
            print.config = old.config.as_ref().map(|(lineage, _)| (lineage.clone(), config_tip(lineage)));
            if *old == print {
                out.push(state.clone());
                continue;
            }
        }
        let (facts, damage) = match crate::store::snapshot::read_facts(&ws.repo, tip) {
            Ok(facts) => (Some(facts), None),
            Err(e) => (None, Some(e.to_string())),
        };
        print.config = facts.as_ref().map(|f| (f.lineage.clone(), config_tip(&f.lineage)));
        let listing = agents::Listing { id, facts, tip, damage };
        let state = state_of(ws, &listing, &mut loader, &mut records, &mut configs)?;
        kept.0.insert(listing.id.to_string(), (print, state.clone()));
        out.push(state);
    }
    kept.0.retain(|id, _| seen.contains(id));
    Ok(out)
}

/// One agent's state, read whole.
fn state_of(
    ws: &Workspace,
    l: &agents::Listing,
    loader: &mut Loader,
    records: &mut Records,
    configs: &mut HashMap<String, Option<Rc<Config>>>,
) -> Result<AgentState> {
    let (Some(facts), Ok(entries)) = (&l.facts, loader.entries(&ws.repo, l.tip)) else {
        // A branch that is not a valid agent (only possible by hand) is shown, not fatal.
        return Ok(AgentState {
            id: l.id.to_string(),
            name: None,
            role: String::new(),
            state: "damaged",
            steps: step_count(ws, &l.id),
            model: None,
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: None,
            context_tokens: None,
            context_window: None,
            parent: l.id.parent().map(|p| p.to_string()),
            origin: None,
            goal: format!("(damaged: {})", l.damage.as_deref().unwrap_or("its transcript does not parse")),
            created: String::new(),
            why: None,
            compactions: Vec::new(),
            worker: None,
        });
    };
    let running = LockGuard::is_held(&ws.layout.lock(&l.id)).unwrap_or(false);
    let call_due = transcript::warrants_call(entries) || !transcript::unanswered_calls(entries).is_empty();
    // A tree handed to a remote is driven by its workers: one with work (as this
    // workspace last saw the remote) runs on the worker that claimed it, or waits for
    // one. (A claim on one with nothing to do says nothing: a killed worker's stays.)
    let handed_work = crate::fleet::remote::handed(ws, &l.id)
        && (entries.is_empty() || call_due || crate::fleet::remote::mail_waiting(ws, &l.id));
    let worker = if running || !handed_work { None } else { crate::fleet::remote::claimed_by(ws, &l.id) };
    let state = if running || worker.is_some() {
        "running"
    } else if ws.repo.mark(crate::agents::lifecycle::STOPPED, l.id.as_str())?.is_some() {
        "stopped"
    } else if inbox::has_pending(&ws.layout, &l.id) || entries.is_empty() || handed_work {
        // (An empty transcript: its goal is not delivered yet.)
        "waiting"
    } else if call_due {
        "failed"
    } else {
        "done"
    };
    let own = records.agent(&ws.layout, &l.id);
    let config = configs
        .entry(facts.lineage.clone())
        .or_insert_with(|| ws.config(&facts.lineage).ok().map(|(_, c)| Rc::new(c)))
        .clone();
    let cost_usd = config.as_ref().and_then(|c| own.spend(c).cost_usd).map(domain::budget::usd);
    // How full its context was at its last call: the prompt tokens it reported.
    let context_tokens = entries.iter().rev().find_map(|e| match e {
        Entry::Output { output, .. } => output.usage.input,
        _ => None,
    });
    let role = config.as_ref().and_then(|c| c.role(&facts.role));
    let context_window = role.and_then(|r| r.context_window);
    let model = own.steps.last().map(|s| s.model.clone()).or_else(|| role.map(|r| r.model.clone()));
    let sum = |field: fn(&Usage) -> Option<u64>| own.steps.iter().map(|s| field(&s.usage).unwrap_or(0)).sum();
    // A fork keeps its origin's goal: what it was asked is its own first message.
    let origin = match (&facts.parent, &facts.forked_from) {
        (None, Some(from)) => CommitId::from_str(from)
            .ok()
            .and_then(|c| crate::store::snapshot::read_facts(&ws.repo, c).ok())
            .map(|f| f.id)
            .filter(|o| *o != facts.id),
        _ => None,
    };
    let goal = match origin.as_ref().and_then(|_| fork_message(ws, facts, entries)) {
        Some(message) => message.into_bytes(),
        None => ws.repo.read_file(l.tip, domain::agent::GOAL)?.unwrap_or_default(),
    };
    let ledger = ws.repo.read_file(l.tip, domain::compaction::LEDGER)?.unwrap_or_default();
    let compactions =
        domain::compaction::parse_ledger(&String::from_utf8_lossy(&ledger)).iter().map(|l| l.passes).collect();
    Ok(AgentState {
        id: l.id.to_string(),
        name: facts.name.clone(),
        role: facts.role.clone(),
        state,
        // (A call that failed or was cut off is not kept: it is no step of its.)
        steps: own.steps.iter().filter(|s| s.answered).count() as u32,
        model,
        input_tokens: sum(|u| u.input),
        output_tokens: sum(|u| u.output),
        cost_usd,
        context_tokens,
        context_window,
        goal: String::from_utf8_lossy(&goal).lines().next().unwrap_or("").to_owned(),
        created: facts.created.clone(),
        parent: facts.parent.clone(),
        origin,
        why: matches!(state, "failed" | "stopped").then(|| last_run_end(ws, &l.id)).flatten(),
        compactions,
        worker,
    })
}

/// A fork's own first message: the first user message after what it inherited (the
/// transcript at the commit it continued).
fn fork_message(ws: &Workspace, facts: &AgentFacts, entries: &[Entry]) -> Option<String> {
    let from = CommitId::from_str(facts.forked_from.as_deref()?).ok()?;
    // (What it kept of its origin's: the fork drops calls left unanswered at its start.)
    let mut loader = Loader::default();
    let source = loader.entries(&ws.repo, from).ok()?;
    let inherited = source[..transcript::paired_len(source)].iter().map(Entry::number).max().unwrap_or(0);
    entries.iter().find_map(|e| match e {
        Entry::Message { number, sender, text } if *number > inherited && sender == "user" => {
            Some(domain::inbox::body(text).to_owned())
        }
        _ => None,
    })
}

/// How the agent's last run ended, from the end of its events file: the error of an
/// `end` that was not an answer, or a step that began and never ended (its driver was
/// killed or crashed).
fn last_run_end(ws: &Workspace, id: &AgentId) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(ws.layout.steps(id).join(crate::step::events::FILE)).ok()?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(64 * 1024))).ok()?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail).ok()?;
    let last = tail
        .split(|&b| b == b'\n')
        .rev()
        .filter_map(|l| crate::step::events::Line::parse(l).map(|l| l.record))
        .find(|r| matches!(r, Record::End(_) | Record::Step { .. }))?;
    match last {
        Record::Step { step, .. } => Some(format!("its driver ended during step {step} (killed or crashed)")),
        Record::End(End::Interrupted { reason }) => Some(format!("it was {reason}")),
        Record::End(End::BudgetExhausted { error }) => Some(format!("budget exhausted: {error}")),
        Record::End(End::Error { error, .. }) => Some(error),
        _ => None,
    }
    .map(|why| why.split_whitespace().collect::<Vec<_>>().join(" "))
}

impl AgentState {
    /// How full its context was at its last call, as a whole percentage of the window.
    pub fn context_percent(&self) -> Option<u64> {
        match (self.context_tokens, self.context_window) {
            (Some(tokens), Some(window)) if window > 0 => Some(tokens * 100 / window),
            _ => None,
        }
    }
}

/// The transcript of an agent at its tip, and that tip (read once: what follows the
/// agent goes on from it).
pub fn transcript(ws: &Workspace, id: &AgentId) -> Result<(CommitId, Vec<Entry>)> {
    let tip = tip(ws, id)?;
    Ok((tip, Loader::default().entries(&ws.repo, tip)?.to_vec()))
}

fn tip(ws: &Workspace, id: &AgentId) -> Result<CommitId> {
    ws.repo.branch_tip(&id.branch())?.ok_or_else(|| AgentError::Unknown(id.to_string()).into())
}

/// How many step records an agent has (every model call it made, failed and
/// interrupted ones included).
/// The disk agent `id` takes, as `du` counts it: its directory, its git directory, its
/// step records, index and temporary files (not what it shares in `repo.git`).
pub fn disk_of(ws: &Workspace, id: &AgentId) -> u64 {
    [ws.layout.worktree(id), ws.layout.git_dir(id), ws.layout.steps(id), ws.layout.index(id), ws.layout.tmp(id)]
        .iter()
        .map(|p| du(p))
        .sum()
}

/// The disk below `path` as `du` counts it (blocks; links not followed).
pub(crate) fn du(path: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else { return 0 };
    let mut total = meta.blocks() * 512;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
            total += du(&entry.path());
        }
    }
    total
}

pub fn step_count(ws: &Workspace, id: &AgentId) -> u32 {
    crate::store::step_record::numbers(&ws.layout.steps(id)).len() as u32
}

/// A step's record: its meta.json. A step whose driver died during the call shows
/// as `interrupted`.
pub fn step_meta(ws: &Workspace, id: &AgentId, step: u32) -> Result<StepMeta> {
    let Some(record) = crate::store::step_record::StepRecord::open(&ws.layout, id, step) else {
        return Err(InspectError::NoStep { id: id.clone(), step, have: step_count(ws, id) });
    };
    let path = record.path("meta.json");
    let bytes = match record.read("meta.json") {
        Some(bytes) => bytes,
        // Written before the call since the records became atomic; older crashes
        // can leave a directory without one.
        None => {
            let old = serde_json::json!({"step": step, "agent": id.as_str(), "outcome": "interrupted"});
            return serde_json::from_value(old).map_err(|e| InspectError::BadRecord { step, path, reason: e.into() });
        }
    };
    let meta: StepMeta =
        serde_json::from_slice(&bytes).map_err(|e| InspectError::BadRecord { step, path, reason: e.into() })?;
    Ok(meta.shown(LockGuard::is_held(&ws.layout.lock(id)).unwrap_or(false)))
}

/// The files of a tool call's record a reader gets whole, by the key each is given.
const TOOL_FILES: [(&str, &str); 9] = [
    ("input", "input.json"),
    ("output", "output.json"),
    ("mcp", "mcp.json"),
    ("decision", "decision.json"),
    ("hooks", "hooks.json"),
    ("permission_hooks", "permission-hooks.json"),
    ("notification_hooks", "notification-hooks.json"),
    ("question", "question.json"),
    ("answer", "answer.json"),
];

/// Step `step`'s record beyond its meta, for a reader of it whole.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StepFiles {
    /// What the response stream said, a JSON value a line (`response.ndjson`).
    pub response: Vec<serde_json::Value>,
    /// Each tool call's record (`tools/<call>/`), in order: `call`, and each of its
    /// files there is (`input`, `output`, the gate's, the hooks', the question and its
    /// answer).
    pub tools: Vec<serde_json::Value>,
}

pub fn step_files(ws: &Workspace, id: &AgentId, step: u32) -> Result<StepFiles> {
    let Some(record) = crate::store::step_record::StepRecord::open(&ws.layout, id, step) else {
        return Err(InspectError::NoStep { id: id.clone(), step, have: step_count(ws, id) });
    };
    let response = record.read("response.ndjson").unwrap_or_default();
    let response = String::from_utf8_lossy(&response)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .collect();
    let tools = record
        .tools()
        .into_iter()
        .map(|call| {
            let mut files = serde_json::Map::new();
            for (key, file) in TOOL_FILES {
                let read = record.read(&format!("tools/{call}/{file}"));
                if let Some(value) = read.and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok()) {
                    files.insert(key.to_owned(), value);
                }
            }
            files.insert("call".to_owned(), serde_json::Value::String(call));
            serde_json::Value::Object(files)
        })
        .collect();
    Ok(StepFiles { response, tools })
}

/// What step `step` of `id` changed in its work (its files, not the harness's
/// directory), as a unified diff: from the commit its request was made from to the one
/// the next step's was (after its last step, the tip).
pub fn step_diff(ws: &Workspace, id: &AgentId, step: u32) -> Result<String> {
    let commit_of = |step: u32| -> Result<CommitId> {
        let meta = step_meta(ws, id, step)?;
        meta.commit.parse::<CommitId>().map_err(|_| InspectError::BadRecord {
            step,
            path: ws.layout.step(id, step),
            reason: "it does not record the commit its request was made from".into(),
        })
    };
    let from = commit_of(step)?;
    let to = match step < step_count(ws, id) {
        true => commit_of(step + 1)?,
        false => ws.repo.branch_tip(&id.branch())?.ok_or_else(|| AgentError::Unknown(id.to_string()))?,
    };
    let before = ws.repo.work_tree(from, domain::agent::DIR, None)?;
    let after = ws.repo.work_tree(to, domain::agent::DIR, None)?;
    Ok(ws.repo.trees_diff_text(before, after, false)?)
}

/// What the gate decided for one call of a step: the rule (`decision.json`), the hooks
/// (`hooks.json`, `permission-hooks.json`), the question asked and its answer.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CallPolicy {
    pub call: String,
    pub tool: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hooks: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permission_hooks: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub question: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<serde_json::Value>,
}

/// The gate's decisions for the calls of step `step` that met a rule, a hook or a
/// question, in the order of the calls' records.
pub fn decisions(ws: &Workspace, id: &AgentId, step: u32) -> Result<Vec<CallPolicy>> {
    let Some(record) = crate::store::step_record::StepRecord::open(&ws.layout, id, step) else {
        return Err(InspectError::NoStep { id: id.clone(), step, have: step_count(ws, id) });
    };
    let json = |call: &str, file: &str| {
        record.read(&format!("tools/{call}/{file}")).and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
    };
    let mut out = Vec::new();
    for call in record.tools() {
        let policy = CallPolicy {
            tool: json(&call, "input.json").and_then(|i| i["name"].as_str().map(str::to_owned)).unwrap_or_default(),
            decision: json(&call, "decision.json"),
            hooks: json(&call, "hooks.json"),
            permission_hooks: json(&call, "permission-hooks.json"),
            question: json(&call, "question.json"),
            answer: json(&call, "answer.json"),
            call,
        };
        let said = [&policy.decision, &policy.hooks, &policy.permission_hooks, &policy.question, &policy.answer];
        if said.iter().any(|v| v.is_some()) {
            out.push(policy);
        }
    }
    Ok(out)
}

/// Step `step`'s request, re-assembled from the commit and config its record names.
/// What step `step` of `id` sent, assembled again: the body its provider was sent
/// (none for a replay), and whether that body is the one the record's digest names
/// (none when the record kept no digest: written before digests were kept).
pub struct Resent {
    pub request: Request,
    pub body: Option<Vec<u8>>,
    pub matches: Option<bool>,
    /// The offshoot that made the record, when it said.
    pub version: Option<String>,
}

pub fn resend(ws: &Workspace, id: &AgentId, step: u32) -> Result<Resent> {
    let meta = step_meta(ws, id, step)?;
    let request = reassemble(ws, id, step)?;
    let config_commit = infra::git::ObjectId::from_str(&meta.config).ok();
    let provider = match config_commit {
        Some(at) => ws.config_at(at)?.providers.get(&meta.provider).cloned(),
        None => None,
    };
    let body = provider.and_then(|p| crate::step::model::sent_body(&p, &request));
    let matches = match (&body, &meta.sent) {
        (Some(body), Some(sent)) => Some(infra::provider::digest(body) == sent.sha256),
        _ => None,
    };
    Ok(Resent { request, body, matches, version: meta.version })
}

pub fn reassemble(ws: &Workspace, id: &AgentId, step: u32) -> Result<Request> {
    reassemble_with(ws, id, step, &mut Loader::default())
}

/// [`reassemble`] reading the transcript through `loader` (which keeps what it read:
/// assembling step after step reads each entry once).
pub fn reassemble_with(ws: &Workspace, id: &AgentId, step: u32, loader: &mut Loader) -> Result<Request> {
    let meta = step_meta(ws, id, step)?;
    let path = crate::store::step_record::StepRecord::open(&ws.layout, id, step)
        .map_or_else(|| ws.layout.step(id, step).join("meta.json"), |r| r.path("meta.json"));
    let commit_of = |key: &str, text: &str| {
        infra::git::ObjectId::from_str(text).map_err(|_| InspectError::BadRecord {
            step,
            path: path.clone(),
            reason: format!("no `{key}` commit").into(),
        })
    };
    let (commit, config_commit) = (commit_of("commit", &meta.commit)?, commit_of("config", &meta.config)?);
    let config = ws.config_at(config_commit)?;
    let facts = crate::store::snapshot::read_facts(&ws.repo, commit)?;
    let role = config.role(&facts.role).ok_or_else(|| InspectError::BadRecord {
        step,
        path: path.clone(),
        reason: format!("role `{}` is not in config {config_commit}", facts.role).into(),
    })?;
    let (_, snapshot) = loader.snapshot(&ws.repo, commit, &role.context)?;
    let model = if meta.model.is_empty() { &role.model } else { &meta.model };
    let mut request = context::assemble(&snapshot, model, role.max_output_tokens, &role.context);
    request.reasoning = crate::step::model::reasoning_at(&ws.repo, commit, role)?;
    Ok(request)
}
