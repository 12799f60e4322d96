//! What is being typed: the text and where the cursor is in it (a byte offset, always on
//! a character's boundary).

#[derive(Debug, Default)]
pub(crate) struct Editor {
    text: String,
    cursor: usize,
}

impl Editor {
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// The text before the cursor, and from it on.
    pub(crate) fn split(&self) -> (&str, &str) {
        self.text.split_at(self.cursor)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// Puts `text` in at the cursor, which goes after it.
    pub(crate) fn insert(&mut self, text: &str) {
        self.text.insert_str(self.cursor, text);
        self.cursor += text.len();
    }

    /// The character before the cursor goes.
    pub(crate) fn backspace(&mut self) {
        if let Some(c) = self.text[..self.cursor].chars().next_back() {
            self.cursor -= c.len_utf8();
            self.text.remove(self.cursor);
        }
    }

    /// The character at the cursor goes.
    pub(crate) fn delete(&mut self) {
        if self.cursor < self.text.len() {
            self.text.remove(self.cursor);
        }
    }

    pub(crate) fn left(&mut self) {
        if let Some(c) = self.text[..self.cursor].chars().next_back() {
            self.cursor -= c.len_utf8();
        }
    }

    pub(crate) fn right(&mut self) {
        if let Some(c) = self.text[self.cursor..].chars().next() {
            self.cursor += c.len_utf8();
        }
    }

    /// To the start of the line the cursor is on.
    pub(crate) fn home(&mut self) {
        self.cursor = self.text[..self.cursor].rfind('\n').map_or(0, |at| at + 1);
    }

    /// To the end of the line the cursor is on.
    pub(crate) fn end(&mut self) {
        self.cursor = self.text[self.cursor..].find('\n').map_or(self.text.len(), |at| self.cursor + at);
    }

    /// Replaces the text; the cursor goes to its end.
    pub(crate) fn set(&mut self, text: String) {
        self.cursor = text.len();
        self.text = text;
    }

    /// The text, leaving the editor empty.
    pub(crate) fn take(&mut self) -> String {
        self.cursor = 0;
        std::mem::take(&mut self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn editing_happens_at_the_cursor_and_it_never_splits_a_character() {
        let mut e = Editor::default();
        e.insert("héllo");
        e.left();
        e.left();
        e.left();
        e.left();
        e.backspace();
        assert_eq!((e.text(), e.split().0), ("éllo", ""));
        e.right();
        e.insert("x\ny");
        assert_eq!(e.split(), ("éx\ny", "llo"));
        e.home();
        assert_eq!(e.split(), ("éx\n", "yllo"));
        e.end();
        assert_eq!(e.split(), ("éx\nyllo", ""));
        e.home();
        e.left();
        e.delete();
        assert_eq!(e.text(), "éxyllo");
        e.set("again".into());
        e.backspace();
        assert_eq!(e.take(), "agai");
        assert!(e.is_empty());
        e.backspace();
        e.delete();
        e.right();
        assert_eq!(e.split(), ("", ""));
    }
}
