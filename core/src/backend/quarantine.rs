//! Parked keys (`docs/groups.md#quarantine`): under `on_exhausted =
//! "quarantine"` a gated head that used its last attempt stays leased to
//! the quarantine ([`policy::QUARANTINE_CONSUMER`], expiring never), so
//! its gate stays shut and the rest of its key waits in order. The store
//! writes that hold where it would have dead-lettered the head
//! ([`policy::exhausted`]); everything else is here, once, on top of what
//! every store already does:
//!
//! - [`parked_keys`] lists the holds, from the group's leases;
//! - [`release`] resumes a key by redriving its head (the store's redrive
//!   takes a quarantined head as it takes a dead letter: attempts start
//!   over and the gate hands the head out again, before the rest of its
//!   key), or skips the head into the dead letters by rejecting it under
//!   the quarantine's own lease (its gate then hands out the next event of
//!   the key).

use std::collections::BTreeSet;

use super::policy::is_quarantine;
use super::{Backend, Error, LeasesRequest, ReadRequest, Redrive, Result};
use crate::model::{
    EventId, GroupName, GroupOrdering, LeaseCursor, LeaseId, MAX_QUERY_LIMIT, ParkedKey, SettleOp,
    SettleTarget, Settlement, StreamName,
};

/// Which parked keys a release names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parked {
    /// Every key parked now.
    All,
    /// These keys (a key that is not parked is left alone).
    Keys(Vec<String>),
    /// The keys whose parked heads are these events (under `ordering =
    /// "partition"`, the way to name a parked partition).
    Events(Vec<EventId>),
}

/// Release parked keys (`POST …/quarantine/release`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseRequest {
    /// The stream.
    pub stream: StreamName,
    /// The group.
    pub group: GroupName,
    /// Which keys.
    pub which: Parked,
    /// Send each head to the dead letters instead of handing it out again.
    pub skip_head: bool,
    /// Must be true; checked before anything else.
    pub confirm: bool,
}

/// What a release did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Released {
    /// The keys released, as they were listed.
    pub released: Vec<ParkedKey>,
    /// Named keys (or events) that were not parked.
    pub not_parked: Vec<String>,
}

/// A parked head with the quarantine's lease on it.
struct Hold {
    parked: ParkedKey,
    lease_id: LeaseId,
}

/// The group's ordering, which says whether a hold parks a key or a
/// partition.
async fn ordering_of(
    store: &dyn Backend,
    stream: &StreamName,
    group: &GroupName,
) -> Result<GroupOrdering> {
    let groups = store.list_groups(stream).await?;
    match groups.into_iter().find(|g| &g.name == group) {
        Some(g) => Ok(g.ordering),
        None => Err(Error::GroupNotFound {
            stream: stream.clone(),
            group: group.clone(),
        }),
    }
}

