//! The chat's slash commands (`/help` lists them): each what the matching verb does,
//! said in the chat, which stays whatever one cannot do.

use super::*;

/// The slash commands, and what each does (`/help`).
pub(super) const COMMANDS: &[(&str, &str)] = &[
    ("tree", "show or hide the agents below (Ctrl-T; ↑↓ select, Enter attaches, Esc hides)"),
    ("attach <agent>", "chat with another agent (an id or a name)"),
    ("fork [N]", "your next message starts a fork of this agent (from before its step N)"),
    ("compact", "start a compaction of this agent now"),
    ("uncompact [N]", "undo its last compaction (or its Nth)"),
    ("diff", "what this agent changed in your project"),
    ("export [branch]", "put its work on a branch of your repository"),
    ("apply", "write its change into your working tree"),
    ("model [name]", "the model this agent uses; with a name, from your next message on"),
    ("cost", "tokens and cost of the agent and those below it"),
    ("stop", "stop this agent and those below it"),
    ("new", "your next message starts a new agent"),
    ("with-changes", "in a project: a new agent takes your uncommitted changes along (again: not)"),
    ("detach", "leave, and let what works go on (`offshoot attach` comes back)"),
    ("help", "this list"),
    ("quit", "leave (what works is stopped)"),
];

impl Chat<'_> {
    /// Completes a slash command's name: the one that begins so, or the choice shown.
    pub(super) fn complete(&mut self) {
        let typed = self.input.text().strip_prefix('/').filter(|t| !t.contains(char::is_whitespace));
        let Some(typed) = typed.map(str::to_owned) else { return };
        let names: Vec<&str> = COMMANDS
            .iter()
            .map(|(c, _)| c.split_whitespace().next().unwrap_or(c))
            .filter(|c| c.starts_with(&typed))
            .collect();
        match names.as_slice() {
            [one] => self.input.set(format!("/{one} ")),
            [] => {}
            many => {
                self.pending.push(format!("  {}", many.iter().map(|c| format!("/{c}")).collect::<Vec<_>>().join("  ")))
            }
        }
    }

    /// The agent attached, or a word that there is none.
    pub(super) fn attached(&mut self) -> Option<AgentId> {
        if self.id.is_none() {
            self.pending.push("· no agent yet: your first message starts one".to_owned());
        }
        self.id.clone()
    }

    /// A slash command (`/help` lists them). What it cannot do is said, never fatal.
    pub(super) fn command(&mut self, line: &str) -> Result<(), CliError> {
        let (name, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let rest = rest.trim();
        match name {
            "help" => self.pending.extend(COMMANDS.iter().map(|(c, what)| format!("  /{c:<16} {what}"))),
            "quit" | "exit" => self.quit = true,
            "with-changes" => {
                self.with_changes = !self.with_changes;
                self.pending.push(match self.with_changes {
                    true => "· a new agent takes your uncommitted changes along".to_owned(),
                    false => "· a new agent starts from your last commit, without your uncommitted changes".to_owned(),
                });
            }
            "detach" => (self.quit, self.detach) = (true, true),
            "stop" => {
                if let Some(id) = self.attached() {
                    self.stop(&id);
                }
            }
            "new" => {
                if let Some(id) = self.id.clone().filter(|_| self.tree.any_working()) {
                    self.pending
                        .push(format!("· `{id}` works on; leaving the chat stops it (`/detach` leaves it working)"));
                }
                self.follower = None;
                self.id = None;
                self.tree = Tree::default();
                self.pending.push("· your next message starts a new agent".to_owned());
            }
            "attach" if !rest.is_empty() => {
                let id = agents::resolve(self.ws, rest)?;
                self.pending.push(format!("· chatting with `{id}`; what you type goes to it"));
                match self.tree.contains(id.as_str()) {
                    true => self.attach(id),
                    false => self.follow(id, false),
                }
            }
            "tree" => self.toggle_pane(),
            "cost" => self.cost(),
            "model" => self.choose_model(rest)?,
            "fork" => self.fork(rest)?,
            "compact" => {
                let Some(id) = self.attached() else { return Ok(()) };
                let started = compaction::start(self.ws, self.rt, &id, None, &self.ctx.env)?;
                self.pending.push(format!(
                    "· compactor `{}` started; when it answers, a summary takes the place of {} entries (/uncompact undoes it)",
                    started.compactor, started.entries
                ));
            }
            "uncompact" => {
                let Some(id) = self.attached() else { return Ok(()) };
                let number = match rest {
                    "" => None,
                    n => Some(n.parse().map_err(|_| CliError::usage(format!("`/uncompact {n}`: N is a number")))?),
                };
                let (landing, restored) = compaction::uncompact(self.ws, &id, number)?;
                self.pending.push(format!("· compaction {} undone: {restored} files back", landing.number));
            }
            "diff" => {
                let Some(id) = self.attached() else { return Ok(()) };
                let text = project::diff(self.ws, &id, false)?;
                match text.is_empty() {
                    true => self.pending.push(format!("· `{id}` has changed nothing")),
                    false => self.pending.extend(text.lines().map(str::to_owned)),
                }
            }
            "export" => {
                let Some(id) = self.attached() else { return Ok(()) };
                let author = self.ws.user_repo()?.and_then(|u| u.identity(&self.ctx.git_config_files()));
                let branch = (!rest.is_empty()).then_some(rest);
                let done = project::export(self.ws, &id, branch, false, author.as_ref())?;
                self.pending.push(format!(
                    "· its work is on `{}` at {} (`git merge {}` takes it)",
                    done.branch,
                    &done.commit.to_string()[..12],
                    done.branch
                ));
            }
            "apply" => {
                let Some(id) = self.attached() else { return Ok(()) };
                let written = project::apply(self.ws, &id)?;
                self.pending.push(match written.len() {
                    0 => "· nothing to apply: your working tree already has its change".to_owned(),
                    n => format!("· applied {n} files as uncommitted changes: {}", written.join(", ")),
                });
            }
            _ => self.pending.push(format!("· no command `/{name}`; /help lists them")),
        }
        Ok(())
    }

    /// `/fork [N]`: the next message starts a fork of the attached agent, at its tip or
    /// as it was before its step N (the commit that step's request was made from).
    pub(super) fn fork(&mut self, rest: &str) -> Result<(), CliError> {
        let Some(id) = self.attached() else { return Ok(()) };
        let (from, what) = match rest {
            "" => (id.branch(), format!("`{id}` as it is now")),
            n => {
                let step: u32 = n.parse().map_err(|_| {
                    CliError::usage(format!("`/fork {n}`: N is a step number")).hint("`/fork` alone forks from the tip")
                })?;
                let meta = inspect::step_meta(self.ws, &id, step)?;
                if meta.commit.is_empty() {
                    return Err(CliError::usage(format!("step {step} of `{id}` does not record where it began")));
                }
                (meta.commit, format!("`{id}` before its step {step}"))
            }
        };
        self.pending.push(format!("· your next message starts a fork of {what}"));
        self.fork_from = Some((from, what));
        Ok(())
    }

    /// `/model [name]`: says the model the attached agent uses; with a name, the next
    /// message chooses it (for the agent it goes to, or the one it starts).
    pub(super) fn choose_model(&mut self, name: &str) -> Result<(), CliError> {
        if name.is_empty() {
            let using = self.id.as_ref().and_then(|id| self.tree.get(id.as_str())).map(|a| a.model.clone());
            let line = match (using.filter(|m| !m.is_empty()), &self.model) {
                (_, Some(next)) => format!("· your next message chooses `{next}`"),
                (Some(model), None) => format!("· its last step used `{}`", one_line(&model)),
                (None, None) => "· its role's model (no step yet)".to_owned(),
            };
            self.pending.push(line);
            return Ok(());
        }
        domain::agent::check_model(name).map_err(CliError::usage)?;
        self.pending.push(format!("· your next message chooses `{name}`; the agent keeps it from then on"));
        self.model = Some(name.to_owned());
        Ok(())
    }

    /// Tokens and cost of the attached agent and those below it (`/cost`).
    pub(super) fn cost(&mut self) {
        let Some(id) = self.attached() else { return };
        let below = format!("{id}.");
        let tree: Vec<&Agent> = self.tree.rows().filter(|a| a.id == id.as_str() || a.id.starts_with(&below)).collect();
        let tokens: u64 = tree.iter().map(|a| a.tokens).sum();
        let cost: Option<f64> = tree.iter().map(|a| a.cost).sum();
        let cost = cost.map_or_else(|| "$?".to_owned(), |c| format!("${c:.4}"));
        self.pending.push(format!(
            "· {}, {}, {cost}",
            infra::words::count(tree.len() as u64, "agent", "agents"),
            view::tokens(tokens)
        ));
    }
}
