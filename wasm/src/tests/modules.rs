//! Loading modules: what is refused and why, digests, and the on-disk cache
//! of compiled code.

use std::path::PathBuf;

use serde_json::json;

use super::{backend, engine, frozen, guest, lease};
use crate::model::HandlerName;
use crate::settle::HandlerOutcome;
use crate::{Digest, HandlerEnv, HandlerRunner, Limits, ModuleCache, WasmError};

/// An empty core module: valid WebAssembly, but not a component.
const CORE_MODULE: &[u8] = b"\0asm\x01\0\0\0";
/// An empty component: valid, but it exports nothing.
const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\0\x01\0";

#[tokio::test]
async fn a_core_module_is_refused_with_a_hint() {
    let err = engine().load(CORE_MODULE, None).await.unwrap_err();
    assert!(matches!(err, WasmError::NotAComponent(_)), "{err:?}");
    assert!(err.to_string().contains("wasm32-wasip2"), "{err}");
}

#[tokio::test]
async fn bytes_that_are_not_webassembly_are_refused() {
    for junk in [&b"hello"[..], b"(component)", b""] {
        let err = engine().load(junk, None).await.unwrap_err();
        assert!(matches!(err, WasmError::NotAComponent(_)), "{err:?}");
    }
}

#[tokio::test]
async fn a_component_without_the_handle_export_is_refused() {
    let err = engine().load(EMPTY_COMPONENT, None).await.unwrap_err();
    assert!(matches!(err, WasmError::Exports(_)), "{err:?}");
    assert!(err.to_string().contains("handle"), "{err}");
}

#[tokio::test]
async fn a_truncated_component_is_a_compile_error() {
    let echo = guest("echo");
    let err = engine()
        .load(&echo[..echo.len() / 2], None)
        .await
        .unwrap_err();
    assert!(matches!(err, WasmError::Compile(_)), "{err:?}");
}

#[tokio::test]
async fn modules_carry_the_sha256_of_their_bytes() {
    let bytes = guest("echo");
    let module = engine().load(bytes.clone(), None).await.unwrap();
    assert_eq!(module.digest(), Digest::of(&bytes));
    assert_eq!(module.digest().to_hex().len(), 64);
    assert_eq!(module.size(), bytes.len());
    assert!(!module.from_cache());
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "rheo-wasm-{name}-{}-{}",
            std::process::id(),
            rand::random::<u64>()
        ));
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test]
async fn compiled_modules_are_cached_by_digest_and_bad_files_recompiled() {
    let dir = TempDir::new("cache");
    let cache = ModuleCache::open(&dir.0).unwrap();
    let bytes = guest("echo");

    let first = engine().load(bytes.clone(), Some(&cache)).await.unwrap();
    assert!(!first.from_cache());
    let path = cache.path_for(&engine(), &first.digest());
    assert!(path.is_file(), "{} was not written", path.display());

    // A damaged file is thrown away and replaced, not loaded. It is
    // replaced by a rename, as the cache itself does: a file that is
    // mapped must never be changed in place.
    let damaged = dir.0.join("damaged");
    std::fs::write(&damaged, b"not compiled code").unwrap();
    std::fs::rename(&damaged, &path).unwrap();
    let second = engine().load(bytes.clone(), Some(&cache)).await.unwrap();
    assert!(!second.from_cache());
    assert_ne!(std::fs::read(&path).unwrap(), b"not compiled code");

    let third = engine().load(bytes, Some(&cache)).await.unwrap();
    assert!(third.from_cache());
    assert_eq!(third.digest(), first.digest());

    // Code from the cache runs like freshly compiled code.
    let env = HandlerEnv::new(HandlerName::parse("echo").unwrap(), backend(frozen()));
    let echo = HandlerRunner::new(third, env, Limits::default()).unwrap();
    assert_eq!(
        echo.invoke(&lease("e-1", json!({}), 1)).await,
        HandlerOutcome::Ack
    );
}
