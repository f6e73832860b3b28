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
/// branch it names, packed refs) so a new commit re-runs this script.
fn git_commit() -> Option<String> {
    let git = |args: &[&str]| {
        let out = Command::new("git").args(args).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let git_dir = git(&["rev-parse", "--absolute-git-dir"])?;
    let git_dir = Path::new(&git_dir);
    println!("cargo::rerun-if-changed={}", git_dir.join("HEAD").display());
    println!(
        "cargo::rerun-if-changed={}",
        git_dir.join("packed-refs").display()
    );
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        println!("cargo::rerun-if-changed={}", git_dir.join(branch).display());
    }
    git(&["rev-parse", "--short=12", "HEAD"])
}
