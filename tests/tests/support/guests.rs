//! Guest components built outside cargo: the Python and JavaScript
//! handlers, each built by its language's `guests/<language>/build.sh` once
//! per test binary. Without the language's toolchain a test using them skips
//! and says why — unless `REQUIRE_GUESTS` (set by CI) lists the language, in
//! which case it fails.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Instant;

use rheo_e2e::repo_root;

/// A guest language other than Rust, with a `guests/<name>/build.sh` that
/// follows one contract: `build.sh OUT_DIR` builds every example and test
/// handler into `OUT_DIR/<name>.wasm` (nothing when they are up to date) and
/// exits 3 when the language's toolchain is not usable here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Guest {
    /// `guests/python`: componentize-py.
    Python,
    /// `guests/js`: componentize-qjs (QuickJS).
    Js,
}

impl Guest {
    /// Its name in `REQUIRE_GUESTS` and its folder under `guests/`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Guest::Python => "python",
            Guest::Js => "js",
        }
    }

    /// What its build needs installed, for messages.
    fn toolchain(self) -> &'static str {
        match self {
            Guest::Python => "Python",
            Guest::Js => "Node.js",
        }
    }

    /// The folder holding its `build.sh`, SDK, examples and tests.
    pub(crate) fn dir(self) -> PathBuf {
        repo_root().join("guests").join(self.name())
    }

    /// The folder of its built components, built (or found up to date) by
    /// its `build.sh` once per test run; `None` (with the reason printed)
    /// when its toolchain is not available here and not required.
    pub(crate) fn built(self) -> Option<&'static Path> {
        static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
        static JS: OnceLock<Result<PathBuf, String>> = OnceLock::new();
        let once = match self {
            Guest::Python => &PYTHON,
            Guest::Js => &JS,
        };
        match once.get_or_init(|| self.build()) {
            Ok(dir) => Some(dir),
            Err(why) if required(self.name()) => {
                panic!("{why}, but REQUIRE_GUESTS lists {}", self.name())
            }
            Err(why) => {
                eprintln!("skipping the {} guests: {why}", self.name());
                None
            }
        }
    }

    fn build(self) -> Result<PathBuf, String> {
        let script = self.dir().join("build.sh");
        let out_dir = self.dir().join("target");
        let started = Instant::now();
        let run = Command::new("bash")
            .arg(&script)
            .arg(&out_dir)
            .output()
            .map_err(|e| format!("cannot run bash: {e}"))?;
        let stdout = String::from_utf8_lossy(&run.stdout);
        let stderr = String::from_utf8_lossy(&run.stderr);
        match run.status.code() {
            Some(0) => {
                eprintln!(
                    "{} guests ready in {:.1} s:\n{stdout}",
                    self.name(),
                    started.elapsed().as_secs_f64()
                );
                Ok(out_dir)
            }
            // build.sh's code for "no usable toolchain here".
            Some(3) => Err(format!(
                "no {} toolchain: {}",
                self.toolchain(),
                stderr.trim()
            )),
            _ => panic!(
                "{} failed ({}):\n{stdout}\n{stderr}",
                script.display(),
                run.status
            ),
        }
    }
}

/// Whether `REQUIRE_GUESTS` lists `language`.
pub(crate) fn required(language: &str) -> bool {
    std::env::var("REQUIRE_GUESTS")
        .unwrap_or_default()
        .split(',')
        .any(|l| l.trim() == language)
}

/// The folder of the built Python components (see [`Guest::built`]).
pub(crate) fn python_guests() -> Option<&'static Path> {
    Guest::Python.built()
}

/// The bytes of `<dir>/<name>.wasm`.
pub(crate) fn read_module(dir: &Path, name: &str) -> Vec<u8> {
    let path = dir.join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}
