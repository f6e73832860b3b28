//! Build script of the `rheo` binary: stamps the commit it was built from
//! into `rheo --version` (`RHEO_COMMIT`). A packager building from a
//! source archive without `.git` sets `RHEO_COMMIT` itself; otherwise the
//! commit is `unknown`.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo::rerun-if-env-changed=RHEO_COMMIT");
    let commit = std::env::var("RHEO_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo::rustc-env=RHEO_COMMIT={commit}");
}

/// `git rev-parse --short=12 HEAD`, watching what moves it (HEAD, the
/// branches, packed refs) so a new commit re-runs this script.
fn git_commit() -> Option<String> {
    let git = |args: &[&str]| {
        let out = Command::new("git").args(args).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let git_dir = git(&["rev-parse", "--absolute-git-dir"])?;
    let git_dir = Path::new(&git_dir);
    // Only paths that exist: cargo re-runs the script on every build for
    // a missing one. A commit rewrites its branch's file under refs/heads
    // (a folder is watched whole); a checkout rewrites HEAD.
    for watched in ["HEAD", "refs/heads", "packed-refs"] {
        let path = git_dir.join(watched);
        if path.exists() {
            println!("cargo::rerun-if-changed={}", path.display());
        }
    }
    git(&["rev-parse", "--short=12", "HEAD"])
}
