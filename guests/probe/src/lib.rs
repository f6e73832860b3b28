//! Tries to get out of the sandbox and reports what it found.
//!
//! It reads `/etc/passwd`, connects to 127.0.0.1:5432, reads the `HOME`
//! environment variable and lists `/`, logging each result. If any attempt
//! yields data the delivery is rejected with `sandbox leak: …`; when all of
//! them fail it acks.

use std::io::Read;
use std::net::TcpStream;

use rheo_guest::{Delivery, Outcome};

fn handle(_delivery: Delivery) -> Outcome {
    let mut leaks = Vec::new();

    match std::fs::read_to_string("/etc/passwd") {
        Ok(text) if !text.is_empty() => {
            leaks.push(format!("read /etc/passwd ({} bytes)", text.len()));
        }
        Ok(_) => rheo_guest::log::info("read /etc/passwd: empty"),
        Err(e) => rheo_guest::log::info(&format!("read /etc/passwd: {e}")),
    }

    match TcpStream::connect("127.0.0.1:5432") {
        Ok(mut stream) => {
            let mut buf = [0u8; 1];
            let _ = stream.read(&mut buf);
            leaks.push("connected to 127.0.0.1:5432".to_owned());
        }
        Err(e) => rheo_guest::log::info(&format!("connect 127.0.0.1:5432: {e}")),
    }

    match std::env::var("HOME") {
        Ok(home) => leaks.push(format!("env HOME={home}")),
        Err(e) => rheo_guest::log::info(&format!("env HOME: {e}")),
    }

    match std::fs::read_dir("/") {
        Ok(entries) => {
            let names: Vec<String> = entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            if names.is_empty() {
                rheo_guest::log::info("list /: no entries");
            } else {
                leaks.push(format!("listed / ({})", names.join(", ")));
            }
        }
        Err(e) => rheo_guest::log::info(&format!("list /: {e}")),
    }

    // stdout goes to the host's log, line by line.
    println!("probe finished: {} leak(s)", leaks.len());

    if leaks.is_empty() {
        Outcome::Ack
    } else {
        Outcome::reject(format!("sandbox leak: {}", leaks.join("; ")))
    }
}

rheo_guest::handler!(handle);
