//! A `tracing` subscriber that records events, so tests can see what a
//! guest logged. Installed per thread ([`Captured::start`]); the tests that
//! use it run on a current-thread runtime, where guest code, host functions
//! and the test itself share that thread.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::DefaultGuard;
use tracing::{Event, Level, Metadata, Subscriber};

/// One recorded event: level, target and fields (`message` included).
#[derive(Debug, Clone)]
pub(super) struct Line {
    pub(super) level: Level,
    pub(super) target: String,
    pub(super) fields: BTreeMap<String, String>,
}

impl Line {
    pub(super) fn field(&self, name: &str) -> &str {
        self.fields.get(name).map_or("", String::as_str)
    }
}

/// Records events until dropped.
pub(super) struct Captured {
    lines: Arc<Mutex<Vec<Line>>>,
    _guard: DefaultGuard,
}

impl Captured {
    /// Starts recording on this thread.
    pub(super) fn start() -> Self {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let guard = tracing::subscriber::set_default(Recorder {
            lines: Arc::clone(&lines),
        });
        Self {
            lines,
            _guard: guard,
        }
    }

    /// The lines logged for `handler` so far.
    pub(super) fn of_handler(&self, handler: &str) -> Vec<Line> {
        self.lines
            .lock()
            .iter()
            .filter(|l| l.target == super::super::LOG_TARGET && l.field("handler") == handler)
            .cloned()
            .collect()
    }
}

struct Recorder {
    lines: Arc<Mutex<Vec<Line>>>,
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        self.lines.lock().push(Line {
            level: *event.metadata().level(),
            target: event.metadata().target().to_owned(),
            fields,
        });
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}
