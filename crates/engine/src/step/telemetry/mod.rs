//! OpenTelemetry traces of a driver's run, in the GenAI semantic conventions: an
//! observer of the step loop (`Traced`, between the driver and the events log) that
//! makes one `invoke_agent` span per agent, one `chat` span per model call and one
//! `execute_tool` span per tool call, and hands them to `infra::otel`'s exporter. Off
//! (nothing made, nothing started) unless the standard variables name a collector.
//!
//! Every id is derived, never drawn: the trace from the root agent (its id and when it
//! was made), an agent's span from the trace and the agent, a call's from the agent and
//! the step, a tool call's from the agent and the call's id. So a driver relaunched
//! after a kill, a child in its own process and an agent driven by a worker on another
//! machine all land in the one trace of their tree, each under its parent's span.

use std::collections::HashMap;
use std::time::SystemTime;

use domain::id::AgentId;
use infra::otel::{self, Exporter, Settings, Span, Value};
use infra::provider::{Stop, Usage};

use super::events::{End, Event, Logged, Observer, Policy};
use content::CONTENT_MAX;

mod content;
use crate::store::workspace::Workspace;

/// Every attribute name, in one place: the GenAI conventions are still "development"
/// status, and their names may move.
pub mod names {
    pub const OPERATION: &str = "gen_ai.operation.name";
    pub const AGENT_ID: &str = "gen_ai.agent.id";
    pub const AGENT_NAME: &str = "gen_ai.agent.name";
    pub const CONVERSATION_ID: &str = "gen_ai.conversation.id";
    pub const PROVIDER: &str = "gen_ai.provider.name";
    pub const REQUEST_MODEL: &str = "gen_ai.request.model";
    pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
    pub const INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
    pub const OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
    pub const CACHE_READ_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
    pub const CACHE_WRITE_TOKENS: &str = "gen_ai.usage.cache_creation.input_tokens";
    pub const FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
    pub const TOOL_NAME: &str = "gen_ai.tool.name";
    pub const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
    pub const TOOL_TYPE: &str = "gen_ai.tool.type";
    pub const ERROR_TYPE: &str = "error.type";
    pub const COMMIT: &str = "offshoot.commit";
    pub const WORKSPACE: &str = "offshoot.workspace";
    pub const STEP: &str = "offshoot.step";
    pub const ROLE: &str = "offshoot.role";
    pub const COST_USD: &str = "offshoot.cost_usd";
    pub const ATTEMPTS: &str = "offshoot.attempts";
    pub const TOOL_OUTCOME: &str = "offshoot.tool.outcome";
    pub const END: &str = "offshoot.end";
    pub const COMPACTOR: &str = "offshoot.compaction.compactor";
    pub const COMPACTION_OUTCOME: &str = "offshoot.compaction.outcome";
    pub const NOTE: &str = "offshoot.note";
    /// A tool call's `policy_decision` event: whether it ran, the rule's verdict, the
    /// rule and its key, what the hooks decided, a question's answer.
    pub const POLICY_OUTCOME: &str = "offshoot.policy.outcome";
    pub const POLICY_VERDICT: &str = "offshoot.policy.verdict";
    pub const POLICY_RULE: &str = "offshoot.policy.rule";
    pub const POLICY_KEY: &str = "offshoot.policy.key";
    pub const POLICY_HOOKS: &str = "offshoot.policy.hooks";
    /// With content captured: the commands of those hooks.
    pub const POLICY_HOOK_COMMANDS: &str = "offshoot.policy.hook_commands";
    pub const POLICY_ANSWER: &str = "offshoot.policy.answer";
    /// With content captured: the answer, the tool call's input and its result.
    pub const OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
    pub const INPUT_MESSAGES: &str = "gen_ai.input.messages";
    pub const SYSTEM_INSTRUCTIONS: &str = "gen_ai.system_instructions";
    pub const TOOL_ARGUMENTS: &str = "gen_ai.tool.call.arguments";
    pub const TOOL_RESULT: &str = "gen_ai.tool.call.result";
    /// The variable that lets content into spans (`true`).
    pub const CAPTURE_CONTENT: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";
}

