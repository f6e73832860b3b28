//! Allocates without end when the payload says `"hog": true` (else acks):
//! the host's memory cap has to stop it.

use std::hint::black_box;

use rheo_guest::serde_json::Value;
use rheo_guest::{Delivery, Outcome, PayloadError};

fn handle(delivery: Delivery) -> Result<Outcome, PayloadError> {
    if delivery.event.payload_json()?.get("hog") != Some(&Value::Bool(true)) {
        return Ok(Outcome::Ack);
    }
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    let mut chunk = 64 * 1024;
    loop {
        // Touch every page so the memory is really used, and keep the
        // chunks alive so nothing can be freed or elided.
        hoard.push(black_box(vec![0xA5; chunk]));
        chunk = (chunk * 2).min(8 * 1024 * 1024);
        black_box(&hoard);
    }
}

rheo_guest::handler!(handle);
