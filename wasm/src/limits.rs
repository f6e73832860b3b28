//! Per-handler limits, and the resource limiter that enforces the memory cap.
//!
//! Memory is capped per *instance*, summed over all of its linear memories:
//! wasmtime's own `StoreLimits` caps each memory separately, which lets a
//! component with several memories (Python and JavaScript components have
//! them) use a multiple of the cap. [`GuestLimiter`] keeps the running total
//! and refuses growth past the cap with a [`MemoryCapReached`] error, which
//! traps the guest (like `StoreLimits` with `trap_on_grow_failure(true)`)
//! and lets the runner tell a memory stop from any other trap by type, not
//! by message text.

use std::fmt;

use wasmtime::ResourceLimiter;

use super::WasmError;

/// Default deadline of one call (`docs/handlers.md#sandbox-and-limits`).
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// Default memory cap of one instance, in MiB
/// (`docs/handlers.md#sandbox-and-limits`).
pub const DEFAULT_MEMORY_MB: u64 = 128;
/// Default number of calls a warm instance serves before it is replaced.
pub const DEFAULT_MAX_INVOCATIONS: u64 = 10_000;
/// Longest deadline a handler may ask for (15 minutes).
pub const MAX_TIMEOUT_MS: u64 = 15 * 60 * 1000;

/// Most elements in one table of a guest.
const TABLE_ELEMENTS: usize = 100_000;
/// Most core instances, tables and memories in one store: room for
/// multi-module components (Python) without letting one run away.
const INSTANCES: usize = 200;
const TABLES: usize = 200;
const MEMORIES: usize = 200;

/// How instances are used across calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InstanceMode {
    /// Keep warm instances and call them again; an instance is replaced
    /// after any trap, timeout or limit stop and after `max_invocations`
    /// calls. State a guest keeps in memory carries over between calls.
    #[default]
    Reuse,
    /// A new instance for every call: nothing carries over, at the price of
    /// an instantiation per call.
    Fresh,
}

/// What one handler's calls may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Deadline of one call, instantiation included.
    pub timeout_ms: u64,
    /// Linear memory of one instance, in MiB, summed over its memories.
    pub memory_mb: u64,
    /// Fuel for one call (needs an engine built with `fuel: true`); `None`
    /// is unmetered.
    pub fuel: Option<u64>,
    /// Instance reuse.
    pub instance: InstanceMode,
    /// Calls a warm instance serves before it is replaced (`Reuse` only);
    /// bounds how much state and memory a guest can pile up.
    pub max_invocations: u64,
    /// Warm instances kept between calls (`Reuse` only). The runtime sets
    /// it to the handler's concurrency: more would sit idle.
    pub max_warm: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            timeout_ms: DEFAULT_TIMEOUT_MS,
            memory_mb: DEFAULT_MEMORY_MB,
            fuel: None,
            instance: InstanceMode::Reuse,
            max_invocations: DEFAULT_MAX_INVOCATIONS,
            max_warm: 1,
        }
    }
}

impl Limits {
    /// Checks the limits against each other and against the engine.
    pub(crate) fn validate(&self, engine_fuel: bool, max_memory_mb: u64) -> Result<(), WasmError> {
        let bad = |message: String| Err(WasmError::Limits(message));
        if !(1..=MAX_TIMEOUT_MS).contains(&self.timeout_ms) {
            return bad(format!(
                "timeout_ms must be between 1 and {MAX_TIMEOUT_MS} (got {})",
                self.timeout_ms
            ));
        }
        if !(1..=max_memory_mb).contains(&self.memory_mb) {
            return bad(format!(
                "memory_mb must be between 1 and {max_memory_mb} on this engine (got {})",
                self.memory_mb
            ));
        }
        if self.fuel.is_some() && !engine_fuel {
            return bad("fuel is set but the engine was built without fuel metering".into());
        }
        if self.max_invocations == 0 {
            return bad("max_invocations must be at least 1".into());
        }
        Ok(())
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        usize::try_from(self.memory_mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX)
    }
}

/// The error a guest traps with when it grows past its memory cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MemoryCapReached {
    pub(crate) cap_bytes: usize,
    pub(crate) wanted_bytes: usize,
}

