//! What other crates' tests need of the handler host (feature `testing`):
//! the example guests and one engine per test process with pooling sizes
//! small enough that many test processes fit side by side.

use std::sync::OnceLock;

use crate::{EngineOptions, PoolingOptions, WasmEngine};

/// The bytes of the example guest `name` (`rheo-example-guests`).
pub fn guest(name: &str) -> Vec<u8> {
    rheo_example_guests::get(name)
        .unwrap_or_else(|| panic!("no example guest {name}"))
        .to_vec()
}

/// Pooling sizes small enough that many test processes and engines fit in
/// the address space side by side.
pub fn small_pool() -> PoolingOptions {
    PoolingOptions {
        total_component_instances: 64,
        total_core_instances: 256,
        total_memories: 128,
        total_tables: 128,
        max_memory_mb: 256,
        ..PoolingOptions::default()
    }
}

/// The engine shared by the tests of this process.
pub fn engine() -> WasmEngine {
    static ENGINE: OnceLock<WasmEngine> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            WasmEngine::new(EngineOptions {
                pooling: Some(small_pool()),
                ..EngineOptions::default()
            })
            .expect("the test engine builds")
        })
        .clone()
}
