//! `rheo demo`, run as the README tells a new user to.

use rheo_e2e::rheo_binary;

#[test]
fn the_demo_tells_the_whole_story_and_ends_caught_up() {
    // From an empty folder, as an installed `rheo` would run: the binary
    // carries its example guests and needs no source tree.
    let folder = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(rheo_binary())
        .args(["demo", "--swap-events", "600"])
        .current_dir(folder.path())
        .env_remove("RUST_LOG")
        .output()
        .expect("run rheo demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "rheo demo failed:\n{stdout}\n{stderr}"
    );
    for expected in [
        "created stream `orders` with 3 partitions",
        "duplicate = true",
        "deployed `billing` = guests/transform v1",
        // The poison guest's reason, in the dead letters.
        "dead letter order-4",
        "\"card declined by issuer\"",
        // The frontier stops at the hole, then jumps.
        "acks after a gap do not move the frontier",
        "hole filled:",
        "order-7:transformed caused by order-7",
        "12 deliveries re-opened",
        "`invoices` still holds 12 events",
        "swapped: `fraud` is now v2 (echo)",
        "no delivery failed because of the swap",
        "redrove 2 dead letters",
        "`fraud` has no dead letters",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
    // The three handler groups end with nothing left to do.
    for group in ["billing", "shipping", "fraud"] {
        let line = stdout
            .lines()
            .rev()
            .find(|l| l.trim_start().starts_with(&format!("{group} ")) && l.contains(" lag "))
            .unwrap_or_else(|| panic!("no lag line for {group}:\n{stdout}"));
        assert!(
            line.split_whitespace().nth(2) == Some("0"),
            "{group} is not caught up: {line}"
        );
    }
    // The last handler table: shipping acked 12 + 600 orders, each on its
    // third attempt, so it asked for two retries per order.
    let shipping: Vec<&str> = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with("shipping ") && !l.contains(" lag "))
        .unwrap_or_else(|| panic!("no counters for shipping:\n{stdout}"))
        .split_whitespace()
        .collect();
    // handler version processed acked retried rejected
    assert_eq!(shipping[3..], ["612", "1224", "0"], "{stdout}");
}
