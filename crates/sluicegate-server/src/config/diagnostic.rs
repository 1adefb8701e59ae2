//! Configuration errors with their place in the file.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// One configuration error: where and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// 1-based line; 0 when the error has no place (e.g. the file cannot be read).
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// The reason.
    pub message: String,
}

/// Every error found in one file, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostics {
    /// The file the errors are in.
    pub path: PathBuf,
    /// The errors.
    pub errors: Vec<Diagnostic>,
}

impl Diagnostics {
    /// One error without a position.
    pub fn single(path: &Path, message: String) -> Self {
        Diagnostics {
            path: path.to_owned(),
            errors: vec![Diagnostic {
                line: 0,
                column: 0,
                message,
            }],
        }
    }
}

impl fmt::Display for Diagnostics {
    /// `file:line:column: reason`, one error a line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.errors.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            if d.line == 0 {
                write!(f, "{}: error: {}", self.path.display(), d.message)?;
            } else {
                write!(
                    f,
                    "{}:{}:{}: error: {}",
                    self.path.display(),
                    d.line,
                    d.column,
                    d.message
                )?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

/// Collects errors as byte spans and turns them into lines and columns at the end.
pub(super) struct Collector<'a> {
    text: &'a str,
    errors: Vec<(Range<usize>, String)>,
}

impl<'a> Collector<'a> {
    pub(super) fn new(text: &'a str) -> Self {
        Collector {
            text,
            errors: Vec::new(),
        }
    }

    /// Records an error at `span` (byte offsets into the text).
    pub(super) fn error(&mut self, span: Range<usize>, message: impl Into<String>) {
        self.errors.push((span, message.into()));
    }

    pub(super) fn len(&self) -> usize {
        self.errors.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    pub(super) fn finish(mut self, path: &Path) -> Diagnostics {
        self.errors.sort_by_key(|(span, _)| span.start);
        self.errors.dedup();
        let errors = self
            .errors
            .into_iter()
            .map(|(span, message)| {
                let (line, column) = line_column(self.text, span.start);
                Diagnostic {
                    line,
                    column,
                    message,
                }
            })
            .collect();
        Diagnostics {
            path: path.to_owned(),
            errors,
        }
    }
}

/// 1-based line and column (in characters) of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::line_column;

    #[test]
    fn lines_and_columns_are_one_based() {
        let text = "a = 1\nbé = 2\n";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, 6), (2, 1));
        assert_eq!(line_column(text, 10), (2, 4));
        assert_eq!(line_column(text, 999), (3, 1));
    }
}
