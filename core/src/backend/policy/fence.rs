//! The fencing check (`docs/groups.md#leases-and-fencing`): whether a
//! settle or a renewal may act on a delivery, given the lease it is held
//! under now. A store reads that lease (or guards its write on it) and asks
//! here; the same answer on every store.

use crate::backend::{Error, Result};
use crate::model::SettleTarget;

/// The lease a delivery is held under now, as the fence sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held<'a> {
    /// The fencing token of the claim.
    pub lease_id: &'a str,
    /// The store's settle identity of the claim ([`crate::model::Lease`]'s
    /// `receipt`): the lease id, or on Redis the log entry id.
    pub receipt: &'a str,
}

/// Whether `target` may settle or renew a delivery held under `held`
/// (`None`: not leased — available, parked, acked or dead). The lease ids
/// must match, else `stale_lease` whatever the receipt; then a receipt,
/// when the caller kept one, must be the claim's, else `receipt_mismatch`.
/// An expired lease still holds until another claim takes the delivery.
pub fn fence(held: Option<Held<'_>>, target: &SettleTarget) -> Result<()> {
    let Some(held) = held.filter(|h| h.lease_id == target.lease_id.as_str()) else {
        return Err(Error::StaleLease);
    };
    match &target.receipt {
        Some(receipt) if receipt != held.receipt => Err(Error::ReceiptMismatch),
        _ => Ok(()),
    }
}
