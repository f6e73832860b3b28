//! Target `manifest`: handler manifests (`docs/handlers.md#manifests`, TOML
//! in the handlers directory, TOML or JSON over the API) and the `rheo
//! serve` configuration file (`config.rs`). Any text parses or is refused
//! without a panic; a manifest that validates is written back (`to_toml`,
//! as the handlers directory stores it, and JSON) and read to an equal one.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::{config, corpus, mutant, run};
use crate::config::{ServeConfig, ServeOptions};
use crate::handlers::{InstanceSetting, Manifest};
use crate::model::{GroupName, HandlerName, StreamName};

/// The name a manifest is deployed under in these tests.
fn handler() -> HandlerName {
    HandlerName::parse("h").unwrap()
}

/// The target's property for one text: parsing and checking never panic;
/// a valid manifest round-trips through TOML and JSON.
fn check(text: &str) -> Result<(), TestCaseError> {
    if let Ok(options) = toml::from_str::<ServeOptions>(text) {
        let _ = ServeConfig::resolve(options);
    }
    let Ok(manifest) = Manifest::from_toml(text) else {
        return Ok(());
    };
    let name = manifest.name.clone().unwrap_or_else(handler);
    if manifest.validate(&name).is_ok() {
        round_trip(&manifest)?;
    }
    Ok(())
}

/// A valid manifest reads back equal from its TOML and its JSON.
fn round_trip(manifest: &Manifest) -> Result<(), TestCaseError> {
    let toml = manifest.to_toml();
    let read = Manifest::from_toml(&toml);
    prop_assert_eq!(read.as_ref(), Ok(manifest), "written as {:?}", toml);
    let json = serde_json::to_vec(manifest).unwrap();
    let read = Manifest::from_json(&json);
    prop_assert_eq!(read.as_ref(), Ok(manifest));
    Ok(())
}

#[test]
fn corpus_manifests_parse_and_round_trip() {
    for (name, bytes) in corpus("manifest") {
        let text = String::from_utf8(bytes).expect("corpus manifests are UTF-8");
        check(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let valid = Manifest::from_toml(&text)
            .is_ok_and(|m| m.validate(&m.name.clone().unwrap_or_else(handler)).is_ok());
        if name.starts_with("valid-") {
            assert!(valid, "{name} is refused");
        } else if name.starts_with("invalid-") {
            assert!(!valid, "{name} is accepted");
        }
    }
}

#[test]
fn arbitrary_manifest_text_is_parsed_or_refused() {
    let key = proptest::sample::select(vec![
        "name",
        "stream",
        "group",
        "module",
        "concurrency",
        "batch_size",
        "batch_wait_ms",
        "max_demand",
        "lease_ms",
        "partitions",
        "timeout_ms",
        "memory_mb",
        "fuel",
        "instance",
        "max_invocations",
        "max_retry_delay_ms",
        "append_to",
        "backend",
        "listen",
        "body_limit",
        "[config]",
    ]);
    let toml_value = prop_oneof![
        "-?[0-9_]{1,22}",
        "\"[a-z.\\\\\"é ]{0,12}\"",
        "\\[[0-9, \"a-z]{0,12}\\]",
        Just("true".to_owned()),
        Just("\"fresh\"".to_owned()),
        Just("1e3".to_owned()),
        Just("inf".to_owned()),
    ];
    let line = (key, toml_value).prop_map(|(k, v)| format!("{k} = {v}\n"));
    let text = prop_oneof![
        any::<String>(),
        "[\\[\\]a-z_=\" .0-9#\n-]{0,80}",
        mutant("manifest").prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        proptest::collection::vec(line, 0..8)
            .prop_map(|lines| { format!("stream = \"s\"\ngroup = \"g\"\n{}", lines.concat()) }),
    ];
    run(config(8000, file!()), text, |text| check(&text));
}

/// The generated settings of a manifest, grouped as generated.
type Settings = (
    (Option<String>, String, String, Option<String>),
    (usize, usize, u64, u64, u64, Option<u64>),
    (u64, u64, bool, usize, u64),
    Option<Vec<u32>>,
    Option<Vec<String>>,
    BTreeMap<String, String>,
);

#[test]
fn generated_valid_manifests_round_trip() {
    let big = || prop_oneof![0..100_000u64, any::<u64>()];
    let name = "[a-z][a-z0-9_.-]{0,8}";
    let settings = (
        (
            proptest::option::of(name),
            name,
            name,
            proptest::option::of("[a-z/.]{1,12}"),
        ),
        (
            0..300usize,
            0..1100usize,
            big(),
            big(),
            big(),
            proptest::option::of(big()),
        ),
        (big(), big(), any::<bool>(), 0..1100usize, big()),
        proptest::option::of(proptest::collection::vec(0..1100u32, 0..4)),
        proptest::option::of(proptest::collection::vec(name, 0..3)),
        proptest::collection::btree_map(".{0,8}", ".{0,8}", 0..4),
    );
    run(
        config(8000, file!()),
        settings,
        |(
            (own, stream, group, module),
            (concurrency, max_demand, lease_ms, timeout_ms, memory_mb, fuel),
            (max_invocations, max_retry_delay_ms, fresh, batch_size, batch_wait_ms),
            partitions,
            append_to,
            config,
        ): Settings| {
            let manifest = Manifest {
                name: own.map(|n| HandlerName::parse(n).unwrap()),
                stream: StreamName::parse(stream).unwrap(),
                group: GroupName::parse(group).unwrap(),
                ordering: None,
                on_exhausted: None,
                flow: None,
                module,
                concurrency,
                batch_size,
                batch_wait_ms,
                max_demand,
                lease_ms,
                partitions,
                timeout_ms,
                memory_mb,
                fuel,
                instance: if fresh {
                    InstanceSetting::Fresh
                } else {
                    InstanceSetting::Reuse
                },
                max_invocations,
                max_retry_delay_ms,
                append_to: append_to.map(|list| {
                    list.into_iter()
                        .map(|s| StreamName::parse(s).unwrap())
                        .collect()
                }),
                config,
            };
            let name = manifest.name.clone().unwrap_or_else(handler);
            if manifest.validate(&name).is_ok() {
                round_trip(&manifest)?;
            }
            Ok(())
        },
    );
}
