//! The statement files: every dialect has exactly one per statement.

use std::collections::BTreeSet;
use std::path::Path;

use super::Statement;

/// The `.sql` files of a dialect folder.
fn files(dialect: &str) -> BTreeSet<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join(dialect)
        .join("sql");
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn every_dialect_has_exactly_the_engines_statements() {
    let expected: BTreeSet<String> = Statement::ALL
        .iter()
        .map(|s| s.file_name().to_owned())
        .collect();
    for dialect in ["sqlite", "postgres"] {
        assert_eq!(files(dialect), expected, "{dialect}/sql/");
    }
}

#[test]
fn a_statement_of_only_comments_is_skipped() {
    assert!(!super::has_sql("-- nothing to do here\n\n  -- really\n"));
    assert!(super::has_sql("-- why\nSELECT 1\n"));
}
