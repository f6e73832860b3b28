//! Compiled modules cached on disk by content [`Digest`] (the SHA-256 of
//! a module's bytes, defined here because it is the cache's key; modules
//! and handler versions are identified by it too).
//!
//! Compiling a Python or JavaScript component takes seconds; loading the
//! precompiled code back takes about a millisecond (it is mapped, not
//! parsed). So the first load of some bytes compiles them and writes
//! `<sha256>-<engine>.cwasm`; every later load of the same bytes on a
//! compatible engine maps that file instead. `<engine>` is a hash of
//! wasmtime's own compatibility key (version, configuration, CPU
//! features), so an upgrade or a config change simply misses the cache.
//!
//! Loading precompiled code is `unsafe` in wasmtime: the file is trusted to
//! be machine code that wasmtime wrote, and it is not verified. The cache
//! therefore only ever loads files it wrote itself, into a directory that
//! must be private to the server (created `0700` on Unix). Files are
//! written to a temporary name and renamed into place, so a crash never
//! leaves a half-written file under a real name, and a file is never
//! changed in place: loaded code is *mapped*, and truncating a mapped file
//! kills the process with `SIGBUS` the next time that code runs. A file
//! that fails to load (corrupt, or from another engine) is deleted (which
//! leaves existing mappings intact) and recompiled.
//!
//! Deploys of different handlers compile at the same time. Two loads of
//! the same bytes do not both compile: the second waits for the first and
//! then maps the file it wrote.

use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use sha2::{Digest as _, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use super::WasmError;
use super::engine::WasmEngine;

/// The SHA-256 of a module's bytes: its identity across uploads, versions
/// and the compile cache.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest([u8; 32]);

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }

    /// The raw 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Lower-case hex, 64 characters.
    pub fn to_hex(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({self})")
    }
}

/// A directory of precompiled modules.
#[derive(Debug, Clone)]
pub struct ModuleCache {
    dir: Arc<PathBuf>,
    /// Compiles under way, by digest (see the module doc).
    compiling: Arc<Mutex<HashMap<Digest, Arc<Mutex<()>>>>>,
}

/// Makes temporary file names unique within the process.
static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl ModuleCache {
    /// Uses (creating it if needed) `dir`, which only this server may write.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self, WasmError> {
        let dir = dir.into();
        let io = |e: std::io::Error| WasmError::Cache(format!("{}: {e}", dir.display()));
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(&dir).map_err(io)?;
        Ok(Self {
            dir: Arc::new(dir),
            compiling: Arc::default(),
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the compiled form of `digest` for `engine` lives.
    pub fn path_for(&self, engine: &WasmEngine, digest: &Digest) -> PathBuf {
        self.file_for(engine.engine(), digest)
    }

    fn file_for(&self, engine: &Engine, digest: &Digest) -> PathBuf {
        self.dir
            .join(format!("{digest}-{}.cwasm", engine_key(engine)))
    }

    /// The cached component for `digest`, or `bytes` compiled and cached.
    /// The flag says whether it came from the cache. Blocks: call it on a
    /// blocking thread.
    pub(crate) fn get_or_compile(
        &self,
        engine: &Engine,
        digest: &Digest,
        bytes: &[u8],
    ) -> Result<(Component, bool), WasmError> {
        let path = self.file_for(engine, digest);
        if let Some(component) = self.cached(engine, &path) {
            return Ok((component, true));
        }
        let turn = Arc::clone(self.compiling.lock().entry(*digest).or_default());
        let result = {
            let _compiling = turn.lock();
            // Whoever compiled these bytes meanwhile left them here.
            match self.cached(engine, &path) {
                Some(component) => Ok((component, true)),
                None => self.compile(engine, &path, bytes).map(|c| (c, false)),
            }
        };
        let mut compiling = self.compiling.lock();
        // Two holders left (the map and `turn`): nobody else waits.
        if compiling
            .get(digest)
            .is_some_and(|t| Arc::strong_count(t) == 2)
        {
            compiling.remove(digest);
        }
        result
    }

    /// The component mapped from `path`, when it is there and loads.
    fn cached(&self, engine: &Engine, path: &Path) -> Option<Component> {
        if !path.is_file() {
            return None;
        }
        match load_precompiled(engine, path) {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %format!("{e:#}"),
                    "discarding an unloadable precompiled module");
                let _ = std::fs::remove_file(path);
                None
            }
        }
    }

    /// Compiles `bytes` and writes the result to `path`.
    fn compile(&self, engine: &Engine, path: &Path, bytes: &[u8]) -> Result<Component, WasmError> {
        let component =
            Component::new(engine, bytes).map_err(|e| WasmError::Compile(format!("{e:#}")))?;
        match component.serialize() {
            Ok(compiled) => {
                if let Err(e) = self.write_atomically(path, &compiled) {
                    // A cache that cannot be written costs a recompile next
                    // time, nothing else.
                    tracing::warn!(path = %path.display(), error = %e,
                        "could not cache a compiled module");
                }
            }
            Err(e) => tracing::warn!(error = %format!("{e:#}"), "could not serialize a module"),
        }
        Ok(component)
    }

    fn write_atomically(&self, path: &Path, data: &[u8]) -> std::io::Result<()> {
        let n = TMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = path.with_extension(format!("tmp{}-{n}", std::process::id()));
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(data)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, path)
    }
}

/// Maps a precompiled component from `path`.
///
/// Only ever called on files in the cache directory that
/// [`ModuleCache::get_or_compile`] wrote from `Component::serialize` on an
/// engine with the same compatibility key (which is part of the file name).
#[allow(unsafe_code)]
fn load_precompiled(engine: &Engine, path: &Path) -> wasmtime::Result<Component> {
    // SAFETY: wasmtime requires that the file holds code it produced itself,
    // unmodified: it maps and runs it without verification. The cache
    // directory is private to this server (mode 0700), files enter it only
    // through `write_atomically` with bytes from `Component::serialize`, and
    // wasmtime still checks the header, version and engine configuration
    // and refuses a mismatch.
    unsafe { Component::deserialize_file(engine, path) }
}

/// A short stable hash of what makes compiled code loadable by `engine`.
fn engine_key(engine: &Engine) -> String {
    /// Feeds `Hash` output into SHA-256: stable across Rust releases,
    /// unlike `DefaultHasher`.
    struct Sha(Sha256);
    impl Hasher for Sha {
        fn finish(&self) -> u64 {
            0
        }
        fn write(&mut self, bytes: &[u8]) {
            self.0.update(bytes);
        }
    }
    let mut hasher = Sha(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut hasher);
    let digest = hasher.0.finalize();
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_sha256_in_hex() {
        assert_eq!(
            Digest::of(b"abc").to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
