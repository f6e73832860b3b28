//! Acks every delivery. The smallest possible handler, and the one the
//! host's per-call cost is measured with.

use rheo_guest::{Delivery, Outcome};

fn handle(_delivery: Delivery) -> Outcome {
    Outcome::Ack
}

rheo_guest::handler!(handle);
