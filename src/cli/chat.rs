//! The chat: `offshoot` with no verb on a terminal (or `offshoot chat [agent]`). A
//! client of the agents' drivers, never one itself: the first message starts a root
//! agent with a detached driver, later ones are left in its inbox and wake it (typed
//! while it works, they wait for its next step), and what it and the agents below it do
//! comes from their events files. Finished lines go into the terminal's own scrollback
//! above a small inline area (status and input), so scrolling, search and copy keep
//! working. Ctrl-C while anything works stops it as `stop` does (the chat stays);
//! Ctrl-C twice within a second, or Ctrl-D on an empty line, leaves — stopping what
//! still works, so no driver or tool is left behind.

use std::io::IsTerminal;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::{Duration, Instant};

use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event as TermEvent, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::crossterm::terminal;
use ratatui::text::Line as TextLine;
use ratatui::widgets::{Paragraph, Widget, Wrap};
use ratatui::{Terminal, TerminalOptions, Viewport};

use crate::domain::id::AgentId;
use crate::engine::agents::{self, Start};
use crate::engine::events::{End, Record};
use crate::engine::runtime::Runtime;
use crate::engine::workspace::Workspace;
use crate::engine::{lifecycle, model, project, random_u32};
use crate::infra::time::Timestamp;

use super::follow::{Follower, View};
use super::{CliError, Ctx};

/// Rows of the live area: the status line and two of input.
const LIVE_ROWS: u16 = 3;
/// The slash commands, and what each does (`/help`).
const COMMANDS: &[(&str, &str)] = &[
    ("tree", "the agent and those below it: state, steps"),
    ("cost", "tokens and cost of the agent and those below it"),
    ("attach <agent>", "chat with another agent (an id or a name)"),
    ("stop", "stop the agent and those below it"),
    ("new", "your next message starts a new agent"),
    ("help", "this list"),
    ("quit", "leave (what works is stopped)"),
];

/// How often, while agents work, the chat checks that their drivers still run (one
/// killed with SIGKILL writes no end).
const RECHECK: Duration = Duration::from_secs(2);

/// How long a first Ctrl-C on an idle chat waits for a second.
const QUIT_WINDOW: Duration = Duration::from_secs(1);

/// What the chat reacts to.
enum Input {
    Key(KeyEvent),
    Resized,
    /// Text pasted (bracketed paste): one edit, its line breaks kept as such.
    Paste(String),
    /// A signal to leave (SIGTERM, SIGHUP when the terminal goes, SIGINT from `kill`).
    Signal(i32),
    /// A line of an agent's events file: the agent, and the record.
    Agent(String, Record),
}

/// Whether the chat can run here: both standard input and output are terminals.
pub fn possible() -> bool {
    std::io::stdin().is_terminal() && std::io::stdout().is_terminal()
}

/// The most recent root agent of the workspace (`offshoot -c`), by when it was made.
pub fn latest_root(ctx: &Ctx) -> Result<Option<String>, CliError> {
    let ws = ctx.workspace()?;
    let roots = agents::list(&ws)?.into_iter().filter_map(|l| l.facts).filter(|f| f.parent.is_none());
    let latest = roots.max_by(|a, b| a.created.cmp(&b.created)).map(|f| f.id);
    match latest {
        Some(id) => Ok(Some(id)),
        None => Err(CliError::usage("there is no agent to continue in this workspace")
            .hint("`offshoot` alone starts one at your first message")),
    }
}

/// Opens the chat, with `agent` (an id or name) if given, else a new one at the first
/// message.
pub fn run(ctx: &Ctx, agent: Option<&str>) -> Result<(), CliError> {
    if !possible() {
        return Err(CliError::usage("the chat needs a terminal on standard input and output")
            .hint("`offshoot prompt \"…\"` runs an agent from a script"));
    }
    let ws = ctx.workspace()?;
    let id = agent.map(|a| agents::resolve(&ws, a)).transpose()?;
    let rt = ctx.runtime(&ws);
    let (tx, rx) = channel();
    // Signals leave as Ctrl-D does (what works stopped, the terminal put back); taken
    // before any thread starts, so every thread has them blocked.
    let signals = tx.clone();
    crate::infra::signals::watch(move |signal| {
        let _ = signals.send(Input::Signal(signal));
    });
    let mut chat = Chat::new(ctx, &ws, &rt, tx.clone());
    if let Some(id) = id {
        chat.follow(id, false);
    }
    terminal::enable_raw_mode().map_err(|e| CliError::runtime(format!("cannot use the terminal: {e}")))?;
    let result = chat.run(&rx, tx);
    let _ = terminal::disable_raw_mode();
    if let Some(signal) = chat.signalled {
        std::process::exit(128 + signal);
    }
    result
}

