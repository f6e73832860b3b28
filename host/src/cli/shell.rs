//! `rheo completions SHELL` and `rheo man`: what a shell and `man` need
//! to know of the command line, generated from the same definitions that
//! parse it, so they never disagree with `--help`.

use anyhow::Context;
use clap::{Args, CommandFactory};

use super::Cli;

#[derive(Debug, Args)]
#[command(after_help = "Examples:
  source <(rheo completions bash)                          # this bash session
  rheo completions bash > ~/.local/share/bash-completion/completions/rheo
  rheo completions zsh > \"${fpath[1]}/_rheo\"
  rheo completions fish > ~/.config/fish/completions/rheo.fish")]
pub(super) struct CompletionsArgs {
    /// The shell to complete `rheo` commands, flags and values in.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

impl CompletionsArgs {
    pub(super) fn run(self) -> anyhow::Result<()> {
        let mut command = Cli::command();
        let mut out = Vec::new();
        clap_complete::generate(self.shell, &mut command, "rheo", &mut out);
        super::ops::emit(&String::from_utf8_lossy(&out))
    }
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:
  rheo man | man -l -                          # read it now
  rheo man --dir ~/.local/share/man/man1       # then `man rheo`, `man rheo-serve`, …")]
pub(super) struct ManArgs {
    /// Write a page per command into this folder (rheo.1, rheo-serve.1,
    /// rheo-streams-create.1, …) instead of printing rheo(1).
    #[arg(long, value_name = "DIR")]
    dir: Option<std::path::PathBuf>,
}

impl ManArgs {
    /// Prints the manual page `rheo(1)` in roff, or writes one page per
    /// command into `--dir`: each with its arguments as `--help` has them.
    pub(super) fn run(self) -> anyhow::Result<()> {
        let command = Cli::command();
        let Some(dir) = self.dir else {
            let mut out = Vec::new();
            clap_mangen::Man::new(command)
                .render(&mut out)
                .context("cannot render the manual page")?;
            return super::ops::emit(&String::from_utf8_lossy(&out));
        };
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let pages = pages(&command);
        clap_mangen::generate_to(command, &dir)
            .with_context(|| format!("cannot write the manual pages into {}", dir.display()))?;
        println!("wrote {pages} manual pages into {}", dir.display());
        Ok(())
    }
}

/// How many pages `generate_to` writes for `command`: its own and one per
/// command under it that is not hidden.
fn pages(command: &clap::Command) -> usize {
    1 + command
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(pages)
        .sum::<usize>()
}