/// The file of an agent's step records that counts the spans its runs could not send
/// (`doctor` says how many).
pub const DROPPED: &str = "spans-dropped";

/// How long the end of a run waits for its last spans to be sent.
const FLUSH_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// The events log of a run, traced; with telemetry off, only the log.
pub(crate) struct Traced<'o> {
    logged: Logged<'o>,
    on: Option<On>,
}

/// A run being traced.
struct On {
    exporter: Exporter,
    endpoint: String,
    steps_dir: std::path::PathBuf,
    trace: [u8; 16],
    agent: AgentId,
    name: Option<String>,
    role: String,
    root: String,
    workspace: String,
    /// This agent's span, and its parent agent's.
    span: [u8; 8],
    parent: Option<[u8; 8]>,
    made: SystemTime,
    ws_root: std::path::PathBuf,
    chat: Option<Chat>,
    /// The tool calls under way, by id: when each began, and its input (captured).
    tools: HashMap<String, (SystemTime, Option<String>)>,
    /// What hides every secret value in what a span says (errors, and content), as the
    /// transcript views hide them.
    redact: infra::redact::Redactor,
    /// Content is captured (`CAPTURE_CONTENT`).
    content: bool,
    /// The step and commit of the last call, for the tools it asked for.
    last: Option<(u32, String)>,
    /// This run's calls, summed.
    input: u64,
    output: u64,
    cost: Option<f64>,
    events: Vec<otel::Event>,
}

/// What a call's answer says of it.
struct Answered<'a> {
    usage: &'a Usage,
    cost: Option<f64>,
    stop: &'a Stop,
    /// The model that answered, as the provider named it.
    model: Option<&'a str>,
}

/// A model call under way.
struct Chat {
    step: u32,
    provider: String,
    model: String,
    commit: String,
    start: SystemTime,
    failed_attempts: u32,
    last_error: Option<String>,
    /// Its answer's text as it streamed (kept only when content is captured).
    text: String,
    /// What it was given: its system prompt and messages, redacted (captured).
    input: Option<(String, String)>,
}

