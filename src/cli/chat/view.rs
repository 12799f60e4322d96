//! Drawing the chat's live area, the part under the scrollback: the tree pane when it is
//! shown, a line of what is happening (the answer as it streams), the status line and the
//! input. A pure function of what it is given, so it is tested on ratatui's test backend.

use ratatui::buffer::Buffer;
use ratatui::layout::{Position, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Paragraph, Widget};

use super::pane::{State, Tree};

/// Rows of the live area without the pane: what happens, the status line, two of input.
pub(crate) const BASE_ROWS: u16 = 4;
/// Rows of the pane at most, its heading included.
pub(crate) const PANE_ROWS: u16 = 12;

/// What the live area shows.
pub(crate) struct Live<'a> {
    /// What is happening now: the line of the answer streaming, or the call running.
    pub(crate) activity: &'a str,
    /// The activity is a line being streamed: its end is shown, where the words arrive.
    pub(crate) streaming: bool,
    pub(crate) status: &'a str,
    /// What is typed: before the cursor, and from it on.
    pub(crate) input: (&'a str, &'a str),
    /// The tree, when its pane is shown, and the agent the chat is attached to.
    pub(crate) pane: Option<&'a Tree>,
    pub(crate) attached: Option<&'a str>,
}

/// The rows the live area needs on a terminal of `rows`: the pane takes what it has
/// rows for, and never the whole screen.
pub(crate) fn height(live: &Live<'_>, rows: u16) -> u16 {
    let pane = live.pane.map_or(0, |t| u16::try_from(t.len() + 1).unwrap_or(u16::MAX).min(PANE_ROWS));
    let room = rows.saturating_sub(BASE_ROWS + 2);
    BASE_ROWS + pane.min(room)
}

/// `line` cut into rows of at most `width` columns, by display width.
pub(crate) fn rows_of(line: &str, width: u16) -> Vec<String> {
    cut_rows(line, None, width).0
}

/// [`rows_of`], and where the character numbered `at` (or the end, past the last) is:
/// its row and column.
fn cut_rows(line: &str, at: Option<usize>, width: u16) -> (Vec<String>, (usize, u16)) {
    let mut rows = vec![String::new()];
    let mut used = 0usize;
    let mut found = None;
    for (i, c) in line.chars().enumerate() {
        let w = ratatui::text::Span::raw(c.to_string()).width();
        if used + w > usize::from(width) {
            rows.push(String::new());
            used = 0;
        }
        if Some(i) == at {
            found = Some((rows.len() - 1, used));
        }
        if let Some(row) = rows.last_mut() {
            row.push(c);
        }
        used += w;
    }
    let at_end = match at {
        Some(_) if used >= usize::from(width) => {
            rows.push(String::new());
            (rows.len() - 1, 0)
        }
        _ => (rows.len() - 1, used),
    };
    let (row, col) = found.unwrap_or(at_end);
    (rows, (row, u16::try_from(col).unwrap_or(u16::MAX)))
}

/// The first row of `line` at `width`.
fn cut(line: &str, width: u16) -> String {
    rows_of(line, width).swap_remove(0)
}

/// Draws `live` into `area` of `buf`; where the cursor goes.
pub(crate) fn draw(live: &Live<'_>, area: Rect, buf: &mut Buffer) -> Position {
    let width = area.width;
    let printable = |s: &str| crate::cli::out::printable(s).into_owned();
    let mut lines: Vec<Line> = Vec::new();
    let pane_rows = area.height.saturating_sub(BASE_ROWS);
    if let (Some(tree), true) = (live.pane, pane_rows > 0) {
        lines.extend(pane(tree, live.attached, pane_rows, width));
    }
    let activity = printable(live.activity);
    // (A streamed line longer than a row shows its end, under the agent's margin.)
    let activity = match live.streaming && rows_of(&activity, width).len() > 1 {
        true => format!("  │ …{}", rows_of(&activity, width.saturating_sub(5)).pop().unwrap_or_default()),
        false => cut(&activity, width),
    };
    lines.push(Line::from(activity).style(Style::new().add_modifier(Modifier::DIM)));
    lines.push(Line::from(cut(&printable(live.status), width)));
    // The two rows of what is typed around the cursor (line breaks shown as ⏎).
    let before = printable(&format!("> {}", live.input.0.replace('\n', " ⏎ ")));
    let after = printable(&live.input.1.replace('\n', " ⏎ "));
    let (rows, (row, col)) = cut_rows(&format!("{before}{after}"), Some(before.chars().count()), width);
    let first = row.saturating_sub(1);
    let top = u16::try_from(lines.len() + row - first).unwrap_or(u16::MAX);
    lines.extend(rows[first..].iter().take(2).map(|r| Line::from(r.clone())));
    Paragraph::new(lines).render(area, buf);
    Position { x: area.x + col.min(width.saturating_sub(1)), y: area.y + top.min(area.height.saturating_sub(1)) }
}

