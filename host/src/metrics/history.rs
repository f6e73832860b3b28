//! The recent past of what [`super::GroupSamples`] samples, kept in memory
//! so the console's plots survive a reload (`docs/console.md#plots`,
//! `GET /v1/metrics/samples`): per group its lag, settled and appended
//! counts; per handler its processed and acked counts.
//!
//! Bounded twice: a series keeps [`WINDOW`] of points, at most one per
//! [`SPACING`] (so a short `--metrics-interval` keeps no more), and a
//! series not sampled for a whole window (a deleted group or handler)
//! goes. Nothing is written to the store; a restart starts afresh.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use crate::model::Timestamp;

/// How far back the series reach: the console's plots show five minutes.
pub const WINDOW: Duration = Duration::from_secs(5 * 60);

/// At most one point per series this often: a sampling round sooner
/// after a series' last point adds none to it.
pub const SPACING: Duration = Duration::from_secs(1);

/// The most points a series holds (the window at one point per spacing,
/// and one more).
const MAX_POINTS: usize = (WINDOW.as_millis() / SPACING.as_millis()) as usize + 1;

/// A group's figures in one round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupPoint {
    /// When it was sampled (the server's clock).
    pub at: Timestamp,
    /// Events after the frontier, over all partitions.
    pub lag: u64,
    /// The sum of the partitions' frontiers: events settled.
    pub settled: u64,
    /// The sum of the partitions' high watermarks: events appended.
    pub appended: u64,
}

/// A handler's counters in one round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandlerPoint {
    /// When it was sampled (the server's clock).
    pub at: Timestamp,
    /// Deliveries handled.
    pub processed: u64,
    /// Deliveries acked.
    pub acked: u64,
}

/// What a handler is in one round: where it consumes, and its counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerSample {
    /// The handler's name.
    pub name: String,
    /// Its stream.
    pub stream: String,
    /// Its group.
    pub group: String,
    /// Deliveries handled (every version on this server).
    pub processed: u64,
    /// Deliveries acked.
    pub acked: u64,
}

/// A handler's series: where it consumed last, and its points.
#[derive(Debug, Clone, Default)]
pub struct HandlerSeries {
    /// Its stream, as of its last point.
    pub stream: String,
    /// Its group, as of its last point.
    pub group: String,
    /// Oldest first.
    pub points: VecDeque<HandlerPoint>,
}

/// Every series, keyed by `(stream, group)` and by handler name.
#[derive(Debug, Default)]
pub struct History {
    groups: BTreeMap<(String, String), VecDeque<GroupPoint>>,
    handlers: BTreeMap<String, HandlerSeries>,
}

impl History {
    /// Adds one sampling round taken at `at`: `groups` as `(stream, group,
    /// lag, settled, appended)`, and the handlers. A series whose last
    /// point is within [`SPACING`] of `at` keeps it and takes no new one;
    /// one whose last point is later than `at` (a test clock set back)
    /// starts afresh.
    pub fn push(
        &mut self,
        at: Timestamp,
        groups: impl IntoIterator<Item = (String, String, u64, u64, u64)>,
        handlers: impl IntoIterator<Item = HandlerSample>,
    ) {
        for (stream, group, lag, settled, appended) in groups {
            let points = self.groups.entry((stream, group)).or_default();
            if due(points, at) {
                points.push_back(GroupPoint {
                    at,
                    lag,
                    settled,
                    appended,
                });
            }
        }
        for h in handlers {
            let series = self.handlers.entry(h.name).or_default();
            series.stream = h.stream;
            series.group = h.group;
            if due(&mut series.points, at) {
                series.points.push_back(HandlerPoint {
                    at,
                    processed: h.processed,
                    acked: h.acked,
                });
            }
        }
        let oldest = at.sub_ms(WINDOW.as_millis() as u64);
        self.groups.retain(|_, points| trim(points, oldest));
        self.handlers
            .retain(|_, series| trim(&mut series.points, oldest));
    }

    /// The group series, by stream and group name.
    pub fn groups(&self) -> &BTreeMap<(String, String), VecDeque<GroupPoint>> {
        &self.groups
    }

    /// The handler series, by name.
    pub fn handlers(&self) -> &BTreeMap<String, HandlerSeries> {
        &self.handlers
    }
}

/// Whether a point taken at `at` joins `points`: not within [`SPACING`]
/// of the last one. Points later than `at` (a clock set back) go.
fn due<P: At>(points: &mut VecDeque<P>, at: Timestamp) -> bool {
    match points.back().map(At::at) {
        Some(last) if at < last => {
            points.clear();
            true
        }
        Some(last) => at.ms_since(last) >= SPACING.as_millis() as u64,
        None => true,
    }
}

/// Something with a time.
trait At {
    fn at(&self) -> Timestamp;
}

impl At for GroupPoint {
    fn at(&self) -> Timestamp {
        self.at
    }
}

impl At for HandlerPoint {
    fn at(&self) -> Timestamp {
        self.at
    }
}

/// Drops the points before `oldest` and past [`MAX_POINTS`]; whether any
/// is left.
fn trim<P: At>(points: &mut VecDeque<P>, oldest: Timestamp) -> bool {
    while points
        .front()
        .is_some_and(|p| p.at() < oldest || points.len() > MAX_POINTS)
    {
        points.pop_front();
    }
    !points.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_millis(1_700_000_000_000 + s * 1000)
    }

    fn round(h: &mut History, s: i64, lag: u64) {
        h.push(
            at(s),
            [("orders".into(), "billing".into(), lag, 10 - lag, 10)],
            [HandlerSample {
                name: "billing".into(),
                stream: "orders".into(),
                group: "billing".into(),
                processed: lag,
                acked: lag,
            }],
        );
    }

    #[test]
    fn keeps_a_window_of_spaced_points() {
        let mut h = History::default();
        for s in 0..1000 {
            round(&mut h, s, (s % 10) as u64);
        }
        let points = &h.groups()[&("orders".into(), "billing".into())];
        assert_eq!(points.len(), MAX_POINTS);
        assert_eq!(points.back().unwrap().at, at(999));
        assert_eq!(points.front().unwrap().at, at(999 - 300));
        assert_eq!(h.handlers()["billing"].points.len(), MAX_POINTS);
    }

    #[test]
    fn a_round_too_soon_after_the_last_point_is_left_out_of_that_series_only() {
        let mut h = History::default();
        round(&mut h, 0, 1);
        h.push(
            Timestamp::from_millis(at(0).as_millis() + 400),
            [
                ("orders".into(), "billing".into(), 5, 5, 10),
                ("orders".into(), "new".into(), 7, 0, 7),
            ],
            [],
        );
        let points = &h.groups()[&("orders".into(), "billing".into())];
        assert_eq!(points.len(), 1);
        assert_eq!(points[0].lag, 1);
        assert_eq!(h.groups()[&("orders".into(), "new".into())][0].lag, 7);
    }

    #[test]
    fn series_no_longer_sampled_go_after_a_window() {
        let mut h = History::default();
        round(&mut h, 0, 1);
        h.push(at(200), [], []);
        assert_eq!(h.groups().len(), 1);
        h.push(at(301), [], []);
        assert!(h.groups().is_empty());
        assert!(h.handlers().is_empty());
    }

    #[test]
    fn a_clock_moved_back_starts_afresh() {
        let mut h = History::default();
        round(&mut h, 100, 1);
        round(&mut h, 50, 2);
        let points = &h.groups()[&("orders".into(), "billing".into())];
        assert_eq!(points.len(), 1);
        assert_eq!(points[0].lag, 2);
    }
}