impl<'o> Traced<'o> {
    /// The run of `id` in `ws`, logged by `logged`, traced when `env` (the driver's
    /// variables) names a collector; why it cannot be, said once in the log.
    /// (`[telemetry]` of the agent's config when the variables do not say.)
    pub(crate) fn new(ws: &Workspace, env: &crate::Env, id: &AgentId, mut logged: Logged<'o>) -> Traced<'o> {
        let tip = ws.repo.branch_tip(&id.branch()).ok().flatten();
        let facts = tip.and_then(|tip| crate::store::snapshot::read_facts(&ws.repo, tip).ok());
        let config = facts.as_ref().and_then(|f| ws.config(&f.lineage).ok()).map(|(_, config)| config);
        let endpoint = config.as_ref().and_then(|c| c.telemetry.endpoint.as_deref());
        let on = match Settings::from_vars(|name| env.get(name).map(str::to_owned), endpoint) {
            Ok(None) => None,
            Ok(Some(settings)) => match On::start(ws, env, id, &settings, facts.zip(config)) {
                Ok(on) => Some(on),
                Err(why) => {
                    logged.event(Event::Warning(&format!("no traces for this run: {why}")));
                    None
                }
            },
            Err(e) => {
                logged.event(Event::Warning(&format!("no traces for this run: {e}")));
                None
            }
        };
        Traced { logged, on }
    }

    /// Ends the run with `end`: the agent's span sent, with what is left (waiting a
    /// little for it), then the log's last line.
    pub(crate) fn end(&mut self, end: End) {
        if let Some(on) = &mut self.on {
            on.end_agent(&end);
            // (Tracing goes on: mail that came meanwhile starts another round.)
            let sent = on.exporter.flush(FLUSH_WITHIN);
            if let Some(why) = sent.failure {
                self.logged.event(Event::Warning(&failed(&on.endpoint, &why)));
            }
            if sent.dropped > 0 {
                count_dropped(&on.steps_dir, sent.dropped);
            }
        }
        self.logged.end(end);
    }
}

/// Adds `n` to the spans dropped that `steps_dir`'s [`DROPPED`] counts (written whole).
fn count_dropped(steps_dir: &std::path::Path, n: u64) {
    let file = steps_dir.join(DROPPED);
    let before: u64 = std::fs::read_to_string(&file).ok().and_then(|t| t.trim().parse().ok()).unwrap_or(0);
    let new = file.with_extension("new");
    if std::fs::write(&new, format!("{}\n", before.saturating_add(n))).is_ok() {
        let _ = std::fs::rename(&new, &file);
    }
}

/// Spans the runs of the agent whose step records are `steps_dir` could not send.
pub fn dropped(steps_dir: &std::path::Path) -> u64 {
    std::fs::read_to_string(steps_dir.join(DROPPED)).ok().and_then(|t| t.trim().parse().ok()).unwrap_or(0)
}

fn failed(endpoint: &str, why: &str) -> String {
    format!("traces could not be sent to {endpoint}: {why}; the run goes on without them")
}

/// The ids of `id`'s tree: its trace (from its root), and the span of agent `agent`.
fn agent_span(trace: &[u8; 16], agent: &str) -> [u8; 8] {
    otel::derived_id(&["agent", &hex(trace), agent])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// When an RFC 3339 time (`2026-12-07T01:02:03Z`) was, to the second.
fn at(text: &str) -> Option<SystemTime> {
    infra::time::parse_unix_seconds(text).map(|s| SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(s))
}

impl On {
    /// What `event` adds to the spans under way.
    fn observe(&mut self, event: &Event<'_>) {
        match event {
            Event::StepStarted { step, provider, model, commit, system, messages } => {
                self.end_chat(None);
                let input = self.content.then(|| content::input_messages(&self.redact, system, messages));
                self.chat = Some(Chat {
                    input,
                    step: *step,
                    provider: (*provider).to_owned(),
                    model: (*model).to_owned(),
                    commit: (*commit).to_owned(),
                    start: SystemTime::now(),
                    failed_attempts: 0,
                    last_error: None,
                    text: String::new(),
                });
            }
            Event::Delta(infra::provider::Delta::Text(piece)) if self.content => {
                if let Some(chat) = &mut self.chat {
                    chat.text.push_str(piece);
                }
            }
            Event::AttemptFailed { error, .. } => {
                if let Some(chat) = &mut self.chat {
                    chat.failed_attempts += 1;
                    chat.last_error = Some((*error).to_owned());
                }
            }
            Event::Usage { usage, cost_usd, stop, model, .. } => {
                self.end_chat(Some(Answered { usage, cost: *cost_usd, stop, model: *model }))
            }
            Event::ToolStarted { id, input, .. } => {
                let input = self.content.then(|| content::arguments(&self.redact, input, CONTENT_MAX));
                self.tools.insert((*id).to_owned(), (SystemTime::now(), input));
            }
            Event::ToolFinished { id, name, is_error, summary, output, policy } => {
                self.tool_finished(id, name, (*is_error, summary, output), policy);
            }
            Event::Compaction { compactor, outcome, note } => self.events.push(otel::Event {
                name: "compaction".into(),
                at: SystemTime::now(),
                attributes: vec![
                    (names::COMPACTOR, Value::Str((*compactor).to_owned())),
                    (names::COMPACTION_OUTCOME, Value::Str((*outcome).to_owned())),
                    (names::NOTE, Value::Str((*note).to_owned())),
                ],
            }),
            _ => {}
        }
    }

    /// `read`: the agent's facts and config.
    fn start(
        ws: &Workspace,
        env: &crate::Env,
        id: &AgentId,
        settings: &Settings,
        read: Option<(domain::agent::AgentFacts, domain::config::Config)>,
    ) -> Result<On, String> {
        let (facts, config) = read.ok_or_else(|| format!("agent `{id}` or its config does not read"))?;
        let facts_of = |agent: &AgentId| {
            let tip = ws.repo.branch_tip(&agent.branch()).ok().flatten()?;
            crate::store::snapshot::read_facts(&ws.repo, tip).ok()
        };
        let root = id.root();
        let root_made = facts_of(&root).map(|f| f.created).unwrap_or_default();
        let trace = otel::derived_id(&["trace", root.as_str(), &root_made]);
        // (The variable, when set, says; else the config.)
        let content = match env.get(names::CAPTURE_CONTENT).map(str::trim).filter(|v| !v.is_empty()) {
            Some(v) => v.eq_ignore_ascii_case("true"),
            None => config.telemetry.capture_content,
        };
        let redact = infra::redact::Redactor::new(domain::tool_env::secret_values(env.vars(), &config));
        let exporter = Exporter::start(settings).map_err(|e| e.to_string())?;
        Ok(On {
            exporter,
            endpoint: settings.shown_endpoint(),
            steps_dir: ws.layout.steps(id),
            span: agent_span(&trace, id.as_str()),
            parent: id.parent().map(|p| agent_span(&trace, p.as_str())),
            trace,
            name: facts.name.clone(),
            role: facts.role.clone(),
            root: root.to_string(),
            workspace: ws.layout.root().display().to_string(),
            made: at(&facts.created).unwrap_or_else(SystemTime::now),
            ws_root: ws.layout.root().to_owned(),
            agent: id.clone(),
            chat: None,
            tools: HashMap::new(),
            last: None,
            redact,
            content,
            input: 0,
            output: 0,
            cost: None,
            events: Vec::new(),
        })
    }

    /// `text` redacted and cut to [`CONTENT_MAX`], when content is captured.
    fn captured(&self, text: &str) -> Option<String> {
        self.content.then(|| self.said(text))
    }

    /// `text` (an error's words, content) redacted and cut to [`CONTENT_MAX`].
    fn said(&self, text: &str) -> String {
        content::said(&self.redact, text, CONTENT_MAX)
    }

    /// What every span of this agent carries.
    fn common(&self, operation: &str) -> Vec<(&'static str, Value)> {
        let mut list = vec![
            (names::OPERATION, Value::Str(operation.to_owned())),
            (names::AGENT_ID, Value::Str(self.agent.to_string())),
            (names::CONVERSATION_ID, Value::Str(self.root.clone())),
            (names::WORKSPACE, Value::Str(self.workspace.clone())),
        ];
        if let Some(name) = &self.name {
            list.push((names::AGENT_NAME, Value::Str(name.clone())));
        }
        list
    }

    fn span(&self, id: [u8; 8], name: String, start: SystemTime) -> Span {
        Span {
            trace: self.trace,
            id,
            parent: Some(self.span),
            name,
            client: false,
            start,
            end: SystemTime::now(),
            attributes: Vec::new(),
            events: Vec::new(),
            error: None,
        }
    }

    /// Ends the call under way: answered or not.
    fn end_chat(&mut self, answered: Option<Answered<'_>>) {
        let Some(chat) = self.chat.take() else { return };
        let id = otel::derived_id(&["chat", &hex(&self.span), &chat.step.to_string()]);
        let mut span = self.span(id, format!("chat {}", chat.model), chat.start);
        span.client = true;
        span.attributes = self.common("chat");
        span.attributes.extend([
            (names::PROVIDER, Value::Str(chat.provider.clone())),
            (names::REQUEST_MODEL, Value::Str(chat.model.clone())),
            (names::STEP, Value::Int(i64::from(chat.step))),
            (names::COMMIT, Value::Str(chat.commit.clone())),
            (names::ATTEMPTS, Value::Int(i64::from(chat.failed_attempts + u32::from(answered.is_some())))),
        ]);
        if let Some((system, input)) = &chat.input {
            span.attributes.push((names::SYSTEM_INSTRUCTIONS, Value::Str(system.clone())));
            span.attributes.push((names::INPUT_MESSAGES, Value::Str(input.clone())));
        }
        match answered {
            Some(Answered { usage, cost, stop, model }) => {
                let tokens = |n: Option<u64>| Value::Int(n.unwrap_or(0).min(i64::MAX as u64) as i64);
                span.attributes.extend([
                    (names::INPUT_TOKENS, tokens(usage.input)),
                    (names::OUTPUT_TOKENS, tokens(usage.output)),
                    (names::CACHE_READ_TOKENS, tokens(usage.cache_read)),
                    (names::CACHE_WRITE_TOKENS, tokens(usage.cache_write)),
                    (names::FINISH_REASONS, Value::Strs(vec![finish_reason(stop)])),
                ]);
                if let Some(model) = model {
                    span.attributes.push((names::RESPONSE_MODEL, Value::Str(model.to_owned())));
                }
                if let Some(cost) = cost {
                    span.attributes.push((names::COST_USD, Value::Float(cost)));
                    self.cost = Some(self.cost.unwrap_or(0.0) + cost);
                }
                self.input += usage.input.unwrap_or(0);
                self.output += usage.output.unwrap_or(0);
                if let Some(text) = self.captured(&chat.text) {
                    let message =
                        serde_json::json!([{"role": "assistant", "parts": [{"type": "text", "content": text}]}]);
                    span.attributes.push((names::OUTPUT_MESSAGES, Value::Str(message.to_string())));
                }
            }
            None => {
                let why = chat.last_error.clone().unwrap_or_else(|| "the call did not end in an answer".into());
                span.attributes.push((names::ERROR_TYPE, Value::Str("call_failed".into())));
                span.error = Some(self.said(&why));
            }
        }
        self.last = Some((chat.step, chat.commit));
        self.send(span);
    }

    /// A tool call's span: `ended` is whether it ended in an error, its summary, and
    /// what it gave the model; what the policy made of it is an event of the span.
    fn tool_finished(&mut self, call: &str, name: &str, ended: (bool, &str, &str), policy: &Policy) {
        let (is_error, summary, output) = ended;
        let (start, input) = self.tools.remove(call).unwrap_or_else(|| (SystemTime::now(), None));
        let id = otel::derived_id(&["tool", &hex(&self.span), call]);
        let mut span = self.span(id, format!("execute_tool {name}"), start);
        span.attributes = self.common("execute_tool");
        span.attributes.extend([
            (names::TOOL_NAME, Value::Str(name.to_owned())),
            (names::TOOL_CALL_ID, Value::Str(call.to_owned())),
            (names::TOOL_TYPE, Value::Str("function".into())),
            (names::TOOL_OUTCOME, Value::Str(if is_error { "error" } else { "ok" }.into())),
        ]);
        if let Some((step, commit)) = &self.last {
            span.attributes.push((names::STEP, Value::Int(i64::from(*step))));
            span.attributes.push((names::COMMIT, Value::Str(commit.clone())));
        }
        if let Some(input) = input {
            span.attributes.push((names::TOOL_ARGUMENTS, Value::Str(input)));
        }
        if let Some(output) = self.captured(output) {
            span.attributes.push((names::TOOL_RESULT, Value::Str(output)));
        }
        if is_error {
            span.attributes.push((names::ERROR_TYPE, Value::Str("tool_error".into())));
            // (What it said may quote its output: content, only when that is captured.)
            span.error = Some(self.captured(summary).unwrap_or_else(|| "the tool call ended in an error".into()));
        }
        if !policy.is_empty() {
            span.events.push(policy_event(policy, start, self.content));
        }
        self.send(span);
    }

    /// The agent's span, at the end of a run: from when the agent was made to now.
    fn end_agent(&mut self, end: &End) {
        self.end_chat(None);
        let mut span = self.span(self.span, format!("invoke_agent {}", self.name.as_deref().unwrap_or("")), self.made);
        span.parent = self.parent;
        span.attributes = self.common("invoke_agent");
        span.attributes.extend([
            (names::ROLE, Value::Str(self.role.clone())),
            (names::INPUT_TOKENS, Value::Int(self.input.min(i64::MAX as u64) as i64)),
            (names::OUTPUT_TOKENS, Value::Int(self.output.min(i64::MAX as u64) as i64)),
            (names::END, Value::Str(end_word(end).into())),
        ]);
        if let Some(cost) = self.cost {
            span.attributes.push((names::COST_USD, Value::Float(cost)));
        }
        let tip =
            Workspace::open(&self.ws_root).ok().and_then(|ws| ws.repo.branch_tip(&self.agent.branch()).ok().flatten());
        if let Some(tip) = tip {
            span.attributes.push((names::COMMIT, Value::Str(tip.to_string())));
        }
        if let End::Error { error, .. } = end {
            span.error = Some(self.said(error));
        }
        span.events = std::mem::take(&mut self.events);
        self.send(span);
        // (A next round of the same run has totals of its own.)
        (self.input, self.output, self.cost) = (0, 0, None);
    }

    /// Sends `span` with every word in it a model or an agent could have chosen (a tool's
    /// name, an agent's, a note) redacted, its name too.
    fn send(&self, mut span: Span) {
        span.name = self.redact.redact(&span.name);
        let words = |list: &mut Vec<(&'static str, Value)>| {
            for (_, value) in list.iter_mut() {
                match value {
                    Value::Str(text) => *text = self.redact.redact(text),
                    Value::Strs(texts) => texts.iter_mut().for_each(|t| *t = self.redact.redact(t)),
                    _ => {}
                }
            }
        };
        words(&mut span.attributes);
        for event in &mut span.events {
            words(&mut event.attributes);
        }
        self.exporter.send(span);
    }
}

/// What the policy made of a tool call, as an event at its start; the hooks' commands
/// (a token may be written in one) only with `content`.
fn policy_event(policy: &Policy, at: SystemTime, content: bool) -> otel::Event {
    let mut attributes =
        vec![(names::POLICY_OUTCOME, Value::Str(if policy.refused { "refused" } else { "ran" }.into()))];
    if let Some((verdict, rule, key)) = &policy.rule {
        attributes.push((names::POLICY_VERDICT, Value::Str((*verdict).to_owned())));
        attributes.push((names::POLICY_RULE, Value::Str(rule.clone())));
        attributes.push((names::POLICY_KEY, Value::Str(key.clone())));
    }
    if !policy.hooks.is_empty() {
        let outcomes = policy.hooks.iter().map(|(outcome, _)| (*outcome).to_owned()).collect();
        attributes.push((names::POLICY_HOOKS, Value::Strs(outcomes)));
        if content {
            let commands = policy.hooks.iter().map(|(_, command)| command.clone()).collect();
            attributes.push((names::POLICY_HOOK_COMMANDS, Value::Strs(commands)));
        }
    }
    if let Some(answer) = &policy.asked {
        attributes.push((
            names::POLICY_ANSWER,
            Value::Str(answer.as_ref().map_or("no".into(), |by| format!("yes from {by}"))),
        ));
    }
    otel::Event { name: "policy_decision".into(), at, attributes }
}

fn finish_reason(stop: &Stop) -> String {
    match stop {
        Stop::EndTurn => "end_turn".into(),
        Stop::ToolUse => "tool_use".into(),
        Stop::MaxTokens => "max_tokens".into(),
        Stop::Refusal => "refusal".into(),
        Stop::Other(other) => other.clone(),
    }
}

fn end_word(end: &End) -> &'static str {
    match end {
        End::FinalResponse { .. } => "final_response",
        End::Busy => "busy",
        End::BudgetExhausted { .. } => "budget_exhausted",
        End::Interrupted { .. } => "interrupted",
        End::Error { .. } => "error",
    }
}

impl Observer for Traced<'_> {
    fn event(&mut self, event: Event<'_>) {
        if let Some(on) = &mut self.on {
            on.observe(&event);
            // Said once, the first time sending failed: the run goes on without traces.
            if let Some(why) = on.exporter.failure() {
                let words = failed(&on.endpoint, &why);
                self.logged.event(Event::Warning(&words));
            }
        }
        self.logged.event(event);
    }
}