/// `line` cut into rows of at most `width` columns.
fn rows_of(line: &str, width: u16) -> Vec<String> {
    let mut rows = vec![String::new()];
    let mut used = 0usize;
    for c in line.chars() {
        let w = ratatui::text::Span::raw(c.to_string()).width();
        if used + w > usize::from(width) {
            rows.push(String::new());
            used = 0;
        }
        if let Some(row) = rows.last_mut() {
            row.push(c);
        }
        used += w;
    }
    rows
}

/// `text` on one line: its breaks and runs of blanks made single spaces.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Terminal input, as it comes, into the chat's channel. It waits in short polls, never
/// in one long read: crossterm's reader is shared, and the inline viewport asks the
/// terminal where its cursor is through it (a read held across that would never let the
/// answer through until a key came).
fn read_keys(tx: &Sender<Input>) {
    loop {
        match event::poll(Duration::from_millis(200)) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(_) => return,
        }
        let Ok(event) = event::read() else { return };
        let input = match event {
            TermEvent::Key(key) if key.kind != KeyEventKind::Release => Input::Key(key),
            TermEvent::Resize(..) => Input::Resized,
            TermEvent::Paste(text) => Input::Paste(text),
            _ => continue,
        };
        if tx.send(input).is_err() {
            return;
        }
    }
}

struct Chat<'a> {
    ctx: &'a Ctx,
    ws: &'a Workspace,
    rt: &'a Runtime,
    id: Option<AgentId>,
    follower: Option<Follower>,
    tx: Sender<Input>,
    /// What is being typed.
    input: String,
    /// What was sent, oldest first, and where Up has got to.
    history: Vec<String>,
    recalled: Option<usize>,
    /// Agents whose run has begun and not ended.
    working: std::collections::BTreeSet<String>,
    /// The latest thing the attached agent did, for the status line.
    doing: String,
    /// When an idle Ctrl-C was pressed (a second within [`QUIT_WINDOW`] quits).
    quit_armed: Option<Instant>,
    /// Lines waiting to go into the scrollback.
    pending: Vec<String>,
    /// `/quit` was typed.
    quit: bool,
    /// The signal the chat leaves on, if one came.
    signalled: Option<i32>,
    /// Working agents whose driver was not running at the last look.
    suspects: std::collections::BTreeSet<String>,
}

