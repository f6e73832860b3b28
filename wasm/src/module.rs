//! Turning bytes into a validated, ready-to-instantiate handler module.
//!
//! [`WasmEngine::load`] compiles on a blocking thread (60 ms for a small Rust
//! component, 6–7 s for a Python one: never on an async worker), then
//! validates before anything can run it: the bytes must be a component, the
//! linker must satisfy every import, and the `handle` export (and
//! `handle-batch`, when the component exports it: the 0.2.0 world) must
//! have the right type. The result, a [`HandlerModule`], is an `InstancePre` with the
//! content [`Digest`] of the bytes (the compile cache's key): cheap to clone, shared by every instance and
//! every runner of that version. A module that fails any step is an error
//! and nothing else changes, so a hot reload can keep the old version.

use std::fmt;
use std::sync::Arc;

use wasmtime::component::Component;

use super::WasmError;
use super::bindings::{HandlerPre, batch};
use super::cache::{Digest, ModuleCache};
use super::engine::WasmEngine;
use super::host::HostState;

/// Largest component accepted, in bytes (Python components are 18–35 MB).
pub const MAX_COMPONENT_BYTES: usize = 64 << 20;

/// A compiled, validated handler component, ready to instantiate.
#[derive(Clone)]
pub struct HandlerModule {
    inner: Arc<ModuleInner>,
}

/// A component's exports, checked: the 0.1.0 world (`handle`) or the
/// 0.2.0 world (`handle` and `handle-batch`).
pub(crate) enum Pre {
    Single(HandlerPre<HostState>),
    Batch(batch::HandlerPre<HostState>),
}

struct ModuleInner {
    engine: WasmEngine,
    pre: Pre,
    digest: Digest,
    size: usize,
    from_cache: bool,
}

impl fmt::Debug for HandlerModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerModule")
            .field("digest", &self.inner.digest)
            .field("size", &self.inner.size)
            .field("from_cache", &self.inner.from_cache)
            .finish_non_exhaustive()
    }
}

impl HandlerModule {
    /// The SHA-256 of the component's bytes.
    pub fn digest(&self) -> Digest {
        self.inner.digest
    }

    /// Size of the component's bytes.
    pub fn size(&self) -> usize {
        self.inner.size
    }

    /// Whether the compiled code came from the on-disk cache.
    pub fn from_cache(&self) -> bool {
        self.inner.from_cache
    }

    /// The engine it was compiled for.
    pub fn engine(&self) -> &WasmEngine {
        &self.inner.engine
    }

    pub(crate) fn pre(&self) -> &Pre {
        &self.inner.pre
    }

    /// Whether it exports `handle-batch` (`rheo:handler@0.2.0`), so the
    /// host may hand it several deliveries in one call.
    pub fn batches(&self) -> bool {
        matches!(self.inner.pre, Pre::Batch(_))
    }

    /// Refuses a `batch_size` above 1 for a module that exports no
    /// `handle-batch`, saying what to do instead (a deploy and
    /// `rheo bench --batch-size` ask this).
    pub fn check_batch_size(&self, batch_size: usize) -> Result<(), String> {
        if batch_size > 1 && !self.batches() {
            return Err(format!(
                "batch_size {batch_size} needs a module that exports handle-batch (the \
                 rheo:handler@0.2.0 world); this one exports only handle (0.1.0): rebuild it \
                 with the current SDK, or use a batch size of 1"
            ));
        }
        Ok(())
    }
}

impl WasmEngine {
    /// Compiles (or loads from `cache`) and validates a handler component.
    /// Runs the expensive part on a blocking thread.
    pub async fn load(
        &self,
        bytes: impl Into<Arc<[u8]>>,
        cache: Option<&ModuleCache>,
    ) -> Result<HandlerModule, WasmError> {
        let bytes: Arc<[u8]> = bytes.into();
        let engine = self.clone();
        let cache = cache.cloned();
        tokio::task::spawn_blocking(move || engine.load_blocking(&bytes, cache.as_ref()))
            .await
            .map_err(|e| WasmError::Compile(format!("the compile task failed: {e}")))?
    }

    /// [`WasmEngine::load`] on the current thread, for callers that already
    /// are on a blocking thread.
    pub fn load_blocking(
        &self,
        bytes: &[u8],
        cache: Option<&ModuleCache>,
    ) -> Result<HandlerModule, WasmError> {
        check_component_header(bytes)?;
        let digest = Digest::of(bytes);
        let (component, from_cache) = match cache {
            Some(cache) => cache.get_or_compile(self.engine(), &digest, bytes)?,
            None => (compile(self, bytes)?, false),
        };
        let pre = self.validate(&component)?;
        Ok(HandlerModule {
            inner: Arc::new(ModuleInner {
                engine: self.clone(),
                pre,
                digest,
                size: bytes.len(),
                from_cache,
            }),
        })
    }

    /// Imports satisfiable, `handle` exported with the right type, and
    /// `handle-batch` too if the component exports one.
    fn validate(&self, component: &Component) -> Result<Pre, WasmError> {
        let instance_pre = self
            .linker()
            .instantiate_pre(component)
            .map_err(|e| WasmError::Imports(format!("{e:#}")))?;
        let exports = |e: wasmtime::Error| WasmError::Exports(format!("{e:#}"));
        if component.get_export_index(None, "handle-batch").is_some() {
            batch::HandlerPre::new(instance_pre)
                .map(Pre::Batch)
                .map_err(exports)
        } else {
            HandlerPre::new(instance_pre)
                .map(Pre::Single)
                .map_err(exports)
        }
    }
}

/// Compiles `bytes` for `engine` (already header-checked).
pub(crate) fn compile(engine: &WasmEngine, bytes: &[u8]) -> Result<Component, WasmError> {
    Component::new(engine.engine(), bytes).map_err(|e| WasmError::Compile(format!("{e:#}")))
}

/// Refuses what is clearly not a component before handing it to the
/// compiler, with a message that says what it is instead.
fn check_component_header(bytes: &[u8]) -> Result<(), WasmError> {
    if bytes.len() > MAX_COMPONENT_BYTES {
        return Err(WasmError::NotAComponent(format!(
            "{} bytes is more than the maximum of {MAX_COMPONENT_BYTES}",
            bytes.len()
        )));
    }
    let Some(header) = bytes.get(..8) else {
        return Err(WasmError::NotAComponent(format!(
            "{} bytes is too short to be WebAssembly",
            bytes.len()
        )));
    };
    if &header[..4] != b"\0asm" {
        return Err(WasmError::NotAComponent(
            "no WebAssembly header (\\0asm); WAT text and precompiled files are not accepted"
                .into(),
        ));
    }
    // Bytes 4..8: version and layer. Core modules are version 1, layer 0;
    // components are layer 1.
    match header[6..8] {
        [1, 0] => Ok(()),
        [0, 0] => Err(WasmError::NotAComponent(
            "this is a core WebAssembly module, not a component: build the guest for \
             wasm32-wasip2 (or wrap it with `wasm-tools component new`)"
                .into(),
        )),
        _ => Err(WasmError::NotAComponent(format!(
            "unknown WebAssembly layer/version {:02x?}",
            &header[4..8]
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_tell_modules_components_and_junk_apart() {
        let core = b"\0asm\x01\0\0\0";
        let component = b"\0asm\x0d\0\x01\0";
        assert!(check_component_header(component).is_ok());
        let err = check_component_header(core).unwrap_err().to_string();
        assert!(err.contains("core WebAssembly module"), "{err}");
        assert!(check_component_header(b"(component)").is_err());
        assert!(check_component_header(b"\0asm").is_err());
    }
}