async fn holds(
    store: &dyn Backend,
    stream: &StreamName,
    group: &GroupName,
    ordering: GroupOrdering,
) -> Result<Vec<Hold>> {
    let mut out = Vec::new();
    let mut after: Option<LeaseCursor> = None;
    // Every lease is read: quarantined heads are few, but sit anywhere
    // among the group's leases (`docs/groups.md#quarantine`).
    loop {
        let page = store
            .leases(LeasesRequest {
                stream: stream.clone(),
                group: group.clone(),
                limit: MAX_QUERY_LIMIT,
                after,
            })
            .await?;
        for lease in page.leases {
            if !is_quarantine(&lease.consumer_id) {
                continue;
            }
            let key = match ordering {
                GroupOrdering::Partition => None,
                GroupOrdering::Key | GroupOrdering::None => store
                    .read(ReadRequest {
                        stream: stream.clone(),
                        partition: lease.partition,
                        after: lease.sequence - 1,
                        limit: 1,
                    })
                    .await?
                    .into_iter()
                    .find(|e| e.sequence == lease.sequence)
                    .and_then(|e| e.key),
            };
            out.push(Hold {
                parked: ParkedKey {
                    key,
                    partition: lease.partition,
                    sequence: lease.sequence,
                    event_id: lease.event_id,
                    attempt: lease.attempt,
                    reason: lease.reason.unwrap_or_default(),
                    parked_at: lease.leased_at,
                },
                lease_id: lease.lease_id,
            });
        }
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    Ok(out)
}

/// The keys of `group` parked now, in (partition, sequence) order of their
/// heads.
pub async fn parked_keys(
    store: &dyn Backend,
    stream: &StreamName,
    group: &GroupName,
) -> Result<Vec<ParkedKey>> {
    let ordering = ordering_of(store, stream, group).await?;
    parked_keys_under(store, stream, group, ordering).await
}

/// [`parked_keys`] of a group whose ordering the caller has just read
/// (a group's info, say), without reading it again.
pub async fn parked_keys_under(
    store: &dyn Backend,
    stream: &StreamName,
    group: &GroupName,
    ordering: GroupOrdering,
) -> Result<Vec<ParkedKey>> {
    Ok(holds(store, stream, group, ordering)
        .await?
        .into_iter()
        .map(|h| h.parked)
        .collect())
}

/// The dead-letter reason of a head skipped out of quarantine.
pub fn skipped_reason(reason: &str) -> String {
    format!("skipped from quarantine: {reason}")
}

/// Resumes (or skips the heads of) the parked keys `req` names.
pub async fn release(store: &dyn Backend, req: ReleaseRequest) -> Result<Released> {
    if !req.confirm {
        return Err(Error::ConfirmRequired);
    }
    let ordering = ordering_of(store, &req.stream, &req.group).await?;
    let holds = holds(store, &req.stream, &req.group, ordering).await?;
    // What names each hold: its key, or its head's event id.
    let name = |h: &Hold| match &req.which {
        Parked::Events(_) => Some(h.parked.event_id.as_str().to_owned()),
        _ => h.parked.key.clone(),
    };
    let named: BTreeSet<String> = match &req.which {
        Parked::All => BTreeSet::new(),
        Parked::Keys(keys) => keys.iter().cloned().collect(),
        Parked::Events(ids) => ids.iter().map(|id| id.as_str().to_owned()).collect(),
    };
    // A key may be parked in several partitions: each is released.
    let chosen: Vec<Hold> = holds
        .into_iter()
        .filter(|h| req.which == Parked::All || name(h).is_some_and(|n| named.contains(&n)))
        .collect();
    let found: BTreeSet<String> = chosen.iter().filter_map(name).collect();
    let mut not_parked: BTreeSet<String> = named.difference(&found).cloned().collect();
    let mut released = Vec::new();
    if req.skip_head {
        let items = chosen
            .iter()
            .map(|h| Settlement {
                target: SettleTarget {
                    event_id: h.parked.event_id.clone(),
                    lease_id: h.lease_id.clone(),
                    receipt: None,
                },
                op: SettleOp::Reject {
                    reason: Some(skipped_reason(&h.parked.reason)),
                },
            })
            .collect();
        let results = store.settle(&req.stream, &req.group, items).await?;
        for (h, result) in chosen.into_iter().zip(results) {
            match result {
                Ok(()) => released.push(h.parked),
                // Released meanwhile (by another release, a replay or a
                // reset): not parked any more.
                Err(Error::StaleLease) => {
                    not_parked.insert(h.parked.event_id.as_str().to_owned());
                }
                Err(e) => return Err(e),
            }
        }
    } else if !chosen.is_empty() {
        let ids = chosen.iter().map(|h| h.parked.event_id.clone()).collect();
        store
            .redrive(&req.stream, &req.group, Redrive::Events(ids))
            .await?;
        released.extend(chosen.into_iter().map(|h| h.parked));
    }
    Ok(Released {
        released,
        not_parked: not_parked.into_iter().collect(),
    })
}