impl<'a> Chat<'a> {
    fn new(ctx: &'a Ctx, ws: &'a Workspace, rt: &'a Runtime, tx: Sender<Input>) -> Chat<'a> {
        Chat {
            ctx,
            ws,
            rt,
            id: None,
            follower: None,
            tx,
            input: String::new(),
            history: Vec::new(),
            recalled: None,
            working: Default::default(),
            doing: String::new(),
            quit_armed: None,
            pending: Vec::new(),
            quit: false,
            signalled: None,
            suspects: Default::default(),
        }
    }

    /// Follows `id` and the agents below it from now on (a new agent, `fresh`, from its
    /// first event: its driver may write before the follower first looks), counting as
    /// working those whose driver runs already.
    fn follow(&mut self, id: AgentId, fresh: bool) {
        let tx = self.tx.clone();
        let view = View::Each(std::sync::Arc::new(move |agent: &str, record: &Record| {
            let _ = tx.send(Input::Agent(agent.to_owned(), record.clone()));
        }));
        let root = self.ws.layout.root();
        self.follower = Some(match fresh {
            true => Follower::start_from_the_beginning(root, &id, view),
            false => Follower::start_with_itself(root, &id, view),
        });
        self.working.clear();
        let mut tree = crate::engine::lifecycle::descendants(self.ws, &id).unwrap_or_default();
        tree.push(id.clone());
        for agent in tree {
            if crate::infra::lock::LockGuard::is_held(&self.ws.layout.lock(&agent)).unwrap_or(false) {
                self.working.insert(agent.to_string());
            }
        }
        self.id = Some(id);
    }

    fn run(&mut self, rx: &Receiver<Input>, keys: Sender<Input>) -> Result<(), CliError> {
        // (A terminal that says it has no rows, as a bare pseudo-terminal does, would give
        // the scrollback no room to go: refused rather than spun on.)
        let (cols, rows) = terminal::size().unwrap_or((0, 0));
        if cols < 20 || rows < LIVE_ROWS + 1 {
            return Err(CliError::usage(format!(
                "the chat needs a terminal of at least 20 columns and {} rows; this one says {cols}x{rows}",
                LIVE_ROWS + 1
            )));
        }
        let backend = CrosstermBackend::new(std::io::stdout());
        let options = TerminalOptions { viewport: Viewport::Inline(LIVE_ROWS) };
        let mut term = Terminal::with_options(backend, options)
            .map_err(|e| CliError::runtime(format!("cannot use the terminal: {e}")))?;
        // A paste arrives as one piece, its line breaks not taken for Enter.
        let _ = ratatui::crossterm::execute!(std::io::stdout(), ratatui::crossterm::event::EnableBracketedPaste);
        // (Keys are read once the viewport has asked where the cursor is.)
        std::thread::spawn(move || read_keys(&keys));
        let hello = match &self.id {
            Some(id) => format!("· chatting with `{id}`; Ctrl-C stops what works, Ctrl-D leaves"),
            None => "· type a goal and press Enter; Ctrl-C stops what works, Ctrl-D leaves".to_owned(),
        };
        self.pending.push(hello);
        loop {
            self.flush(&mut term);
            // (Idle, it waits for input alone; while agents work, it looks again now and then.)
            let next = if self.working.is_empty() {
                rx.recv().map_err(|_| std::sync::mpsc::RecvTimeoutError::Disconnected)
            } else {
                rx.recv_timeout(RECHECK)
            };
            let input = match next {
                Ok(input) => input,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    self.recheck();
                    continue;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            };
            let quit = match input {
                // What a key could not do is said; the chat and what was typed stay.
                Input::Key(key) => self.key(key).unwrap_or_else(|e| {
                    self.pending.push(format!("· {}", e.message));
                    self.pending.extend(e.hints.iter().map(|h| format!("  hint: {h}")));
                    false
                }),
                Input::Resized => {
                    let _ = term.autoresize();
                    false
                }
                Input::Agent(agent, record) => {
                    self.agent_event(&agent, &record);
                    false
                }
                Input::Paste(text) => {
                    self.input.push_str(&text.replace("\r\n", "\n").replace('\r', "\n"));
                    false
                }
                Input::Signal(signal) => {
                    self.signalled = Some(signal);
                    true
                }
            };
            if quit || self.quit {
                break;
            }
        }
        // Leaving stops what still works: no driver or tool is left behind.
        if !self.working.is_empty() {
            self.stop();
        }
        self.flush(&mut term);
        let _ = term.clear();
        let _ = ratatui::crossterm::execute!(std::io::stdout(), ratatui::crossterm::event::DisableBracketedPaste);
        Ok(())
    }

    /// Puts pending lines into the scrollback and draws the live area.
    fn flush(&mut self, term: &mut Terminal<CrosstermBackend<std::io::Stdout>>) {
        let width = term.size().map(|s| s.width).unwrap_or(80).max(20);
        // What agents, models and tools wrote is shown, never obeyed: an escape sequence
        // of theirs shows as `\x1b` (ratatui would drop it unseen). Broken into rows
        // here, by display width (wide characters take two columns), so the rows made
        // in the scrollback are exactly the rows drawn.
        for line in self.pending.drain(..).map(|l| super::out::printable(&l).replace('\t', "    ")) {
            let rows: Vec<TextLine> = line.lines().flat_map(|l| rows_of(l, width)).map(TextLine::from).collect();
            let count = u16::try_from(rows.len()).unwrap_or(u16::MAX).max(1);
            let _ = term.insert_before(count, |buf| Paragraph::new(rows).render(buf.area, buf));
        }
        let who = self.id.as_ref().map_or_else(|| "no agent yet".to_owned(), |id| format!("`{id}`"));
        let state = if self.working.is_empty() {
            "idle".to_owned()
        } else {
            format!("working ({} agents): {}", self.working.len(), self.doing)
        };
        let status = super::out::printable(&format!("── {who} · {state}")).into_owned();
        // The end of what is typed, where the cursor is (the live area has two rows).
        let typed = format!("> {}", self.input.replace('\n', " ⏎ "));
        let rows = rows_of(&super::out::printable(&typed), width);
        let input = rows[rows.len().saturating_sub(2)..].join("\n");
        let _ = term.draw(|frame| {
            let area = frame.area();
            let lines = vec![TextLine::from(status.clone()), TextLine::from(input.clone())];
            frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }), area);
        });
    }

    /// A key; `true` to leave.
    fn key(&mut self, key: KeyEvent) -> Result<bool, CliError> {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        match key.code {
            KeyCode::Char('c') if ctrl => {
                if !self.working.is_empty() {
                    self.stop();
                    self.quit_armed = Some(Instant::now());
                    return Ok(false);
                }
                if self.quit_armed.is_some_and(|at| at.elapsed() < QUIT_WINDOW) {
                    return Ok(true);
                }
                self.quit_armed = Some(Instant::now());
                self.pending.push("· Ctrl-C again to leave".to_owned());
            }
            KeyCode::Char('d') if ctrl && self.input.is_empty() => return Ok(true),
            KeyCode::Char('j') if ctrl => self.input.push('\n'),
            KeyCode::Enter if key.modifiers.contains(KeyModifiers::ALT) => self.input.push('\n'),
            KeyCode::Enter => self.send()?,
            KeyCode::Tab => self.complete(),
            KeyCode::Backspace => {
                self.input.pop();
            }
            KeyCode::Up if !self.history.is_empty() => {
                let at = self.recalled.map_or(self.history.len() - 1, |i| i.saturating_sub(1));
                self.recalled = Some(at);
                self.input = self.history[at].clone();
            }
            KeyCode::Char(c) if !ctrl => self.input.push(c),
            _ => {}
        }
        Ok(false)
    }

    /// Sends what was typed: the first message starts the agent, later ones are left in
    /// its inbox (delivered at its next step if it works now).
    fn send(&mut self) -> Result<(), CliError> {
        let text = std::mem::take(&mut self.input);
        if text.trim().is_empty() {
            return Ok(());
        }
        self.history.push(text.clone());
        self.recalled = None;
        if let Some(command) = text.trim().strip_prefix('/') {
            return self.command(command);
        }
        self.pending.push(format!("you: {text}"));
        match self.id.clone() {
            None => {
                let id = self.start(&text)?;
                self.follow(id.clone(), true);
                self.rt.launch(&id)?;
                self.working.insert(id.to_string());
            }
            Some(id) => {
                self.rt.deposit(&id, "user", &text)?;
                if !self.working.is_empty() {
                    self.pending.push("· queued: it reads this at its next step".to_owned());
                }
                self.rt.wake(&id)?;
            }
        }
        Ok(())
    }

    /// Completes a slash command's name: the one that begins so, or the choice shown.
    fn complete(&mut self) {
        let Some(typed) = self.input.strip_prefix('/').filter(|t| !t.contains(char::is_whitespace)) else { return };
        let names: Vec<&str> = COMMANDS
            .iter()
            .map(|(c, _)| c.split_whitespace().next().unwrap_or(c))
            .filter(|c| c.starts_with(typed))
            .collect();
        match names.as_slice() {
            [one] => self.input = format!("/{one} "),
            [] => {}
            many => {
                self.pending.push(format!("  {}", many.iter().map(|c| format!("/{c}")).collect::<Vec<_>>().join("  ")))
            }
        }
    }

    /// A slash command (`/help` lists them). What it cannot do is said, never fatal.
    fn command(&mut self, line: &str) -> Result<(), CliError> {
        let (name, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let rest = rest.trim();
        match name {
            "help" => self.pending.extend(COMMANDS.iter().map(|(c, what)| format!("  /{c:<16} {what}"))),
            "quit" | "exit" => self.quit = true,
            "stop" => self.stop(),
            "new" => {
                if !self.working.is_empty() {
                    self.stop();
                }
                self.follower = None;
                self.id = None;
                self.pending.push("· your next message starts a new agent".to_owned());
            }
            "attach" if !rest.is_empty() => match agents::resolve(self.ws, rest) {
                Ok(id) => {
                    self.pending.push(format!("· chatting with `{id}`; what you type goes to it"));
                    self.follow(id, false);
                }
                Err(e) => self.pending.push(format!("· {e}")),
            },
            "tree" | "cost" => self.tree(name == "cost")?,
            _ => self.pending.push(format!("· no command `/{name}`; /help lists them")),
        }
        Ok(())
    }

    /// The agent and those below it, a line each (`/tree`), or only their totals (`/cost`).
    fn tree(&mut self, totals_only: bool) -> Result<(), CliError> {
        let Some(id) = self.id.clone() else {
            self.pending.push("· no agent yet".to_owned());
            return Ok(());
        };
        let below = format!("{id}.");
        let states = crate::engine::inspect::states(self.ws)?;
        let tree: Vec<_> = states.iter().filter(|s| s.id == id.as_str() || s.id.starts_with(&below)).collect();
        let tokens: u64 = tree.iter().map(|s| s.input_tokens + s.output_tokens).sum();
        let cost: Option<f64> = tree.iter().map(|s| s.cost_usd).sum();
        let cost = cost.map_or_else(|| "$?".to_owned(), |c| format!("${c:.4}"));
        if !totals_only {
            for s in &tree {
                let depth = s.id.matches('.').count();
                let name = s.name.as_deref().map(|n| format!(" {n}")).unwrap_or_default();
                self.pending.push(format!(
                    "  {}{}{name} [{}] {}  {} steps",
                    "  ".repeat(depth),
                    s.id,
                    s.role,
                    s.state,
                    s.steps
                ));
            }
        }
        self.pending.push(format!("· {} agents, {tokens} tokens, {cost}", tree.len()));
        Ok(())
    }

    /// Makes a root agent for `goal` (in project mode inside a repository, as `prompt`).
    fn start(&self, goal: &str) -> Result<AgentId, CliError> {
        let (_, config) = self.ws.config("default")?;
        model::plan(&config, "default", "worker", &self.ctx.env)?;
        let from = project::start_point(self.ws, None, false)?;
        let spawn = Start {
            message: goal,
            name: None,
            now: Timestamp::now(),
            random: random_u32(),
            env: &self.ctx.env,
            project: from.as_ref().map(|(s, _)| s),
        };
        Ok(agents::create_root(self.ws, "worker", "default", &spawn)?)
    }

    /// Forgets agents counted as working whose driver is gone without a word (killed):
    /// not running at two looks in a row (a driver just launched takes a moment to start).
    fn recheck(&mut self) {
        let layout = &self.ws.layout;
        let idle: std::collections::BTreeSet<String> = self
            .working
            .iter()
            .filter(|a| {
                AgentId::parse(a)
                    .is_ok_and(|id| !crate::infra::lock::LockGuard::is_held(&layout.lock(&id)).unwrap_or(true))
            })
            .cloned()
            .collect();
        let gone: Vec<String> = idle.intersection(&self.suspects).cloned().collect();
        self.suspects = idle;
        for agent in gone {
            self.suspects.remove(&agent);
            self.working.remove(&agent);
            self.pending
                .push(format!("· `{agent}`'s driver ended without a word (killed?); `offshoot scan` looks at it"));
        }
    }

    /// Stops the agent and every agent below it, as `offshoot stop` does.
    fn stop(&mut self) {
        let Some(id) = self.id.clone() else { return };
        self.pending.push(format!("· stopping `{id}` and the agents below it"));
        match lifecycle::stop_tree(self.ws, self.rt, &id, Duration::from_secs(10)) {
            Ok(_) => {
                self.working.clear();
                self.pending.push(format!("· stopped; a message continues `{id}`"));
            }
            Err(e) => self.pending.push(format!("· could not stop: {e}")),
        }
    }

    /// What an agent's events file gained.
    fn agent_event(&mut self, agent: &str, record: &Record) {
        let own = self.id.as_ref().is_some_and(|id| id.as_str() == agent);
        let who = if own { String::new() } else { format!("[{agent}] ") };
        match record {
            Record::Step { step, model, .. } => {
                self.working.insert(agent.to_owned());
                self.doing = format!("{who}step {step} ({model})");
            }
            // An agent's words are indented under a margin of their own, so no line of
            // them passes for one of the chat's (`you: …`, `· stopped`).
            Record::Text { text } => {
                let body: Vec<String> = text.trim_end().lines().map(|l| format!("  │ {l}")).collect();
                self.pending.push(format!("{who}{}", body.join("\n").trim_start()));
            }
            Record::ToolCall { name, input, .. } => {
                let name = one_line(name);
                let gist = super::progress::call_gist(input);
                self.doing = format!("{who}→ {name}");
                self.pending.push(format!("{who}→ {name} {}", one_line(gist.lines().next().unwrap_or_default())));
            }
            Record::ToolResult { summary, .. } => {
                self.pending.push(format!("{who}  ← {}", one_line(summary.lines().next().unwrap_or_default())))
            }
            Record::Delivered { .. } => {
                self.working.insert(agent.to_owned());
            }
            Record::End(end) => {
                self.working.remove(agent);
                match end {
                    End::FinalResponse { .. } | End::Busy => {}
                    End::Interrupted { reason } => self.pending.push(format!("· {who}{reason}")),
                    End::BudgetExhausted { error } => self.pending.push(format!("· {who}budget exhausted: {error}")),
                    End::Error { error } => self.pending.push(format!("· {who}failed: {error}")),
                }
            }
            Record::Transfer { child, files } => {
                self.pending.push(format!("· {who}merged {files} files from `{child}`"))
            }
            Record::Waiting { children } => self.doing = format!("{who}waiting for {children} agents below"),
            _ => {}
        }
    }
}
