//! Rheo's end-to-end tests: one test binary (linked once), a module per
//! area. Each drives the real `rheo` binary from outside, as a user or an
//! operator would (`docs/testing.md#end-to-end-tests`); `support` holds
//! what they share. `scripts/run-tests` runs each area as a process of its
//! own (`e2e:<area>`), the slowest first.

mod api_groups;
mod api_handlers;
mod api_streams;
mod backup;
mod chaos;
mod cli;
mod cluster;
mod console;
mod contract;
mod demo;
mod docs;
mod examples;
mod handler_new;
mod http_clients;
mod licenses;
mod mongo_nodes;
mod mongo_restart;
mod operations;
mod ops_cli;
mod ordering;
mod polyglot;
mod python_hot_swap;
mod redis_nodes;
mod redis_restart;
mod serve;
mod support;
mod trust;