impl fmt::Display for MemoryCapReached {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "memory cap of {} bytes reached (asked for {} bytes in all)",
            self.cap_bytes, self.wanted_bytes
        )
    }
}

impl std::error::Error for MemoryCapReached {}

/// Enforces [`Limits::memory_mb`] over all memories of a store, plus fixed
/// caps on tables and instance counts.
#[derive(Debug)]
pub(crate) struct GuestLimiter {
    cap_bytes: usize,
    /// Bytes of linear memory granted so far, over all memories.
    used_bytes: usize,
    /// The last grant, taken back if the growth then fails.
    last_grant: usize,
}

impl GuestLimiter {
    pub(crate) fn new(cap_bytes: usize) -> Self {
        Self {
            cap_bytes,
            used_bytes: 0,
            last_grant: 0,
        }
    }
}

impl ResourceLimiter for GuestLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if maximum.is_some_and(|max| desired > max) {
            // The memory's own maximum: an ordinary `memory.grow` failure
            // (-1) that the guest may handle.
            return Ok(false);
        }
        let grant = desired.saturating_sub(current);
        let wanted = self.used_bytes.saturating_add(grant);
        if wanted > self.cap_bytes {
            return Err(MemoryCapReached {
                cap_bytes: self.cap_bytes,
                wanted_bytes: wanted,
            }
            .into());
        }
        self.used_bytes = wanted;
        self.last_grant = grant;
        Ok(true)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.used_bytes = self.used_bytes.saturating_sub(self.last_grant);
        self.last_grant = 0;
        // The host could not provide memory it had promised: trap rather
        // than let the guest carry on with a failed allocation it may not
        // check.
        Err(error.context("growing linear memory failed"))
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= TABLE_ELEMENTS && maximum.is_none_or(|max| desired <= max))
    }

    fn instances(&self) -> usize {
        INSTANCES
    }

    fn tables(&self) -> usize {
        TABLES
    }

    fn memories(&self) -> usize {
        MEMORIES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 64 * 1024;

    #[test]
    fn the_cap_is_summed_over_all_memories() {
        let mut limiter = GuestLimiter::new(10 * PAGE);
        assert!(limiter.memory_growing(0, 4 * PAGE, None).unwrap());
        assert!(limiter.memory_growing(0, 4 * PAGE, None).unwrap());
        let err = limiter
            .memory_growing(4 * PAGE, 7 * PAGE, None)
            .unwrap_err();
        let cap = err.downcast_ref::<MemoryCapReached>().unwrap();
        assert_eq!(cap.wanted_bytes, 11 * PAGE);
        assert!(limiter.memory_growing(4 * PAGE, 6 * PAGE, None).unwrap());
    }

    #[test]
    fn a_failed_growth_is_given_back_and_traps() {
        let mut limiter = GuestLimiter::new(10 * PAGE);
        assert!(limiter.memory_growing(0, 8 * PAGE, None).unwrap());
        assert!(
            limiter
                .memory_grow_failed(wasmtime::Error::msg("mmap failed"))
                .is_err()
        );
        assert!(limiter.memory_growing(0, 10 * PAGE, None).unwrap());
    }

    #[test]
    fn a_memorys_own_maximum_is_a_plain_failure() {
        let mut limiter = GuestLimiter::new(10 * PAGE);
        assert!(!limiter.memory_growing(0, 2 * PAGE, Some(PAGE)).unwrap());
    }

    #[test]
    fn limits_are_checked_against_the_engine() {
        let ok = Limits::default();
        assert!(ok.validate(false, 4096).is_ok());
        let fuel = Limits {
            fuel: Some(1_000),
            ..Limits::default()
        };
        assert!(fuel.validate(false, 4096).is_err());
        assert!(fuel.validate(true, 4096).is_ok());
        let big = Limits {
            memory_mb: 8192,
            ..Limits::default()
        };
        assert!(big.validate(false, 4096).is_err());
        let zero = Limits {
            timeout_ms: 0,
            ..Limits::default()
        };
        assert!(zero.validate(false, 4096).is_err());
    }
}
