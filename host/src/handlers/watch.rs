//! Watching the handlers directory: file events, debounced, trigger
//! [`HandlerRegistry::sync_directory`].

use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::HandlerRegistry;

/// Quiet time after the last file event before reloading: long enough for
/// an editor's or a copy's several writes to land together.
const DEBOUNCE: Duration = Duration::from_millis(250);

/// Watches the registry's directory until `stop`; returns `None` when the
/// registry has no directory.
pub fn watch_directory(
    registry: Arc<HandlerRegistry>,
    stop: CancellationToken,
) -> Option<JoinHandle<()>> {
    let dir = registry.directory()?.to_path_buf();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(event) = event
            && event.paths.iter().any(|p| relevant(p))
        {
            let _ = tx.send(());
        }
    });
    let mut watcher = match watcher {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch the handlers directory; changes need a restart");
            return None;
        }
    };
    if let Err(e) = watcher.watch(&dir, RecursiveMode::NonRecursive) {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot watch the handlers directory; changes need a restart");
        return None;
    }
    Some(tokio::spawn(async move {
        // The watcher lives as long as this task.
        let _watcher = watcher;
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                got = rx.recv() => if got.is_none() { break },
            }
            // Debounce: wait until events stop for a moment.
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(DEBOUNCE) => break,
                    _ = rx.recv() => {}
                }
            }
            let changed = registry.sync_directory().await;
            if changed > 0 {
                tracing::info!(changed, "handlers directory reloaded");
            }
        }
    }))
}

/// Manifests and modules; not temporary files or Rheo's own state.
fn relevant(path: &std::path::Path) -> bool {
    path.extension().is_some_and(|e| e == "toml" || e == "wasm")
}