/// The pane in `rows` rows: a heading, then the rows around the selected one.
fn pane<'a>(tree: &'a Tree, attached: Option<&str>, rows: u16, width: u16) -> Vec<Line<'a>> {
    let (working, needs) = tree.rows().fold((0, 0), |(w, n), a| {
        (w + usize::from(a.state == State::Working), n + usize::from(a.state == State::NeedsYou))
    });
    let heading = format!(
        "── agents: {} · {working} working · {needs} need you · ↑↓ select, Enter attaches, Esc hides",
        tree.len()
    );
    let mut lines = vec![Line::from(cut(&heading, width)).style(Style::new().add_modifier(Modifier::BOLD))];
    let room = usize::from(rows.saturating_sub(1));
    // A window of the rows that keeps the selected one in it.
    let first = tree.selected.saturating_sub(room.saturating_sub(1)).min(tree.len().saturating_sub(room));
    for (at, agent) in tree.rows().enumerate().skip(first).take(room) {
        let selected = at == tree.selected;
        let mark = match (selected, agent.state == State::NeedsYou) {
            (true, true) => ">!",
            (true, false) => "> ",
            (false, true) => " !",
            (false, false) => "  ",
        };
        let here = if Some(agent.id.as_str()) == attached { " (here)" } else { "" };
        // (What an agent or a model named or did is one line, shown and never obeyed.)
        let flat = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        let name = agent.name.as_deref().map(|n| format!(" {}", flat(n))).unwrap_or_default();
        let cost = agent.cost.map_or_else(|| "$?".to_owned(), |c| format!("${c:.4}"));
        let parts = [format!("{}{name}{here}", agent.id), agent.state.word().to_owned(), flat(&agent.doing)];
        let parts: Vec<&String> = parts.iter().filter(|p| !p.is_empty()).collect();
        let text = format!(
            "{mark}{}{}  {} · {cost}",
            "  ".repeat(agent.depth()),
            parts.iter().map(|p| p.as_str()).collect::<Vec<_>>().join("  "),
            tokens(agent.tokens)
        );
        let text = crate::cli::out::printable(&text).into_owned();
        let style = if selected { Style::new().add_modifier(Modifier::REVERSED) } else { Style::new() };
        lines.push(Line::from(cut(&text, width)).style(style));
    }
    lines
}

/// A token count in a few characters: `950`, `12.3k`, `4.1M`.
pub(crate) fn tokens(n: u64) -> String {
    match n {
        0..1_000 => format!("{n} tok"),
        1_000..1_000_000 => format!("{:.1}k tok", n as f64 / 1_000.0),
        _ => format!("{:.1}M tok", n as f64 / 1_000_000.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::chat::pane::{Agent, Tree};
    use engine::step::events::{End, Record};
    use ratatui::Terminal;
    use ratatui::backend::{Backend, TestBackend};

    fn tree() -> Tree {
        let mut tree = Tree::load("k7q2mx", Vec::new());
        tree.add(Agent {
            state: State::Working,
            doing: "step 4".into(),
            tokens: 12_345,
            cost: Some(0.0123),
            ..Agent::new("k7q2mx", Some("Lead".into()))
        });
        for n in 1..=3 {
            tree.add(Agent::new(&format!("k7q2mx.{n}"), Some(format!("Scout{n}"))));
        }
        let step = Record::Step { step: 2, provider: "p".into(), model: "m".into() };
        tree.apply("k7q2mx.1", &step);
        let call = Record::ToolCall {
            tool_use_id: "t".into(),
            name: "bash".into(),
            input: serde_json::json!({"command": "cargo test"}),
        };
        tree.apply("k7q2mx.1", &call);
        tree.apply("k7q2mx.2", &Record::End(End::BudgetExhausted { error: "$0.50 spent".into() }));
        tree.apply("k7q2mx.3", &Record::End(End::FinalResponse { text: "done".into(), refused: false }));
        tree
    }

    /// What the terminal shows, and where its cursor is.
    fn render(live: &Live<'_>, width: u16, rows: u16) -> String {
        let height = height(live, rows);
        let mut term = Terminal::new(TestBackend::new(width, height)).expect("terminal");
        term.draw(|frame| {
            let at = draw(live, frame.area(), frame.buffer_mut());
            frame.set_cursor_position(at);
        })
        .expect("draw");
        let at = term.backend_mut().get_cursor_position().expect("cursor");
        format!("{}\ncursor at {},{}", term.backend(), at.x, at.y)
    }

    #[test]
    fn the_live_area_without_the_pane() {
        let live = Live {
            activity: "  │ streaming the answer, so far, a line longer than the terminal is wide",
            streaming: true,
            status: "── `k7q2mx` Lead · working · claude · step 4 · 12.3k tok · $0.0123 · ctx 12%",
            input: ("a message\nof two", " lines"),
            pane: None,
            attached: Some("k7q2mx"),
        };
        insta::assert_snapshot!(render(&live, 60, 40));
    }

    #[test]
    fn the_pane_marks_who_needs_you_and_the_selected_row() {
        let mut tree = tree();
        tree.select(2);
        let live = Live {
            activity: "",
            streaming: false,
            status: "── status",
            input: ("", ""),
            pane: Some(&tree),
            attached: Some("k7q2mx"),
        };
        insta::assert_snapshot!(render(&live, 100, 40));
    }

    #[test]
    fn a_small_terminal_shows_a_window_of_the_pane_around_the_selection() {
        let mut tree = tree();
        tree.select(3);
        let live = Live {
            activity: "",
            streaming: false,
            status: "── status",
            input: ("", ""),
            pane: Some(&tree),
            attached: None,
        };
        // 9 rows: 4 for the chat, 2 kept for the scrollback, 3 for the pane.
        insta::assert_snapshot!(render(&live, 40, 9));
    }

    #[test]
    fn what_agents_wrote_is_shown_not_obeyed_and_long_input_shows_its_end() {
        let live = Live {
            activity: "  │ \x1b]0;title\x07 evil",
            streaming: false,
            status: "── status",
            input: (&"word ".repeat(30), ""),
            pane: None,
            attached: None,
        };
        insta::assert_snapshot!(render(&live, 40, 40));
    }
}
