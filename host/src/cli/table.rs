//! Aligned text tables for the human-readable output of the ops commands:
//! a header row, columns two spaces apart, numbers right-aligned. Widths
//! count characters, not bytes; the last column is never padded, so no
//! line ends in spaces.

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Align {
    /// Text: padded on the right.
    Left,
    /// Numbers: padded on the left.
    Right,
}

/// A table being filled row by row.
#[derive(Debug)]
pub(crate) struct Table {
    headers: Vec<String>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these columns, e.g. `[("NAME", Align::Left), ("EVENTS", Align::Right)]`.
    pub(crate) fn new(columns: &[(&str, Align)]) -> Self {
        Self {
            headers: columns.iter().map(|(h, _)| (*h).to_owned()).collect(),
            align: columns.iter().map(|(_, a)| *a).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells are empty, extra cells are dropped.
    pub(crate) fn row<I, S>(&mut self, cells: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut row: Vec<String> = cells.into_iter().map(Into::into).collect();
        row.resize(self.headers.len(), String::new());
        self.rows.push(row);
    }

    /// The table as text, one line per row after the header, each ending
    /// in a newline.
    pub(crate) fn render(&self) -> String {
        let width = |cell: &str| cell.chars().count();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| width(h)).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(width(cell));
            }
        }
        let last = self.headers.len().saturating_sub(1);
        let mut out = String::new();
        let headers = self.headers.clone();
        for row in std::iter::once(&headers).chain(&self.rows) {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                let pad = " ".repeat(widths[i] - width(cell));
                match self.align[i] {
                    Align::Right => {
                        line.push_str(&pad);
                        line.push_str(cell);
                    }
                    Align::Left => {
                        line.push_str(cell);
                        if i < last {
                            line.push_str(&pad);
                        }
                    }
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `key  value` lines with the values lined up, for one record.
pub(crate) fn key_values(pairs: &[(&str, String)]) -> String {
    let width = pairs
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for (key, value) in pairs {
        let pad = " ".repeat(width - key.chars().count());
        out.push_str(format!("{key}{pad}  {value}").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_values_line_up() {
        let text = key_values(&[("status", "running".into()), ("max attempts", "5".into())]);
        assert_eq!(text, "status        running\nmax attempts  5\n");
    }

    #[test]
    fn columns_line_up_with_numbers_on_the_right() {
        let mut table = Table::new(&[
            ("NAME", Align::Left),
            ("EVENTS", Align::Right),
            ("CREATED", Align::Left),
        ]);
        table.row(["orders", "1200", "2025-01-01"]);
        table.row(["a", "7", "2025-01-02"]);
        assert_eq!(
            table.render(),
            "NAME    EVENTS  CREATED\n\
             orders    1200  2025-01-01\n\
             a            7  2025-01-02\n"
        );
    }

    #[test]
    fn widths_count_characters_and_no_line_ends_in_spaces() {
        let mut table = Table::new(&[("K", Align::Left), ("V", Align::Left)]);
        table.row(["ééé", ""]);
        table.row(["x"]);
        assert_eq!(table.render(), "K    V\nééé\nx\n");
    }

    #[test]
    fn an_empty_table_is_its_header() {
        let table = Table::new(&[("A", Align::Right), ("B", Align::Left)]);
        assert_eq!(table.render(), "A  B\n");
    }
}
