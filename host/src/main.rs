//! The `rheo` command.

fn main() {
    let version = env!("CARGO_PKG_VERSION");
    match std::env::args().nth(1).as_deref() {
        Some("--version" | "-V") => println!("rheo {version}"),
        _ => {
            println!("rheo {version}: durable consumer groups with WebAssembly handlers");
            println!();
            println!("usage: rheo --version");
        }
    }
}
