//! The chat's terminal backend: crossterm's, but with the size the chat last adopted.
//! ratatui resizes an inline viewport on its own when a draw finds the terminal's size
//! changed, clearing from where the live area stood before the terminal moved the text
//! around it — a resize landing between the chat's own look at the size and its draw
//! would wipe scrollback. With the size held, only the chat's redraw (which finds the
//! live area from the cursor) ever follows a resize.

use std::io::Stdout;

use ratatui::backend::{Backend, ClearType, CrosstermBackend, WindowSize};
use ratatui::buffer::Cell;
use ratatui::layout::{Position, Size};

pub(super) struct Held {
    inner: CrosstermBackend<Stdout>,
    size: Size,
}

impl Held {
    /// The terminal on standard output, at its size now.
    pub(super) fn now() -> Held {
        let inner = CrosstermBackend::new(std::io::stdout());
        let size = inner.size().unwrap_or(Size { width: 80, height: 24 });
        Held { inner, size }
    }
}

impl Backend for Held {
    type Error = <CrosstermBackend<Stdout> as Backend>::Error;

    fn draw<'a, I>(&mut self, content: I) -> Result<(), Self::Error>
    where
        I: Iterator<Item = (u16, u16, &'a Cell)>,
    {
        self.inner.draw(content)
    }

    fn append_lines(&mut self, n: u16) -> Result<(), Self::Error> {
        self.inner.append_lines(n)
    }

    fn hide_cursor(&mut self) -> Result<(), Self::Error> {
        self.inner.hide_cursor()
    }

    fn show_cursor(&mut self) -> Result<(), Self::Error> {
        self.inner.show_cursor()
    }

    fn get_cursor_position(&mut self) -> Result<Position, Self::Error> {
        self.inner.get_cursor_position()
    }

    fn set_cursor_position<P: Into<Position>>(&mut self, position: P) -> Result<(), Self::Error> {
        self.inner.set_cursor_position(position)
    }

    fn clear(&mut self) -> Result<(), Self::Error> {
        self.inner.clear()
    }

    fn clear_region(&mut self, clear_type: ClearType) -> Result<(), Self::Error> {
        self.inner.clear_region(clear_type)
    }

    /// The size the chat adopted, not the terminal's now (see the module's words).
    fn size(&self) -> Result<Size, Self::Error> {
        Ok(self.size)
    }

    fn window_size(&mut self) -> Result<WindowSize, Self::Error> {
        self.inner.window_size()
    }

    fn flush(&mut self) -> Result<(), Self::Error> {
        Backend::flush(&mut self.inner)
    }

    fn scroll_region_up(&mut self, region: std::ops::Range<u16>, line_count: u16) -> Result<(), Self::Error> {
        self.inner.scroll_region_up(region, line_count)
    }

    fn scroll_region_down(&mut self, region: std::ops::Range<u16>, line_count: u16) -> Result<(), Self::Error> {
        self.inner.scroll_region_down(region, line_count)
    }
}
