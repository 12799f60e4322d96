//! The chat: `offshoot` with no verb on a terminal (or `offshoot chat [agent]`). A
//! client of the agents' drivers, never one itself: the first message starts a root
//! agent with a detached driver, later ones are left in its inbox and wake it (typed
//! while it works, they wait for its next step), and what the agents of its tree do
//! comes from their events files. Finished lines go into the terminal's own scrollback
//! above a small inline area (`view`: the tree pane when shown, the answer as it streams,
//! status and input), so scrolling, search and copy keep working. The pane's model
//! (`pane`) is loaded once and kept by events, never rescanned. Ctrl-C while anything
//! works stops it as `stop` does (the chat stays); Ctrl-C twice within a second, or
//! Ctrl-D on an empty line, leaves — stopping what still works (`/detach` leaves it
//! working), so no driver or tool is left behind unasked.

mod commands;
mod editor;
mod feed;
mod held;
mod pane;
mod stops;
mod view;

use std::io::{IsTerminal, Write};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::{Duration, Instant};

use ratatui::backend::{Backend, ClearType};
use ratatui::crossterm::event::{self, Event as TermEvent, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::crossterm::terminal;
use ratatui::layout::Position;
use ratatui::text::Line as TextLine;
use ratatui::widgets::{Paragraph, Widget};
use ratatui::{Terminal, TerminalOptions, Viewport};

use domain::id::AgentId;
use domain::question::Scope;
use domain::transcript::Entry;
use engine::agents::runtime::Runtime;
use engine::agents::{self, Start};
use engine::step::events::{End, Record};
use engine::store::workspace::Workspace;
use engine::{
    agents::lifecycle, ops::approvals, ops::inspect, ops::project, random_u32, step::compaction, step::model,
};
use infra::provider::Block;
use infra::time::Timestamp;

use super::follow::{Follower, View};
use super::{CliError, Ctx};
use feed::one_line;
use pane::{Agent, State, Tree};
use stops::RECHECK;
use view::rows_of;

/// How long a first Ctrl-C on an idle chat waits for a second.
const QUIT_WINDOW: Duration = Duration::from_secs(1);

/// Rows put into the scrollback by one insert, at most (the buffer it draws holds them).
const INSERT_ROWS: usize = 500;

/// Inputs handled before the screen is drawn again, at most: a burst of events (a
/// hundred agents at work) is one frame, and keys still get through.
const BATCH: usize = 512;

type Term = Terminal<held::Held>;

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
pub(crate) fn possible() -> bool {
    std::io::stdin().is_terminal() && std::io::stdout().is_terminal()
}

/// The most recent root agent of the workspace (`offshoot -c`), by when it was made.
pub(crate) fn latest_root(ctx: &Ctx) -> Result<Option<String>, CliError> {
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
pub(crate) fn run(
    ctx: &Ctx,
    agent: Option<&str>,
    model: Option<String>,
    with_changes: bool,
    mode: Option<domain::config::Mode>,
) -> Result<(), CliError> {
    // An agent the workers of a remote drive takes no message here (it would wait in an
    // inbox no driver here reads).
    if let Some(agent) = agent {
        let ws = ctx.workspace()?;
        let id = agents::resolve(&ws, agent)?;
        if engine::fleet::remote::handed(&ws, &id) {
            return Err(CliError::usage(format!("agent `{id}` is driven by the workers of a remote, not here"))
                .hint("`offshoot send --on <remote>` writes to it there; `offshoot pull --follow` and `offshoot log` follow it"));
        }
    }
    if !possible() {
        return Err(CliError::usage("the chat needs a terminal on standard input and output")
            .hint("`offshoot prompt \"…\"` runs an agent from a script"));
    }
    // (A chat makes the workspace at its first message; opened on an agent, the
    // workspace must be there.)
    let ws = match agent {
        Some(_) => ctx.workspace()?,
        None => ctx.workspace_making()?,
    };
    let id = agent.map(|a| agents::resolve(&ws, a)).transpose()?;
    let rt = ctx.runtime(&ws);
    let (tx, rx) = channel();
    // Signals leave as Ctrl-D does (what works stopped, the terminal put back); taken
    // before any thread starts, so every thread has them blocked.
    let signals = tx.clone();
    infra::signals::watch(move |signal| {
        let _ = signals.send(Input::Signal(signal));
    });
    let mut chat = Chat::new(ctx, &ws, &rt, tx.clone());
    chat.mode = mode;
    chat.model = model;
    chat.with_changes = with_changes;
    if let Some(id) = id {
        chat.show_so_far(&id);
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

/// Terminal input, as it comes, into the chat's channel. It waits in short polls, never
/// in one long read: crossterm's reader is shared, and the inline viewport asks the
/// terminal where its cursor is through it when it is made (at the start, when the pane
/// shows or hides, on a resize), so such a question waits up to one poll for its answer
/// (a read held across it would never let the answer through until a key came). Lines
/// going into the scrollback ask nothing (scrolling regions), and an idle chat wakes five
/// times a second for nothing else.
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

/// An inline viewport of `height` rows where the cursor is.
fn inline(height: u16) -> std::io::Result<Term> {
    let options = TerminalOptions { viewport: Viewport::Inline(height) };
    Terminal::with_options(held::Held::now(), options)
}

struct Chat<'a> {
    ctx: &'a Ctx,
    ws: &'a Workspace,
    rt: &'a Runtime,
    /// The agent what is typed goes to (the root of the tree, or one below it).
    id: Option<AgentId>,
    /// The tree followed: every agent in it, kept by their events.
    tree: Tree,
    follower: Option<Follower>,
    tx: Sender<Input>,
    /// What is being typed.
    input: editor::Editor,
    /// What was sent, oldest first, and where Up has got to.
    history: Vec<String>,
    recalled: Option<usize>,
    /// The tree pane is shown.
    pane: bool,
    /// The text the attached agent is streaming, and how much of it is in the scrollback.
    stream: String,
    printed: usize,
    /// What happens now, under the scrollback: the line being streamed, or a call.
    activity: String,
    /// The attached agent's calls running, by their id: each goes into the scrollback as
    /// one line with its result's gist when it ends.
    calls: Vec<(String, String)>,
    /// When an idle Ctrl-C was pressed (a second within [`QUIT_WINDOW`] quits).
    quit_armed: Option<Instant>,
    /// Lines waiting to go into the scrollback.
    pending: Vec<String>,
    /// `/quit` (or `/detach`, which leaves what works at work) was typed.
    quit: bool,
    detach: bool,
    /// The signal the chat leaves on, if one came.
    signalled: Option<i32>,
    /// Working agents whose driver was not running at the last look.
    suspects: std::collections::BTreeSet<String>,
    /// The root of every tree this chat showed: leaving stops what works in any of them.
    roots: Vec<AgentId>,
    /// The attached agent's stream is followed from its start (attached mid-answer, the
    /// deltas are left until its next step or whole text).
    synced: bool,
    /// `/model`: the model the next message chooses for the agent it goes to.
    model: Option<String>,
    /// `/fork`: the commit the next message forks from.
    fork_from: Option<(String, String)>,
    /// An agent newly needs the user: the terminal's bell is rung at the next frame.
    bell: bool,
    /// Questions of the tree waiting for the user's y/n/a, oldest first.
    questions: Vec<String>,
    /// `--mode`: the permission mode of the agents it makes.
    mode: Option<domain::config::Mode>,
    /// The goal of an agent this chat just made, until its first call is answered: if
    /// that call fails, the agent is removed again (as `prompt` does) and the goal
    /// comes back into the input.
    fresh_goal: Option<(AgentId, String)>,
    /// The chat stopped the attached agent and said so: its run's end repeats nothing.
    stop_said: bool,
    /// In a project: a new agent takes the uncommitted changes along (`--with-changes`,
    /// `/with-changes`).
    with_changes: bool,
    /// Rows of the live area as drawn, and the row of it the cursor was left on.
    height: u16,
    cursor_row: u16,
    /// The terminal's size the live area was opened at: drawn at another, it is opened
    /// again first (ratatui's own resize would clear the whole screen on a narrowing).
    size: (u16, u16),
}

impl<'a> Chat<'a> {
    fn new(ctx: &'a Ctx, ws: &'a Workspace, rt: &'a Runtime, tx: Sender<Input>) -> Chat<'a> {
        Chat {
            ctx,
            ws,
            rt,
            id: None,
            tree: Tree::default(),
            follower: None,
            tx,
            input: editor::Editor::default(),
            history: Vec::new(),
            recalled: None,
            pane: false,
            stream: String::new(),
            printed: 0,
            activity: String::new(),
            calls: Vec::new(),
            quit_armed: None,
            pending: Vec::new(),
            quit: false,
            detach: false,
            signalled: None,
            suspects: Default::default(),
            fork_from: None,
            roots: Vec::new(),
            synced: false,
            model: None,
            bell: false,
            questions: Vec::new(),
            mode: None,
            fresh_goal: None,
            stop_said: false,
            with_changes: false,
            height: view::BASE_ROWS,
            cursor_row: 0,
            size: terminal::size().unwrap_or((80, 24)),
        }
    }

    /// Follows the tree of `id` from now on (a new agent, `fresh`, from its first event:
    /// its driver may write before the follower first looks): its agents' states read
    /// once, then kept by their events.
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
        self.tree = Tree::load(id.as_str(), inspect::states(self.ws).unwrap_or_default());
        if !self.tree.contains(id.as_str()) {
            self.tree.add(Agent::new(id.as_str(), agents::name_of(self.ws, &id)));
        }
        self.tree.select_id(id.as_str());
        if !self.roots.contains(&id) {
            self.roots.push(id.clone());
        }
        self.attach(id);
        self.synced = fresh;
    }

    /// What is typed goes to `id` (in the tree followed) from now on.
    fn attach(&mut self, id: AgentId) {
        self.stream.clear();
        self.printed = 0;
        self.activity.clear();
        self.calls.clear();
        self.synced = false;
        self.id = Some(id);
    }

    fn run(&mut self, rx: &Receiver<Input>, keys: Sender<Input>) -> Result<(), CliError> {
        // (A terminal that says it has no rows, as a bare pseudo-terminal does, would give
        // the scrollback no room to go: refused rather than spun on.)
        let (cols, rows) = terminal::size().unwrap_or((0, 0));
        if cols < 20 || rows < view::BASE_ROWS + 2 {
            return Err(CliError::usage(format!(
                "the chat needs a terminal of at least 20 columns and {} rows; this one says {cols}x{rows}",
                view::BASE_ROWS + 2
            )));
        }
        let mut term = inline(self.height).map_err(|e| CliError::runtime(format!("cannot use the terminal: {e}")))?;
        // A paste arrives as one piece, its line breaks not taken for Enter.
        let _ = ratatui::crossterm::execute!(std::io::stdout(), ratatui::crossterm::event::EnableBracketedPaste);
        // (Keys are read once the viewport has asked where the cursor is.)
        std::thread::spawn(move || read_keys(&keys));
        let hello = match &self.id {
            Some(id) => format!("· chatting with `{id}`; Ctrl-C stops what works, Ctrl-D leaves, /help"),
            None => "· type a goal and press Enter; Ctrl-C stops what works, Ctrl-D leaves, /help".to_owned(),
        };
        self.pending.push(hello);
        'chat: loop {
            self.flush(&mut term);
            if self.signalled.is_some() {
                break;
            }
            // (Idle, it waits for input alone; while agents work, it looks again now and then.)
            let next = if self.tree.any_working() {
                rx.recv_timeout(RECHECK)
            } else {
                rx.recv().map_err(|_| std::sync::mpsc::RecvTimeoutError::Disconnected)
            };
            let first = match next {
                Ok(input) => input,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    self.recheck();
                    continue;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            };
            // What came meanwhile is taken before the next frame: a burst is one frame.
            let mut resized = false;
            for input in std::iter::once(first).chain(std::iter::from_fn(|| rx.try_recv().ok()).take(BATCH)) {
                let quit = match input {
                    // What a key could not do is said; the chat and what was typed stay.
                    Input::Key(key) => self.key(key).unwrap_or_else(|e| {
                        self.pending.push(format!("· {}", e.message()));
                        self.pending.extend(e.causes().iter().map(|c| format!("  caused by: {c}")));
                        self.pending.extend(e.hints.iter().map(|h| format!("  hint: {h}")));
                        false
                    }),
                    Input::Resized => {
                        resized = true;
                        false
                    }
                    Input::Agent(agent, record) => {
                        self.agent_event(&agent, &record);
                        false
                    }
                    Input::Paste(text) => {
                        self.input.insert(&text.replace("\r\n", "\n").replace('\r', "\n"));
                        false
                    }
                    Input::Signal(signal) => {
                        self.signalled = Some(signal);
                        true
                    }
                };
                if quit || self.quit {
                    break 'chat;
                }
            }
            if resized {
                self.redraw(&mut term);
            }
        }
        // Leaving stops what still works, unless the user asked to detach: no driver or
        // tool is left behind unasked.
        if self.detach {
            if let Some(id) = self.id.clone().filter(|_| self.tree.any_working()) {
                self.pending.push(format!("· left; `{id}` works on (`offshoot attach {id}` follows it)"));
            }
        } else {
            self.leave_nothing_working();
        }
        self.pane = false;
        self.flush(&mut term);
        // The live area goes, and the shell's prompt comes where it began, at the start
        // of its line.
        let top = term.get_frame().area().y;
        let _ = term.clear();
        let backend = term.backend_mut();
        let _ = backend.set_cursor_position(Position { x: 0, y: top });
        let _ = Backend::flush(backend);
        let _ = ratatui::crossterm::execute!(std::io::stdout(), ratatui::crossterm::event::DisableBracketedPaste);
        Ok(())
    }

    /// The terminal's size changed. The scrollback is the terminal's own and keeps
    /// everything (reflowed by the terminal, if it does): only the live area is drawn
    /// again, from where it now starts — found from the cursor, which the terminal
    /// moved with the text around it.
    fn redraw(&mut self, term: &mut Term) {
        self.size = terminal::size().unwrap_or(self.size);
        let backend = term.backend_mut();
        if let Ok(at) = backend.get_cursor_position() {
            let top = at.y.saturating_sub(self.cursor_row);
            let _ = backend.set_cursor_position(Position { x: 0, y: top });
            let _ = backend.clear_region(ClearType::AfterCursor);
            let _ = Backend::flush(backend);
        }
        if let Ok(fresh) = inline(self.height) {
            *term = fresh;
        }
    }

    /// Puts pending lines into the scrollback and draws the live area.
    fn flush(&mut self, term: &mut Term) {
        let (width, rows) = terminal::size().unwrap_or((80, 24));
        if (width, rows) != self.size {
            self.redraw(term);
        }
        let width = width.max(20);
        let status = self.status();
        let attached = self.id.as_ref().map(AgentId::as_str);
        let live = view::Live {
            activity: &self.activity,
            streaming: !self.stream.is_empty(),
            status: &status,
            input: self.input.split(),
            pane: self.pane.then_some(&self.tree),
            attached,
        };
        // The live area grows with the pane and shrinks back: drawn again in place.
        let height = view::height(&live, rows);
        if height != self.height {
            let top = term.get_frame().area().y;
            let backend = term.backend_mut();
            let _ = backend.set_cursor_position(Position { x: 0, y: top });
            let _ = backend.clear_region(ClearType::AfterCursor);
            let _ = Backend::flush(backend);
            if let Ok(fresh) = inline(height) {
                *term = fresh;
                self.height = height;
            }
        }
        // What agents, models and tools wrote is shown, never obeyed: an escape sequence
        // of theirs shows as `\x1b` (ratatui would drop it unseen). Broken into rows
        // here, by display width (wide characters take two columns), so the rows made
        // in the scrollback are exactly the rows drawn.
        let mut rows: Vec<TextLine> = Vec::new();
        for line in self.pending.drain(..).map(|l| super::out::printable(&l).replace('\t', "    ")) {
            let before = rows.len();
            rows.extend(line.lines().flat_map(|l| rows_of(l, width)).map(TextLine::from));
            if rows.len() == before {
                rows.push(TextLine::default());
            }
        }
        // All of a frame's lines in few inserts (a scrolled region each, no round trip to
        // the terminal), a bounded buffer at a time.
        let mut written = Ok(());
        for chunk in rows.chunks(INSERT_ROWS) {
            let count = u16::try_from(chunk.len()).unwrap_or(u16::MAX);
            written =
                written.and(term.insert_before(count, |buf| Paragraph::new(chunk.to_vec()).render(buf.area, buf)));
        }
        let mut cursor_row = self.cursor_row;
        let drawn = term.draw(|frame| {
            let cursor = view::draw(&live, frame.area(), frame.buffer_mut());
            cursor_row = cursor.y.saturating_sub(frame.area().y);
            frame.set_cursor_position(cursor);
        });
        self.cursor_row = cursor_row;
        if std::mem::take(&mut self.bell) {
            let mut out = std::io::stdout();
            let _ = out.write_all(b"\x07").and_then(|()| out.flush());
        }
        // A terminal that cannot be written to has gone (a hang-up whose signal is still
        // on its way): the chat leaves as it does on SIGHUP.
        if written.is_err() || drawn.is_err() {
            self.signalled.get_or_insert(libc::SIGHUP);
        }
    }

    /// The status line: the agent attached, what it does, its model, step, tokens, cost
    /// and context, and how many agents below it work or need the user.
    fn status(&self) -> String {
        let Some(id) = &self.id else { return "── no agent yet".to_owned() };
        let Some(agent) = self.tree.get(id.as_str()) else { return format!("── `{id}`") };
        let name = agent.name.as_deref().map(|n| format!(" {}", one_line(n))).unwrap_or_default();
        let mut parts = vec![format!("── `{id}`{name}"), agent.state.word().to_owned()];
        if !agent.model.is_empty() {
            parts.push(one_line(&agent.model));
        }
        if agent.step > 0 {
            parts.push(format!("step {}", agent.step));
        }
        parts.push(view::tokens(agent.tokens));
        parts.push(agent.cost.map_or_else(|| "$?".to_owned(), |c| format!("${c:.4}")));
        if let Some(p) = agent.context_percent() {
            parts.push(format!("context {p}%"));
        }
        let (working, needs) = self.tree.below(id.as_str());
        if working > 0 {
            parts.push(format!("{working} below working"));
        }
        if needs > 0 {
            parts.push(format!("{needs} need you (Ctrl-T)"));
        }
        parts.join(" · ")
    }

    /// A key; `true` to leave.
    fn key(&mut self, key: KeyEvent) -> Result<bool, CliError> {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        match key.code {
            KeyCode::Char('c') if ctrl => {
                if self.tree.any_working() {
                    self.stop_all();
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
            // A question waits and nothing is typed: y, n or a answers it.
            KeyCode::Char(c @ ('y' | 'n' | 'a')) if !ctrl && self.input.is_empty() && !self.questions.is_empty() => {
                self.answer(c)
            }
            KeyCode::Char('t') if ctrl => self.toggle_pane(),
            KeyCode::Char('u') if ctrl => drop(self.input.take()),
            KeyCode::Char('j') if ctrl => self.input.insert("\n"),
            KeyCode::Char('a') if ctrl => self.input.home(),
            KeyCode::Char('e') if ctrl => self.input.end(),
            KeyCode::Home => self.input.home(),
            KeyCode::End => self.input.end(),
            KeyCode::Left => self.input.left(),
            KeyCode::Right => self.input.right(),
            KeyCode::Delete => self.input.delete(),
            KeyCode::Esc if self.pane => self.pane = false,
            KeyCode::Up if self.pane => self.tree.select(-1),
            KeyCode::Down if self.pane => self.tree.select(1),
            KeyCode::PageUp if self.pane => self.tree.select(-10),
            KeyCode::PageDown if self.pane => self.tree.select(10),
            KeyCode::Enter if self.pane && self.input.text().trim().is_empty() => {
                if let Some(id) = self.tree.selected().and_then(|a| AgentId::parse(&a.id).ok()) {
                    self.pane = false;
                    self.pending.push(format!("· chatting with `{id}`; what you type goes to it"));
                    self.attach(id);
                }
            }
            KeyCode::Enter if key.modifiers.contains(KeyModifiers::ALT) => self.input.insert("\n"),
            KeyCode::Enter => self.send()?,
            KeyCode::Tab => self.complete(),
            KeyCode::Backspace => self.input.backspace(),
            KeyCode::Up if !self.history.is_empty() => {
                let at = self.recalled.map_or(self.history.len() - 1, |i| i.saturating_sub(1));
                self.recalled = Some(at);
                self.input.set(self.history[at].clone());
            }
            KeyCode::Down if self.recalled.is_some() => {
                let at = self.recalled.map_or(0, |i| i + 1);
                self.recalled = (at < self.history.len()).then_some(at);
                self.input.set(self.history.get(at).cloned().unwrap_or_default());
            }
            KeyCode::Char(c) if !ctrl => self.input.insert(c.encode_utf8(&mut [0; 4])),
            _ => {}
        }
        Ok(false)
    }

    fn toggle_pane(&mut self) {
        self.pane = !self.pane;
        if let (true, Some(id)) = (self.pane, &self.id) {
            self.tree.select_id(id.as_str());
        }
    }

    /// Sends what was typed: the first message starts the agent (or a fork, after
    /// `/fork`), later ones are left in its inbox (delivered at its next step if it
    /// works now).
    fn send(&mut self) -> Result<(), CliError> {
        let text = self.input.take();
        if text.trim().is_empty() {
            return Ok(());
        }
        self.history.push(text.clone());
        self.recalled = None;
        if let Some(command) = text.trim().strip_prefix('/') {
            return self.command(command);
        }
        self.pending.push(format!("you: {text}"));
        let model = self.model.take();
        let model = model.as_deref();
        if let Some((from, what)) = self.fork_from.take() {
            let id = agents::fork(self.ws, &from, &Start { model, ..self.spawn(&text, None) })?;
            self.pending.push(format!("· `{id}` forked from {what}"));
            return self.begin(id);
        }
        match self.id.clone() {
            None => {
                let id = self.start(&text, model)?;
                self.fresh_goal = Some((id.clone(), text));
                self.begin(id)
            }
            Some(id) => {
                let chosen = engine::agents::runtime::Chosen { model, ..Default::default() };
                self.rt.deposit_choosing(&id, "user", &text, &chosen)?;
                if self.tree.get(id.as_str()).is_some_and(|a| a.state == State::Working) {
                    self.pending.push("· queued: it reads this at its next step".to_owned());
                }
                self.rt.wake(&id)?;
                self.tree.set(id.as_str(), State::Working, "");
                Ok(())
            }
        }
    }

    /// Follows an agent just made and starts its driver.
    fn begin(&mut self, id: AgentId) -> Result<(), CliError> {
        self.follow(id.clone(), true);
        self.rt.launch(&id)?;
        self.tree.set(id.as_str(), State::Working, "");
        Ok(())
    }

    /// What a new agent is made with.
    fn spawn<'s>(&'s self, message: &'s str, project: Option<&'s agents::ProjectStart>) -> Start<'s> {
        Start {
            message,
            name: None,
            now: Timestamp::now(),
            random: random_u32(),
            env: &self.ctx.env,
            project,
            model: None,
            reasoning: None,
            copy_ignored: &[],
            mode: self.mode,
            // The chat listens: a question waits for its y/n/a.
            on_ask: Some(domain::question::OnAsk::Wait),
        }
    }

    /// Makes a root agent for `goal` (in project mode inside a repository, as `prompt`).
    /// Says, as `prompt` does, which uncommitted changes stay behind (or go along).
    fn start(&mut self, goal: &str, model: Option<&str>) -> Result<AgentId, CliError> {
        let (_, config) = self.ws.config("default")?;
        model::plan(&config, "default", "worker", &self.ctx.env)?;
        let author = self.ws.user_repo()?.and_then(|u| u.identity(&self.ctx.git_config_files()));
        let from = project::start_point(self.ws, None, self.with_changes, author.as_ref())?;
        if let Some((start, left)) = &from {
            let short = &start.base.to_string()[..12];
            let list = |paths: Vec<&str>| {
                let more = paths.len().saturating_sub(5);
                let shown = paths.into_iter().take(5).collect::<Vec<_>>().join(", ");
                if more > 0 { format!("{shown} and {more} more") } else { shown }
            };
            if !start.changes.is_empty() {
                let paths = start.changes.iter().map(|(p, _)| p.as_str()).collect();
                self.pending.push(format!("· starting from {short} with your uncommitted changes: {}", list(paths)));
            } else if !left.is_empty() {
                let paths = left.iter().map(String::as_str).collect();
                self.pending.push(format!(
                    "· starting from {short}; your uncommitted changes are not included ({}); `/with-changes` takes them along",
                    list(paths)
                ));
            }
        }
        let spawn = Start { model, ..self.spawn(goal, from.as_ref().map(|(s, _)| s)) };
        Ok(agents::create_root(self.ws, "worker", "default", &spawn)?)
    }
}
