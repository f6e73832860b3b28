//! `now-ms()`: the host's clock, the same one leases are timed by.
//!
//! Guests must not read WASI's wall clock for anything that has to agree
//! with lease expiry: under `--test-clock` only this clock is frozen.

use crate::clock::SharedClock;

/// Milliseconds since the Unix epoch; 0 for (impossible) pre-1970 times.
pub(crate) fn now_ms(clock: &SharedClock) -> u64 {
    u64::try_from(clock.now().as_millis()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FrozenClock;
    use crate::model::Timestamp;

    #[test]
    fn reads_the_injected_clock() {
        let clock = FrozenClock::new(Timestamp::from_millis(1_234));
        let shared: SharedClock = clock.clone();
        assert_eq!(now_ms(&shared), 1_234);
        clock.advance(6);
        assert_eq!(now_ms(&shared), 1_240);
    }
}
