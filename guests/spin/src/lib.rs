//! Never returns when the payload says `"spin": true` (else acks): the
//! host's deadline has to stop it.

use std::hint::black_box;

use rheo_guest::serde_json::Value;
use rheo_guest::{Delivery, Outcome, PayloadError};

fn handle(delivery: Delivery) -> Result<Outcome, PayloadError> {
    if delivery.event.payload_json()?.get("spin") != Some(&Value::Bool(true)) {
        return Ok(Outcome::Ack);
    }
    // A side-effect-free infinite loop is undefined behaviour in LLVM's eyes
    // and may be deleted; `black_box` makes every iteration observable.
    let mut n: u64 = 0;
    loop {
        n = black_box(n.wrapping_add(1));
    }
}

rheo_guest::handler!(handle);
